"""CPU seconds a contender's processes spent, sampled from ``/proc`` while it runs.

Why beside the wall clock: the machine is shared, and a batch's duration also measures everyone
else's load; the CPU a contender's own processes (the driver, Spark's JVM, its Python workers)
burned over the same batches is what its work costs, and it splits by process kind: where the
time goes, JVM or Python. Linux only (``/proc``); elsewhere the samples are empty.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

PROC = Path("/proc")


def _processes() -> dict[int, tuple[int, float, str]]:
    """pid -> (parent pid, CPU seconds so far, command line)."""
    hz = os.sysconf("SC_CLK_TCK")
    out: dict[int, tuple[int, float, str]] = {}
    for entry in PROC.iterdir() if PROC.exists() else ():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        out[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / hz, cmd)
    return out


def kind(cmd: str) -> str:
    if "pyspark.daemon" in cmd or "bench.reduce.partition_agent" in cmd:  # the agent: the workers' producing
        return "python_workers"
    return "jvm" if cmd.split(" ", 1)[0].endswith("java") else "driver"


def _tree(procs: dict[int, tuple[int, float, str]], marker: str) -> set[int]:
    """The processes whose command line holds ``marker``, and all their descendants."""
    members = {pid for pid, (_pp, _c, cmd) in procs.items() if marker in cmd}
    grew = True
    while grew:
        grew = False
        for pid, (parent, _c, _cmd) in procs.items():
            if parent in members and pid not in members:
                members.add(pid)
                grew = True
    return members


def tree_cpu(marker: str) -> dict[str, float]:
    """CPU seconds by kind of every process whose command line holds ``marker``, and their descendants."""
    procs = _processes()
    members = _tree(procs, marker)
    out: dict[str, float] = {}
    for pid in members:
        _parent, cpu, cmd = procs[pid]
        out[kind(cmd)] = out.get(kind(cmd), 0.0) + cpu
    return out


def jvm_threads(marker: str) -> dict[str, float]:
    """CPU seconds of each thread group of the Java processes under ``marker``'s process tree, by
    thread name with digits folded (``Executor task launch worker for task 12`` and ``... 13`` are
    one group; Linux cuts names at 15 characters). Why: a JVM's CPU alone does not say whether the
    tasks, the JIT, the GC or the Python gateway's threads spent it."""
    procs = _processes()
    members = _tree(procs, marker)
    hz = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for pid in members:
        if kind(procs[pid][2]) != "jvm":
            continue
        for task in (PROC / str(pid) / "task").iterdir():
            try:
                stat = (task / "stat").read_text()
            except OSError:
                continue
            name = "".join("#" if c.isdigit() else c for c in stat[stat.index("(") + 1 : stat.rindex(")")])
            fields = stat[stat.rindex(")") + 2 :].split()
            out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / hz
    return out


class CpuSampler(threading.Thread):
    """Samples :func:`tree_cpu` every ``every`` seconds until stopped."""

    def __init__(self, marker: str, every: float = 0.5) -> None:
        super().__init__(daemon=True, name="bench-cpu")
        self.marker = marker
        self.every = every
        self.samples: list[tuple[float, dict[str, float]]] = []  # (epoch ms, CPU s by kind)
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            self.samples.append((time.time() * 1000, tree_cpu(self.marker)))
            self._stop_event.wait(self.every)

    def stop(self) -> None:
        self._stop_event.set()
        self.join(5)

    def _at(self, ms: float) -> dict[str, float]:
        found: dict[str, float] = {}
        for t, cpu in self.samples:
            if t > ms:
                break
            found = cpu
        return found

    def between(self, start_ms: float, end_ms: float) -> dict[str, float]:
        """CPU seconds by kind spent from ``start_ms`` to ``end_ms`` (the nearest samples before each)."""
        a, b = self._at(start_ms), self._at(end_ms)
        return {k: round(b.get(k, 0.0) - a.get(k, 0.0), 2) for k in sorted(set(a) | set(b))}
