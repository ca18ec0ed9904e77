"""Speaking to the host's producer agent (:mod:`bench.reduce.partition_agent`), starting it on
first use.

One agent per (Kafka cluster, job) and host: its socket, key, lock and log sit in
``BALLAST_STAGE_AGENT_DIR`` (default ``<tmp>/ballast-stage-agent-<uid>``, mode 0700), named by a
hash of the bootstrap servers and the job. The first task that finds no agent starts one under a
file lock (so two Python workers do not both start one) in a session of its own: it outlives the
Python worker, the query and a ``kill -9`` of the Spark job, as a host daemon would, and exits
after ``BALLAST_STAGE_AGENT_IDLE_S`` seconds (default 120) without a session, or on
:func:`stop_agent`.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Client, Connection
from pathlib import Path
from typing import Any

START_S = 30.0


class AgentError(RuntimeError):
    """The agent refused or failed a request; the task fails and Spark retries it."""


@dataclass(frozen=True)
class AgentPaths:
    socket: Path
    key: Path
    lock: Path
    log: Path


def agent_paths(bootstrap: str, job: str) -> AgentPaths:
    folder = Path(os.environ.get("BALLAST_STAGE_AGENT_DIR")
                  or Path(tempfile.gettempdir()) / f"ballast-stage-agent-{os.getuid()}")  # fmt: skip
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    if folder.stat().st_uid != os.getuid() or folder.stat().st_mode & 0o077:
        raise PermissionError(f"{folder}: the agent's folder must be this user's alone (mode 0700)")
    name = hashlib.sha256(f"{bootstrap}\0{job}".encode()).hexdigest()[:16]
    return AgentPaths(*(folder / f"{name}.{suffix}" for suffix in ("sock", "key", "lock", "log")))


def _dial(paths: AgentPaths) -> Connection | None:
    try:
        return Client(str(paths.socket), "AF_UNIX", authkey=paths.key.read_bytes())
    except (FileNotFoundError, ConnectionRefusedError, ConnectionResetError, EOFError):
        return None


def _start(paths: AgentPaths, owner: str) -> Connection:
    """Start the agent unless another process just did; a connection to it."""
    with open(paths.lock, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        conn = _dial(paths)
        if conn is not None:
            return conn
        if not paths.key.exists():
            fd = os.open(paths.key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(os.urandom(32))
        root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH")))))
        idle = os.environ.get("BALLAST_STAGE_AGENT_IDLE_S", "120")
        argv = [sys.executable, "-m", "bench.reduce.partition_agent", "--socket", str(paths.socket),
                "--key-file", str(paths.key), "--idle", idle, "--owner", owner]  # fmt: skip
        with open(paths.log, "ab") as out:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    env=env, start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            conn = _dial(paths)
            if conn is not None:
                return conn
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        tail = paths.log.read_text(errors="replace")[-2000:] if paths.log.exists() else ""
        raise AgentError(f"the producer agent did not start (exit {proc.poll()}); its log ends:\n{tail}")


def connect(bootstrap: str, job: str, owner: str = "") -> Connection:
    """A connection to the agent of ``job`` on this host, started (naming ``owner``) if none runs."""
    paths = agent_paths(bootstrap, job)
    return _dial(paths) or _start(paths, owner)


def request(conn: Connection, *message: Any) -> tuple:
    conn.send(message)
    reply = conn.recv()
    if reply[0] != "ok":
        raise AgentError(f"{reply[1]}: {reply[2]}")
    return reply[1:]


@dataclass
class Session:
    """One task's conversation with the agent about one transactional id."""

    conn: Connection
    txid: str
    token: str
    generation: int
    init_ms: float

    def commit(self, writes: list[tuple[str, int | None, list]]) -> int:
        (last,) = request(self.conn, "commit", self.txid, self.generation, writes)
        return int(last)

    def close(self) -> None:
        self.conn.close()


def open_session(bootstrap: str, job: str, config: dict[str, Any], owner: str = "") -> Session:
    """A new generation of ``config``'s transactional id (its producer opened if the agent had none).
    An agent that exits just as it is reached is started again, once."""
    for attempt in (1, 2):
        conn = connect(bootstrap, job, owner)
        try:
            token, generation, init_ms = request(conn, "open", config)
            return Session(conn, config["transactional.id"], token, generation, init_ms)
        except (EOFError, ConnectionResetError, BrokenPipeError):
            conn.close()
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def stop_agent(bootstrap: str, job: str) -> bool:
    """Stop the agent if one runs; whether one did."""
    conn = _dial(agent_paths(bootstrap, job))
    if conn is None:
        return False
    try:
        request(conn, "stop")
    except (EOFError, ConnectionResetError):
        pass
    finally:
        conn.close()
    return True
