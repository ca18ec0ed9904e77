"""The partition stage's producer agent in tests: a private agent folder per test (one per
simulated host), agents stopped and the folder removed after it, and an agent served in the test's
own process when a test needs to break its producer."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.connection import Client, Listener
from pathlib import Path

from bench.reduce.partition_agent import BACKLOG, ProducerAgent, Server
from bench.reduce.partition_agent_client import AgentPaths, request


@contextmanager
def agent_home() -> Iterator[Path]:
    """A fresh agent folder (short: a Unix socket path has ~100 bytes), its agents stopped after."""
    folder = Path(tempfile.mkdtemp(prefix="bsa-", dir="/tmp"))
    try:
        yield folder
    finally:
        for sock in folder.glob("*.sock"):
            try:
                with Client(str(sock), "AF_UNIX", authkey=sock.with_suffix(".key").read_bytes()) as conn:
                    (pid,) = request(conn, "ping")
                os.kill(pid, signal.SIGKILL)
            except (OSError, EOFError):
                pass  # already gone
        shutil.rmtree(folder, ignore_errors=True)  # an agent a late task started exits without its socket
        subprocess.run(["pkill", "-9", "-f", f"--socket {folder}/"], check=False)


def serve_in_process(paths: AgentPaths, agent: ProducerAgent) -> Server:
    """``agent`` served at ``paths`` from a thread of this process (stop it with ``.stop()``)."""
    paths.socket.unlink(missing_ok=True)  # a killed agent's
    if not paths.key.exists():
        paths.key.write_bytes(os.urandom(32))
    listener = Listener(str(paths.socket), "AF_UNIX", BACKLOG, authkey=paths.key.read_bytes())
    server = Server(listener, agent, 600.0)
    threading.Thread(target=server.serve, daemon=True).start()
    return server
