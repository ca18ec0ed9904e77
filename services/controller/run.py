"""``ballast controller run``: start, lead, step until stopped; when fenced, exit or stand by.

Why leadership is the transactional fence: a second ``controller run`` fences the first at
``init_transactions``, so there is never a moment with two writers, and no lease to expire or
clock to trust. The fenced one learns it at its next transaction call and says so in one line
(exit 3), or, with ``--standby``, waits: a standby watches the active controller's status records on
the metrics topic and takes over (fencing it, in case it is only slow) once none came for
``--takeover-after-s``. A standby started while another runs waits the same way.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
import time

from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.topics import TopicLayout
from ballast.readiness import announce_ready
from services.controller.config import ControllerSettings

FENCED_EXIT = 3
FOREIGN_EXIT = 4  # the log holds an event this controller did not write (services.controller.audit)
log = logging.getLogger("services.controller")


def run(kafka: KafkaConfig, layout: TopicLayout, settings: ControllerSettings, stop: threading.Event) -> int:
    """Lead (or stand by) until ``stop``; the exit code."""
    from services.controller.service import Controller, Fenced, ForeignEvent

    me = settings.resolved_id()
    if not settings.controller_id:
        settings = settings.__class__(**{**settings.as_dict(), "controller_id": me})
    standing_by = settings.standby
    while not stop.is_set():
        if standing_by and not wait_for_takeover(kafka, layout, settings, stop):
            return 0
        controller = Controller(kafka, layout, settings)
        try:
            controller.connect()
            print(
                f"controller {me}: bootstrap {kafka.connection.describe()}, writing "
                f"{layout.name('control')} at epoch {controller.state.epoch}, requests from "
                f"{layout.name('requests')}",
                file=sys.stderr,
                flush=True,
            )
            announce_ready("controller", controller=me, epoch=controller.state.epoch)
            while not stop.is_set():
                controller.step()
            return 0
        except ForeignEvent as exc:
            print(f"controller {me}: {exc}", file=sys.stderr, flush=True)
            return FOREIGN_EXIT
        except Fenced:
            print(
                f"controller {me}: fenced: another controller instance took the control log over"
                + ("; standing by" if settings.standby else "; exiting"),
                file=sys.stderr,
                flush=True,
            )
            if not settings.standby:
                return FENCED_EXIT
            standing_by = True
        finally:
            controller.close()
    return 0


def wait_for_takeover(
    kafka: KafkaConfig, layout: TopicLayout, settings: ControllerSettings, stop: threading.Event
) -> bool:
    """Until no other controller published a status for ``takeover_after_s`` (True), or ``stop``."""
    from ballast.kafka.reading import offsets_at_time
    from ballast.metrics.reader import MetricsReader
    from ballast.metrics.records import ControllerStatus

    me = settings.resolved_id()
    window_ms = int(settings.takeover_after_s * 1000)
    topic = layout.name("metrics")
    since = int(time.time() * 1000) - window_ms
    start = offsets_at_time(kafka, topic, since, "controller-standby", 10)
    reader = MetricsReader(kafka, topic, start, keep=False)
    last_seen = time.monotonic()  # the active one is presumed alive at first: wait a full window
    try:
        while not stop.is_set():
            for m in reader.poll(0.5):
                if isinstance(m.body, ControllerStatus) and m.body.controller != me:
                    age_s = max(0.0, time.time() - m.interval_end / 1000.0)
                    last_seen = max(last_seen, time.monotonic() - age_s)
            if time.monotonic() - last_seen >= settings.takeover_after_s:
                log.info("controller %s: no status from an active controller for %.0f s: taking over",
                         me, settings.takeover_after_s)  # fmt: skip
                return True
        return False
    finally:
        reader.follower.close()


def install_stop() -> threading.Event:
    """SIGTERM / SIGINT end the loop after the current pass (its transaction committed)."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping after this pass", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop
