"""The faults, injected and ended on the campaign's clock, and a supervisor for services that exit on
their own.

Why a state machine ticked by the run loop and not a thread per fault: the loop also prints
progress and supervises, and every fault must be in a known phase when the run ends (a stopped
process continued, a killed one restarted) whatever happened. Each fault goes through

``pending`` → ``injected`` (killed, stopped, skewed producer started, junk written) → after its
hold, ``recovering`` (restarted, continued, restarted broker rejoining) → ``ended`` (the restarted
service said it is ready; every broker answers; the skewed producer finished)

and records when each happened. A fault whose target is busy (a service still held or restarting
from an earlier fault or exit, or back from one less than ``min_gap_s`` ago) waits: its
``injected_at`` says when it really happened.

How each is done, as an operator's tooling would: services through the stack's supervisor
(``kill -9`` = SIGKILL to every process group below the service, SIGSTOP/SIGCONT likewise), a
broker through the stack's own records (:func:`ballast.devstack.brokers.stop_node` with ``hard``,
:func:`~ballast.devstack.brokers.start_node`: what ``ballast stack kill-broker`` and
``start-broker`` do), junk with a plain producer.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ballast.devstack.brokers import start_node, stop_node
from ballast.devstack.services import ServiceCommand
from ballast.harness.pipeline import Pipeline
from ballast.kafka.admin import make_admin
from ballast.kafka.clients import make_producer
from ballast.readiness import read_ready
from bench.chaos.feed import JUNK_SAMPLES, SkewedProducer, Writer
from bench.chaos.ledger import Ledger
from bench.chaos.params import Params
from bench.chaos.plan import BROKERS, FaultSpec


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class Fault:
    """One fault as it happened (ms since the epoch; 0: not yet)."""

    spec: FaultSpec
    service: str = ""  # the supervised service it hits ("" for a broker or a write)
    phase: str = "pending"
    injected_at: int = 0
    recovering_at: int = 0
    ended_at: int = 0
    detail: str = ""
    _due: float = 0.0
    _thread: Any = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.spec.kind,
            "target": self.spec.target,
            "service": self.service,
            "planned_at_s": self.spec.at_s,
            "hold_s": self.spec.hold_s,
            "phase": self.phase,
            "injected_at": self.injected_at,
            "recovering_at": self.recovering_at,
            "ended_at": self.ended_at,
            "detail": self.detail,
        }


@dataclass
class Exit:
    """A service that exited while no fault was holding it down: a defect, and restarted."""

    service: str
    at: int
    code: int | None
    log_tail: str
    restarted: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "service": self.service,
            "at": self.at,
            "code": self.code,
            "restarted": self.restarted,
            "log_tail": self.log_tail,
        }


@dataclass
class Injector:
    pipe: Pipeline
    commands: Mapping[str, ServiceCommand]  # supervised services by name
    services: Mapping[str, str]  # a plan's target ("reduce", "router-1", …) -> service name
    ledger: Ledger
    writer: Writer
    params: Params
    seed: int
    say: Callable[[str], None]
    faults: list[Fault] = field(default_factory=list)
    exits: list[Exit] = field(default_factory=list)
    restarting: dict[str, int] = field(default_factory=dict)  # service -> when its restart began
    restarts: dict[str, int] = field(default_factory=dict)
    given_up: set[str] = field(default_factory=set)

    def plan(self, specs: tuple[FaultSpec, ...]) -> None:
        self.faults = [Fault(s, self.services.get(s.target, "")) for s in specs]

    # --- the clock ------------------------------------------------------------------------------------

    def tick(self, input_s: float) -> None:
        """Start what is due at ``input_s`` seconds into the input, advance what runs, supervise."""
        for f in self.faults:
            if f.phase == "pending" and f.spec.at_s <= input_s and not self._busy(f):
                self._inject(f)
            elif f.phase == "injected" and time.monotonic() >= f._due:
                self._recover(f)
            elif f.phase == "recovering" and self._recovered(f):
                f.phase, f.ended_at = "ended", now_ms()
                self.say(
                    f"fault {f.spec.kind} {f.spec.target} over ({(f.ended_at - f.injected_at) / 1000:.1f} s)"
                )
        self._supervise()

    def pending(self) -> bool:
        return any(f.phase != "ended" for f in self.faults) or bool(self.restarting)

    def held(self) -> set[str]:
        """Services a fault holds down or stopped now (the supervisor leaves them alone)."""
        return {f.service for f in self.faults if f.service and f.phase in ("injected", "recovering")}

    def _busy(self, f: Fault) -> bool:
        """Its service is held by another fault, restarting, or came back less than ``min_gap_s``
        ago (two faults on one service back to back would be one long fault)."""
        if not f.service:
            return False
        recent = now_ms() - int(self.params.min_gap_s * 1000)
        back = any(g.service == f.service and g.ended_at > recent for g in self.faults if g is not f)
        return back or f.service in self.held() or f.service in self.restarting

    # --- injecting and ending -----------------------------------------------------------------------

    def _inject(self, f: Fault) -> None:
        kind, p = f.spec.kind, self.params
        f._due = time.monotonic() + f.spec.hold_s
        if kind.startswith("kill-") and f.service:
            self.pipe.kill(f.service)
            f.detail = "SIGKILL to every process group of the service"
        elif kind.startswith("stop-"):
            self.pipe.signal(f.service, signal.SIGSTOP)
            f.detail = "SIGSTOP to every process group of the service"
        elif kind == "kill-broker":
            node = int(f.spec.target.rsplit("-", 1)[1])
            pid = self.pipe.state.node(node).pid
            stop_node(self.pipe.state, node, hard=True)
            f.detail = f"SIGKILL to broker {node} (pid {pid})"
        elif kind == "skewed-producer":
            topic = self.pipe.layout.name("input")
            f._thread = SkewedProducer(
                self.pipe.kafka,
                topic,
                self.ledger,
                p.skew_ahead_s,
                p.skew_rate,
                f.spec.hold_s,
                p.keys,
                self.seed,
            )
            f._thread.start()
            f.detail = f"event times {p.skew_ahead_s:g} s ahead, {p.skew_rate:g}/s for {f.spec.hold_s:g} s"
        elif kind == "junk-input":
            self.writer.junk(p.junk_input)
            f.detail = f"{p.junk_input} undecodable records"
        elif kind == "junk-control":
            producer = make_producer(self.pipe.kafka.with_client_id("chaos-junk-control"))
            for i in range(p.junk_control):
                producer.produce(self.pipe.layout.name("control"), JUNK_SAMPLES[i % len(JUNK_SAMPLES)])
            producer.flush(60)
            f.detail = f"{p.junk_control} undecodable records"
        f.phase, f.injected_at = "injected", now_ms()
        self.say(
            f"fault {kind} {f.spec.target}: {f.detail}"
            + (f", for {f.spec.hold_s:g} s" if f.spec.hold_s else "")
        )

    def _recover(self, f: Fault) -> None:
        kind = f.spec.kind
        if kind.startswith("kill-") and f.service:
            self.pipe.start(self.commands[f.service], wait=False)
        elif kind.startswith("stop-"):
            self.pipe.signal(f.service, signal.SIGCONT)
        elif kind == "kill-broker":
            start_node(self.pipe.state, int(f.spec.target.rsplit("-", 1)[1]))
        f.phase, f.recovering_at = "recovering", now_ms()

    def _recovered(self, f: Fault) -> bool:
        kind = f.spec.kind
        if kind.startswith("kill-") and f.service:
            if read_ready(self.pipe.service(f.service).ready_file) is not None:
                return True
            if not self.pipe.running(f.service):  # it failed to start: the supervisor takes it over
                f.detail += "; exited while restarting"
                return True
            return False
        if kind == "kill-broker":
            try:
                brokers = make_admin(self.pipe.kafka).list_topics(timeout=2).brokers
            except Exception:  # the cluster answers slowly while the node rejoins
                return False
            return len(brokers) >= BROKERS
        if kind == "skewed-producer":
            return not f._thread.is_alive()
        return True

    def finish(self) -> None:
        """Whatever is still held is let go (a run that fails midway leaves no process stopped)."""
        for f in self.faults:
            if f.phase == "injected":
                self._recover(f)

    # --- the supervisor -------------------------------------------------------------------------------

    def _supervise(self) -> None:
        held = self.held()
        for name, command in self.commands.items():
            if name in self.restarting:
                if read_ready(self.pipe.service(name).ready_file) is not None:
                    del self.restarting[name]
                elif not self.pipe.running(name):
                    del self.restarting[name]  # exited again while starting: seen below next tick
                continue
            if name in held or name in self.given_up or self.pipe.running(name):
                continue
            code = self.pipe.wait_exit(name, 0.1)
            again = self.restarts.get(name, 0) < self.params.max_restarts
            self.exits.append(Exit(name, now_ms(), code, self.pipe.log_tail(name, 15), again))
            self.say(
                f"[red]service {name} exited ({code}) with no fault holding it[/red]"
                + ("; restarting it" if again else "; not restarted again")
            )
            if again:
                self.restarts[name] = self.restarts.get(name, 0) + 1
                self.pipe.start(command, wait=False)
                self.restarting[name] = now_ms()
            else:
                self.given_up.add(name)
