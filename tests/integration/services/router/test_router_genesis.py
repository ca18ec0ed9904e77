"""Epoch 0 comes from the control log: a router whose flags contradict the genesis is refused before
it can fence the running instance with its id, and a log without genesis is refused with the
command that writes it."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import WORKERS

from ballast.control.genesis import GenesisConflictError, GenesisMissingError
from ballast.kafka.admin import ensure_topics
from ballast.kafka.topics import TopicLayout
from ballast.workload import input_events
from services.router.config import RouterSettings
from services.router.router import Router


def one_line(proc, timeout: float = 60) -> tuple[int, list[str]]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, [line for line in (out + err).decode().splitlines() if line.strip()]


def exited(kit, name: str, timeout: float = 60) -> tuple[int | None, list[str]]:
    """A router service's exit code and every line it printed."""
    code = kit.pipe.wait_exit(name, timeout)
    text = kit.pipe.output(name) + kit.pipe.log(name)
    return code, [line for line in text.splitlines() if line.strip()]


def test_a_router_with_conflicting_flags_is_refused_and_fences_nobody(kit):
    events = list(input_events(2_000, num_keys=200, z=1.0, seed=3))
    kit.start_thread("r1")  # exactly-once: its transactional id is derived from the router id
    kit.produce_events(events[:1_000])
    kit.wait_committed(1_000)

    # each refused start is a service of its own: a service's log is appended to on a restart
    wrong_workers = kit.start_process("r1", "--workers", "6", name="r1-wrong-workers")
    code, lines = exited(kit, wrong_workers)
    assert code == 2, lines
    assert lines == [
        f"error: --workers 6 contradicts control log {kit.layout.name('control')}: its genesis records "
        f"{WORKERS} routed partitions"
    ]
    wrong_active = kit.start_process("r1", "--active-workers", "4", name="r1-wrong-active")
    code, lines = exited(kit, wrong_active)
    assert code == 2 and lines == [
        f"error: --active-workers 4 contradicts control log {kit.layout.name('control')}: its genesis "
        f"records {WORKERS} active workers at epoch 0 (0 takes them from the log)"
    ]
    with pytest.raises(GenesisConflictError):
        Router.connect(kit.settings("r2"), TopicLayout(prefix=kit.prefix, workers=4), kit.kafka)

    # the running r1 was never fenced: it still commits, exactly once
    kit.produce_events(events[1_000:])
    kit.wait_committed(len(events))
    kit.stop_all()
    kit.verify(kit.read_routed(len(events)), events, {"r1"})


def test_a_log_without_genesis_is_refused_with_the_command_that_writes_it(kafka_config, admin, unique):
    prefix = unique("rt-nogen")
    layout = TopicLayout(prefix=prefix, workers=WORKERS, input_partitions=1)
    ensure_topics(admin, layout.specs())  # by hand: no genesis
    message = (
        f"control log {prefix}.control has no genesis (the TABLE_SNAPSHOT that records epoch 0): "
        f"run `ballast topics create --prefix {prefix} --workers {WORKERS}` to write it"
    )
    with pytest.raises(GenesisMissingError) as err:
        Router.connect(RouterSettings(router_id="r1", group_id=f"{prefix}-g"), layout, kafka_config)
    assert str(err.value) == message
    cli = subprocess.Popen(
        [sys.executable, "-m", "services.router", "--bootstrap", kafka_config.bootstrap_servers,
         "--prefix", prefix, "--router-id", "r1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert one_line(cli) == (1, [f"error: {message}"])  # like a missing topic: set the deployment up
