"""ReduceSettings: every knob of the reduce job, declared once (flags, env ``BALLAST_REDUCE_*``).

Why topic names are absent: they come from the deployment's topic layout (``--prefix``), like
the router's, so the job reads the routed topic the routers write and follows the control log the
controller writes. The number of workers is the routed topic's partition count, read from the
broker: it is frozen into the checkpoint after the first run (spark-notes 4).

Why a ``spark_conf`` setting: the job builds its own SparkSession, so a Spark option that is not
one of its settings (a benchmark turning no-data micro-batches off, a user tuning the state store)
could not reach it otherwise.

Why no fixed default job id or checkpoint: two jobs started with the same defaults would share a
checkpoint and apply each other's state chunks. The default job id names the deployment and the
processor (``<prefix>-<processor>-<hash of its options>``), the default checkpoint lives under the
state folder by job id, and a checkpoint records what it was made for
(:mod:`spark_jobs.reduce.checkpoint`), so a contradicting start is refused.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from ballast.settings import Settings, SettingsError, setting
from spark_jobs.durations import interval_ms
from spark_jobs.record_cost import COST_KINDS


@dataclass(frozen=True)
class ReduceSettings(Settings):
    """Frozen settings of one reduce job."""

    ENV_PREFIX = "BALLAST_REDUCE_"

    job_id: str = setting(
        "",
        "the job's name: Spark query name, and the id its state chunks carry (none: "
        "<prefix>-<processor>-<8 hex of its options>; jobs sharing a routed topic need different ids)",
    )
    processor: str = setting(
        "aggregate:size=10s",
        "the per-key processor and its options (aggregate:size=10s[,slide=5s] | last_values:n=5,size=10s)",
    )
    input_topics: tuple[str, ...] = setting(
        (),
        "comma-separated input topics: the routers' sources, whose every partition must deliver a "
        "marker before state moves (none: the layout's <prefix>.input)",
    )
    checkpoint: str = setting(
        "",
        "Spark checkpoint folder (offsets, commits and the RocksDB state), a path or a file: URI given "
        "to Spark as is; on a cluster, on a file system every Spark host mounts at that path; reuse it "
        "to resume (none: <state-dir>/reduce/<job id>/checkpoint)",
    )
    watermark_delay: str = setting(
        "10 seconds",
        "how far each worker's watermark trails the slowest input partition's event-time progress "
        "(a Spark interval): a record more than this behind what its own partition had shown is late",
    )
    idle_timeout: str = setting(
        "60 seconds",
        "an input partition whose event-time progress has not advanced for this long (in routed-log "
        "time) is left out of the watermark, so a silent partition does not hold results forever; a "
        "router stalled longer than this finds its records late when it resumes (a Spark interval; "
        "0 seconds: never)",
    )
    correction_horizon: str = setting(
        "",
        "how long a window is kept after it was emitted, so a late record can still be counted in a "
        "correction (a Spark interval; none: the watermark delay)",
    )
    max_future: str = setting(
        "10 seconds",
        "records of routers older than event-time progress in markers that are further ahead of "
        "their routed timestamp are refused (dead-lettered as future) and do not move the watermark; "
        "routers of this version refuse such records themselves (a Spark interval; 0 seconds: no bound)",
    )
    spark_log: Path = setting(
        Path(""),
        "file for Spark's own output (its log lines, its workers' prints) with `reduce run`; the job's "
        "status lines stay on stderr (none: next to the checkpoint)",
    )
    trigger: str = setting("2 seconds", "micro-batch trigger interval (a Spark interval)")
    max_offsets_per_trigger: int = setting(0, "cap on routed records per micro-batch (0: no cap)", minimum=0)
    bins: int = setting(64, "state bins per worker of a per-key processor (one state entry each)", minimum=1)
    chunk_bytes: int = setting(512 * 1024, "largest piece of a state chunk record", minimum=1024)
    record_cost_us: float = setting(
        0.0,
        "simulated work per record at the stateful step, in µs (benchmarks; see --record-cost-kind)",
        minimum=0.0,
    )
    record_cost_kind: str = setting(
        "sleep",
        "what --record-cost-us stands for: sleep (blocking I/O: the worker tasks of one batch wait "
        "side by side even on 2 cores) or cpu (computation: a spin on the task thread's CPU clock)",
        choices=COST_KINDS,
    )
    master: str = setting("", "Spark master URL (empty: local[--local-cores])")
    local_cores: int = setting(2, "task slots of the local master", minimum=1)
    control_timeout_s: float = setting(60.0, "how long a worker waits for a control epoch its data names")
    run_for_s: float = setting(0.0, "stop after this many seconds (0: run until stopped)", minimum=0.0)
    log_level: str = setting("WARN", "Spark log level", choices=("ERROR", "WARN", "INFO", "DEBUG"))
    spark_conf: tuple[str, ...] = setting(
        (),
        "more Spark configuration, comma-separated KEY=VALUE pairs (values without commas), applied "
        "over Ballast's own (e.g. spark.sql.streaming.noDataMicroBatches.enabled=false)",
    )

    def __post_init__(self) -> None:
        self.spark_options()  # a malformed pair fails at parse time, before Spark starts
        from spark_jobs.processors.spec import from_spec  # numpy only: no Spark starts

        checks = [(n, interval_ms) for n in ("watermark_delay", "idle_timeout", "max_future", "trigger")]
        if self.correction_horizon:
            checks.append(("correction_horizon", interval_ms))
        checks.append(("processor", from_spec))  # a bad processor is one line before any broker is asked
        checks.append(("checkpoint", _guarded))
        for name, check in checks:
            try:
                check(getattr(self, name))
            except ValueError as exc:
                raise SettingsError(f"--{name.replace('_', '-')}: {exc}") from None

    def resolved_job_id(self, prefix: str) -> str:
        """The job id, or the default one for this deployment and processor."""
        if self.job_id:
            return self.job_id
        name = self.processor.split(":", 1)[0].rsplit(".", 1)[-1].lower()
        digest = hashlib.sha256(self.processor.encode()).hexdigest()[:8]
        return f"{prefix}-{name}-{digest}"

    def resolved_checkpoint(self, prefix: str, state_dir: Path) -> str:
        if str(self.checkpoint) not in ("", "."):
            return str(self.checkpoint)
        return str(Path(state_dir) / "reduce" / self.resolved_job_id(prefix) / "checkpoint")

    def horizon_ms(self) -> int:
        return interval_ms(self.correction_horizon or self.watermark_delay)

    def max_future_ms(self) -> int:
        return interval_ms(self.max_future)

    def watermark_delay_ms(self) -> int:
        return interval_ms(self.watermark_delay)

    def idle_timeout_ms(self) -> int:
        return interval_ms(self.idle_timeout)

    def spark_options(self) -> dict[str, str]:
        """``spark_conf`` as Spark options (a key given twice: the last value)."""
        options: dict[str, str] = {}
        for pair in self.spark_conf:
            key, sep, value = pair.partition("=")
            if not sep or not key.strip():
                raise ValueError(f"spark_conf: expected KEY=VALUE, got {pair!r}")
            options[key.strip()] = value.strip()
        return options


def _guarded(checkpoint: str) -> None:
    """A checkpoint Ballast cannot guard (manifest and lock) is refused before anything starts."""
    from spark_jobs.reduce.checkpoint import supported

    why = supported(checkpoint)
    if why:
        raise ValueError(why)
