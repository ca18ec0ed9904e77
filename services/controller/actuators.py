"""Acting on an applied scaling decision: a command the operator names per stage (``--router-hook``,
``--reduce-hook``).

Why a command and not a client of some orchestrator: Ballast's routers and its Spark reduce run as
the operator runs them (a Deployment, systemd units, spark-submit on a cluster, the local stack's
supervisor); a command with the decision in its environment fits every one (``kubectl scale
deployment/ballast-router --replicas $BALLAST_SCALING_TO``). For the reduce the log's ``SCALE``
already moved the hashed workers; the hook gives them the compute (cores, executors). It runs after
the decision is committed to the control log (the log says what was decided; the hook does it), in
the background so the controller's loop never waits on it, one at a time: a newer decision waits for
the running one. Its exit status and the tail of its output are logged and a failure is counted;
the next evaluation sees the instances that really run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HookCall:
    stage: str
    before: int
    after: int
    epoch: int


@dataclass(frozen=True)
class HookResult:
    call: HookCall
    returncode: int | None  # None: killed at the time limit
    output: str
    seconds: float


class ScalingHook:
    def __init__(self, command: str, timeout_s: float = 60.0, stage: str = "router") -> None:
        self.command = command
        self.timeout_s = timeout_s
        self.stage = stage
        self._queue: deque[HookCall] = deque()
        self._running: tuple[HookCall, subprocess.Popen, float, Any] | None = None
        self.failures = 0
        self.done: list[HookResult] = []

    def submit(self, call: HookCall) -> None:
        self._queue.append(call)
        self.poll()

    def poll(self) -> list[HookResult]:
        """Finish the running call if it ended (or ran out of time), start the next; what ended."""
        ended = []
        if self._running is not None:
            call, proc, started, out_file = self._running
            took = time.monotonic() - started
            code = proc.poll()
            if code is None and took > self.timeout_s:
                _kill_group(proc)
            if code is not None or took > self.timeout_s:
                out_file.seek(0)
                out = out_file.read()
                out_file.close()
                ended.append(self._ended(HookResult(call, code, out[-2000:], took)))
                self._running = None
        if self._running is None and self._queue:
            call = self._queue.popleft()
            env = {
                **os.environ,
                "BALLAST_SCALING_STAGE": call.stage,
                "BALLAST_SCALING_FROM": str(call.before),
                "BALLAST_SCALING_TO": str(call.after),
                "BALLAST_SCALING_EPOCH": str(call.epoch),
            }
            out_file = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed in poll; a pipe blocks)
            # a session of its own: at the time limit the whole group goes, not the shell alone
            proc = subprocess.Popen(self.command, shell=True, env=env, text=True, stdout=out_file,
                                    stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
            self._running = (call, proc, time.monotonic(), out_file)
        return ended

    def _ended(self, r: HookResult) -> HookResult:
        self.done.append(r)
        del self.done[:-100]
        if r.returncode == 0:
            log.info("%s hook: %s -> %s done in %.1f s", self.stage, r.call.before, r.call.after, r.seconds)
        else:
            self.failures += 1
            what = "timed out" if r.returncode is None else f"exited {r.returncode}"
            log.error("%s hook for %s -> %s (epoch %d) %s after %.1f s: %s", self.stage, r.call.before,
                      r.call.after, r.call.epoch, what, r.seconds, r.output.strip()[-500:])  # fmt: skip
        return r

    def close(self, wait_s: float = 5.0) -> None:
        deadline = time.monotonic() + wait_s
        while self._running is not None and time.monotonic() < deadline:
            self.poll()
            time.sleep(0.05)
        if self._running is not None:
            _kill_group(self._running[1])


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
