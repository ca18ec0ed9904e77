"""A finished run read back from its topics: every output row, every dead letter (matched to the
ledger's records), the routed topic's load per worker, the shedder's lag samples, the control log.

Why the routed topic is read at all, when the reference must not come from it: a reduce dead
letter names the routed record it refused by position (docs/reduce.md, "Dead letters"), and that
record's envelope says which input record it carries (source partition and offset). The routed
topic is only the way from a letter to the ledger; the imbalance over time comes from it too (what
the workers really got). Nothing of the reference is taken from it.

The control log is decoded record by record, and what does not decode (the campaign's junk) is
counted and skipped: the judge needs the keep-probabilities, whatever the services did with junk.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from ballast.avro.codec import AvroCodec
from ballast.avro.wire import DATA_PREFIX
from ballast.harness.outputs import output_rows
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.dead_letters import DeadLetter
from ballast.kafka.follow import TopicFollower
from ballast.kafka.topics import TopicLayout
from ballast.metrics.reader import MetricsReader
from ballast.metrics.records import ControllerStatus, LagSample, ReduceProgress
from bench.chaos.ledger import Records

READ_TIMEOUT_S = 300.0


@dataclass
class Letter:
    """A dead letter and the ledger record it stands for (-1: none found)."""

    reason: str
    stage: str  # "router" (names an input position) or "reduce" (a routed one), or "other"
    record: int
    job: str = ""
    detail: str = ""


@dataclass
class Readback:
    rows: pd.DataFrame
    letters: list[Letter]
    routed_times: np.ndarray  # event time of every routed data record
    routed_workers: np.ndarray  # its routed partition
    lag: list[tuple[int, str, float]]  # (measured at ms, stage, largest lag of that stage then)
    watermarks: list[tuple[int, int]]  # (batch end ms, watermark ms)
    imbalance_reported: list[tuple[int, float]]  # (ms, the controller's realized max/mean)
    control: list[dict[str, Any]]  # the control log's events, junk left out
    control_junk: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def read_back(kafka: KafkaConfig, layout: TopicLayout, job: str, records: Records) -> Readback:
    rows = output_rows(kafka, layout.name("output"), job, READ_TIMEOUT_S)
    raw_letters = _read(kafka, layout.name("dead_letter"))
    letters = [DeadLetter.of(m) for m in raw_letters]
    routed = layout.name("routed")
    wanted = {(d.partition, d.offset) for d in letters if d.topic == routed}
    times, workers, carried = _routed(kafka, routed, wanted)
    positions = records.index_of()
    matched = [_match(d, layout, positions, carried) for d in letters]
    lag, watermarks, imbalance = _metrics(kafka, layout, job)
    control, junk = _control(kafka, layout.name("control"))
    return Readback(rows, matched, times, workers, lag, watermarks, imbalance, control, junk)


def _read(kafka: KafkaConfig, topic: str) -> list[Any]:
    with TopicFollower(kafka, topic) as f:
        return f.read_to_end(READ_TIMEOUT_S)


def _routed(
    kafka: KafkaConfig, topic: str, wanted: set[tuple[int, int]]
) -> tuple[np.ndarray, np.ndarray, dict[tuple[int, int], tuple[int, int]]]:
    """Every data record's event time and partition; for the ``wanted`` positions, the input
    (partition, offset) their envelope carries."""
    codec = AvroCodec("io.ballast.RoutedEnvelope")
    times: list[int] = []
    workers: list[int] = []
    carried: dict[tuple[int, int], tuple[int, int]] = {}
    for m in _read(kafka, topic):
        value = m.value()
        if not value or not value.startswith(DATA_PREFIX):
            continue
        try:
            body = codec.decode(value)["body"][1]
        except Exception:  # bytes written into the routed topic by hand are no envelope
            continue
        times.append(int(body["event_time"]))
        workers.append(m.partition())
        if (m.partition(), m.offset()) in wanted:
            carried[(m.partition(), m.offset())] = (int(body["source_partition"]), int(body["source_offset"]))
    return np.array(times, dtype=np.int64), np.array(workers, dtype=np.int64), carried


def _match(
    d: DeadLetter,
    layout: TopicLayout,
    positions: dict[tuple[int, int], int],
    carried: dict[tuple[int, int], tuple[int, int]],
) -> Letter:
    if d.topic == layout.name("input"):
        return Letter(d.reason, "router", positions.get((d.partition, d.offset), -1), d.job, d.detail)
    if d.topic == layout.name("routed"):
        source = carried.get((d.partition, d.offset))
        record = positions.get(source, -1) if source is not None else -1
        return Letter(d.reason, "reduce", record, d.job, d.detail)
    return Letter(d.reason, "other", -1, d.job, d.detail)


def _metrics(
    kafka: KafkaConfig, layout: TopicLayout, job: str
) -> tuple[list[tuple[int, str, float]], list[tuple[int, int]], list[tuple[int, float]]]:
    reader = MetricsReader(kafka, layout.name("metrics"))
    try:
        reader.read_to_end(READ_TIMEOUT_S)
        per: dict[tuple[int, str], float] = {}
        for m, s in reader.of(LagSample):
            if s.stage and np.isfinite(s.lag_seconds):
                k = (int(m.interval_end), s.stage)
                per[k] = max(per.get(k, 0.0), float(s.lag_seconds))
        lag = sorted((at, stage, v) for (at, stage), v in per.items())
        marks = [
            (int(m.interval_end), int(b.watermark_ms)) for m, b in reader.of(ReduceProgress, f"{job}/driver")
        ]
        imbalance = [
            (int(m.interval_end), float(b.realized_imbalance)) for m, b in reader.of(ControllerStatus)
        ]
    finally:
        reader.close()
    return lag, marks, imbalance


def _control(kafka: KafkaConfig, topic: str) -> tuple[list[dict[str, Any]], int]:
    codec = AvroCodec("io.ballast.ControlEvent")
    events, junk = [], 0
    for m in _read(kafka, topic):
        try:
            events.append(codec.decode(m.value()))
        except Exception:
            junk += 1
    return events, junk


def letters_frame(letters: Iterable[Letter]) -> pd.DataFrame:
    return pd.DataFrame([vars(x) for x in letters], columns=["reason", "stage", "record", "job", "detail"])
