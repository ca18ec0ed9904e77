"""``ballast shedder run``: the faust app around :class:`~services.shedder.service.Shedder`.

What faust does here: an **agent** follows the metrics topic (the reduce jobs' ``ReduceProgress``),
two **timers** drive the work (a sample every ``--sample-s``, a decision every ``--cycle-s``), its
producer publishes the ``LagSample`` records, and its worker owns the process: signals (SIGTERM and
SIGINT stop the worker; the timers' thread finishes its call; the consumer commits and leaves), the
event loop, the consumer group. Its client settings come from the one connection config
(:meth:`~ballast.kafka.configuration.KafkaConnection.faust`: brokers and SASL/TLS credentials).

**At-least-once, and why that suffices.** faust's ``exactly_once`` makes the agent's own output
and its offsets one transaction, but a send to any other topic (our requests) is not part of it, so
it would promise what it cannot keep. The app runs ``at_least_once`` and every effect is
idempotent instead: the metrics offsets are committed after a record is handled, and handling a
record twice only stores the same progress again; a ``SHEDDING`` request carries an id derived from
the decision and the log state it was made on (:mod:`services.shedder.keeps`), which the controller
deduplicates; a ``LagSample`` published twice is one more observation of the same moment.

**Why a thread.** The AdminClient, the control log reader and the control client are confluent-kafka
clients whose calls block; on faust's event loop they would stall the agent and the group's
heartbeats. They run in one worker thread (``ThreadPoolExecutor(1)``), so a sample and a cycle never
overlap and the blocking code needs no lock.

**Restarts.** The metrics agent is a static member of its group (``group.instance.id`` = the
shedder's id), so a shedder restarted after kill -9 takes its partitions back at once instead of
waiting for the dead member's session to expire. The first start reads the metrics topic from
``--metrics-from`` (latest), later ones from the committed offsets.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.topics import TopicLayout
from ballast.readiness import announce_ready
from services.shedder.config import PolicySettings, ShedderSettings, StreamDeclaration
from services.shedder.service import Shedder

log = logging.getLogger("services.shedder")


def faust_settings(kafka: KafkaConfig, settings: ShedderSettings, shedder_id: str) -> dict[str, Any]:
    """``faust.App`` keyword settings: the connection's rendering plus the app's behaviour."""
    return {
        **kafka.connection.faust(),  # broker and broker_credentials (SASL / TLS)
        "broker_client_id": shedder_id,
        "processing_guarantee": "at_least_once",
        "value_serializer": "raw",
        "key_serializer": "raw",
        "consumer_auto_offset_reset": settings.metrics_from,
        "consumer_group_instance_id": shedder_id,
        "broker_session_timeout": settings.session_timeout_s,
        "broker_heartbeat_interval": min(3.0, settings.session_timeout_s / 3),
        "web_enabled": False,  # the Prometheus endpoint is our own (loopback, port setting)
        "store": "memory://",  # no tables
        "topic_disable_leader": True,  # one instance: no leader-election topic to create
        "topic_allow_declare": False,  # the deployment's topics exist (ballast topics create)
        "autodiscover": False,
    }


def build_app(shedder: Shedder, executor: ThreadPoolExecutor) -> Any:
    """The faust app: the metrics agent and the two timers, wired to ``shedder``."""
    import faust

    settings, layout = shedder.settings, shedder.layout
    app = faust.App(shedder.id, **faust_settings(shedder.kafka, settings, shedder.id))
    metrics = app.topic(layout.name("metrics"), value_type=bytes, key_type=bytes)
    ready = asyncio.Event()

    async def blocking(fn: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(executor, fn)

    @app.agent(metrics, name="follow-metrics")
    async def follow(stream: Any) -> None:
        async for event in stream.events():
            m = event.message
            shedder.on_metric(event.value, f"at {m.topic}[{m.partition}]@{m.offset}")

    @app.timer(settings.sample_s, name="sample-offsets")
    async def sample() -> None:
        try:
            await blocking(shedder.sample)
        except Exception as exc:  # a broker that does not answer now: the next sample tries again
            log.warning("shedder %s: sample failed: %s", shedder.id, exc)
            return
        if not ready.is_set():
            ready.set()
            announce_ready("shedder", shedder=shedder.id, streams=[s.topic for s in shedder.streams])

    @app.timer(shedder.policy_settings.cycle_s, name="policy-cycle")
    async def cycle() -> None:
        if not ready.is_set():
            return  # no sample yet: nothing to decide from
        try:
            records = await blocking(shedder.cycle)
        except Exception as exc:  # e.g. the control log unreadable for a while: decide next cycle
            log.warning("shedder %s: cycle failed: %s", shedder.id, exc)
            return
        for key, value in records:
            await metrics.send(key=key, value=value)

    return app


def run(
    kafka: KafkaConfig,
    layout: TopicLayout,
    settings: ShedderSettings,
    policy: PolicySettings,
    streams: tuple[StreamDeclaration, ...],
) -> int:
    """Connect, then run faust's worker until SIGTERM / SIGINT; the exit code."""
    import faust

    shedder = Shedder(kafka, layout, settings, policy, streams)
    shedder.connect()
    executor = ThreadPoolExecutor(1, thread_name_prefix="shedder-kafka")
    print(
        f"shedder {shedder.id}: bootstrap {kafka.connection.describe()}, streams "
        f"{', '.join(f'{s.topic} (priority {s.priority}, target {s.target_s:g} s, min {s.min_accuracy:g})' for s in streams)}, "  # noqa: E501
        f"keeps in force {shedder.keeps.keeps or 'none'}, router group {shedder.settings.router_group}, "
        f"requests to {layout.name('requests')}",
        file=sys.stderr,
        flush=True,
    )
    app = build_app(shedder, executor)
    worker = faust.Worker(app, loglevel=settings.log_level.upper(), redirect_stdouts=False, quiet=True)
    code = 0
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0
    finally:
        executor.shutdown(wait=True)
        shedder.close()
        print(
            f"shedder {shedder.id}: stopped after {shedder.cycles} cycles, {shedder.decisions} requests "
            f"sent, "
            f"{shedder.undecodable} undecodable metrics records",
            file=sys.stderr,
            flush=True,
        )
    return code
