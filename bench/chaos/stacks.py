"""Every service's thread stacks, written beside its log when a run ends without the pipeline
having caught up (windows never due, or the lag never back under target).

Why: a service that stops making progress without logging a word leaves nothing to read once the
run is torn down. Each ``ballast`` process writes its Python threads' stacks to its log on SIGUSR1
(``ballast.cli.main``); each JVM under a service (the reduce's Spark driver) is asked with
``jstack`` into ``jstack-<pid>.txt`` in the service's folder.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

from ballast.harness.pipeline import Pipeline


def _children(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = Path(f"/proc/{p}/task").iterdir()
            kids = [int(c) for t in tasks for c in (t / "children").read_text().split()]
        except OSError:
            continue
        found += kids
        todo += kids
    return found


def _is_java(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/exe").resolve().name == "java"
    except OSError:
        return False


def dump_stacks(pipe: Pipeline) -> list[str]:
    """SIGUSR1 to every running service's main process, ``jstack`` of every JVM under it; what was
    written where."""
    written = []
    jstack = shutil.which("jstack")
    for service in pipe.state.services:
        if service.pid is None or not pipe.running(service.name):
            continue
        try:
            os.kill(service.pid, signal.SIGUSR1)
            written.append(f"{service.name}: Python stacks in {service.log}")
        except OSError:
            continue
        for pid in (c for c in _children(service.pid) if _is_java(c)):
            if jstack is None:
                break
            out = Path(service.log).parent / f"jstack-{pid}.txt"
            try:
                done = subprocess.run([jstack, str(pid)], capture_output=True, timeout=60, check=False)
            except subprocess.TimeoutExpired:
                continue
            out.write_bytes(done.stdout + done.stderr)
            written.append(f"{service.name}: JVM {pid} stacks in {out}")
    return written
