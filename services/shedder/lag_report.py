"""``ballast lag``: the latest ``LagSample`` of every group and partition, read from the metrics topic.

Why read the shedder's samples and not measure once: a lag in time needs the partition's end
offsets *over time* (the table of :mod:`services.shedder.lag_table`), and a one-shot command has one
point, so it could only extrapolate from the last few seconds' rate, which is wrong after any
change of rate. The shedder keeps that history and publishes what it measured every cycle; this
command reads the samples of the last ``--within-s`` seconds (from the offsets at that time, not the
whole topic) and keeps the newest per group and partition. With no shedder running there are none,
and the command says so (exit 1).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from ballast.kafka.configuration import KafkaConfig
from ballast.metrics.lag import NewestLag
from ballast.metrics.records import LagSample, Metric


@dataclass(frozen=True)
class GroupReport:
    """One group (a router group or a reduce job) as its newest samples say."""

    group: str
    stage: str
    status: str
    lag_seconds: float  # the largest partition's (NaN: none known)
    lag_records: int  # summed over partitions
    arrival_rate: float
    service_rate: float
    partitions: tuple[LagSample, ...]
    measured_ms: int  # when the newest of them was measured (wall clock)
    source: str  # the shedder that measured it

    def as_dict(self, with_partitions: bool = False) -> dict:
        out = {
            "group": self.group,
            "stage": self.stage,
            "status": self.status,
            "lag_seconds": None if math.isnan(self.lag_seconds) else round(self.lag_seconds, 3),
            "lag_records": self.lag_records,
            "arrival_rate": round(self.arrival_rate, 3),
            "service_rate": round(self.service_rate, 3),
            "partitions": len(self.partitions),
            "measured_ms": self.measured_ms,
            "source": self.source,
        }
        if with_partitions:
            out["by_partition"] = [
                {
                    "topic": p.topic,
                    "partition": p.partition,
                    "committed_offset": p.committed_offset,
                    "end_offset": p.end_offset,
                    "lag_records": p.lag_records,
                    "lag_seconds": None if math.isnan(p.lag_seconds) else round(p.lag_seconds, 3),
                    "status": p.status,
                }
                for p in self.partitions
            ]
        return out


def group_reports(metrics: Iterable[Metric]) -> list[GroupReport]:
    """One report per group, by stage (router first) and name; only a group's newest cycle counts
    (:mod:`ballast.metrics.lag` says why)."""
    fold = NewestLag()
    fold.add(metrics)
    return [
        GroupReport(
            g.group,
            g.stage,
            g.status or "?",
            g.lag_seconds,
            sum(s.lag_records for s in g.samples),
            sum(s.arrival_rate for s in g.samples),
            sum(s.service_rate for s in g.samples),
            g.samples,
            g.measured_ms,
            g.source,
        )
        for g in fold.groups()
    ]


def read_lag_metrics(kafka: KafkaConfig, topic: str, within_s: float, timeout: float = 30.0) -> list[Metric]:
    """Every metric published on ``topic`` in the last ``within_s`` seconds (read up to its end now)."""
    from ballast.metrics.reader import MetricsReader

    with MetricsReader.since(kafka, topic, within_s, timeout=timeout) as reader:
        return reader.read_to_end(timeout)


def format_table(reports: list[GroupReport], now_ms: int, with_partitions: bool = False) -> str:
    """The reports as aligned lines for people."""
    rows = [("STAGE", "GROUP", "STATUS", "LAG", "RECORDS", "IN/S", "OUT/S", "PARTS", "AGE")]
    for r in reports:
        lag = "?" if math.isnan(r.lag_seconds) else f"{r.lag_seconds:.1f}s"
        age = f"{max(0, now_ms - r.measured_ms) / 1000:.0f}s"
        rows.append((r.stage, r.group, r.status, lag, f"{r.lag_records:,}", f"{r.arrival_rate:.0f}",
                     f"{r.service_rate:.0f}", str(len(r.partitions)), age))  # fmt: skip
        if with_partitions:
            for p in r.partitions:
                plag = "?" if math.isnan(p.lag_seconds) else f"{p.lag_seconds:.1f}s"
                rows.append(("", f"  {p.topic}[{p.partition}]", p.status, plag, f"{p.lag_records:,}",
                             f"{p.arrival_rate:.0f}", f"{p.service_rate:.0f}", "", ""))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)
