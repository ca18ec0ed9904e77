"""ReduceSettings: every knob of the reduce job, declared once (flags, env ``BALLAST_REDUCE_*``).

Why topic names are absent: they come from the deployment's topic layout (``--prefix``), like
the router's, so the job reads the routed topic the routers write and follows the control log the
controller writes. The number of workers is the routed topic's partition count, read from the
broker: it is frozen into the checkpoint after the first run (spark-notes 4).

Why a ``spark_conf`` setting: the job builds its own SparkSession, so a Spark option that is not
one of its settings (a benchmark turning no-data micro-batches off, a user tuning the state store)
could not reach it otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ballast.paths import PROJECT_ROOT
from ballast.settings import Settings, setting


@dataclass(frozen=True)
class ReduceSettings(Settings):
    """Frozen settings of one reduce job."""

    ENV_PREFIX = "BALLAST_REDUCE_"

    job_id: str = setting(
        "ballast-reduce",
        "the job's name: Spark query name, and the id its state chunks carry (jobs sharing a routed "
        "topic need different ids)",
    )
    processor: str = setting(
        "aggregate:size=10s",
        "the per-key processor and its options (aggregate:size=10s[,slide=5s] | last_values:n=5,size=10s)",
    )
    checkpoint: Path = setting(
        PROJECT_ROOT / "state" / "reduce-checkpoint",
        "Spark checkpoint folder (offsets, commits and the RocksDB state); reuse it to resume",
    )
    watermark_delay: str = setting("10 seconds", "event-time watermark delay (a Spark interval)")
    trigger: str = setting("2 seconds", "micro-batch trigger interval (a Spark interval)")
    max_offsets_per_trigger: int = setting(0, "cap on routed records per micro-batch (0: no cap)", minimum=0)
    bins: int = setting(64, "state bins per worker (one Spark state entry each)", minimum=1)
    chunk_bytes: int = setting(512 * 1024, "largest piece of a state chunk record", minimum=1024)
    record_cost_us: float = setting(
        0.0,
        "simulated work per record at the stateful step, in µs (benchmarks: a sleep per key, so "
        "the worker tasks of one batch run side by side even on 2 cores)",
        minimum=0.0,
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

    def spark_options(self) -> dict[str, str]:
        """``spark_conf`` as Spark options (a key given twice: the last value)."""
        options: dict[str, str] = {}
        for pair in self.spark_conf:
            key, sep, value = pair.partition("=")
            if not sep or not key.strip():
                raise ValueError(f"spark_conf: expected KEY=VALUE, got {pair!r}")
            options[key.strip()] = value.strip()
        return options
