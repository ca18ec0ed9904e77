"""The demo's own knobs (the Kafka connection and topic layout are the shared settings groups)."""

from __future__ import annotations

from dataclasses import dataclass

from ballast.settings import Settings, setting


@dataclass(frozen=True)
class DemoSettings(Settings):
    """How much traffic the demo makes, how it plans, and how its Spark reduce runs."""

    ENV_PREFIX = "BALLAST_DEMO_"

    records: int = setting(100_000, "input events to produce (half before, half after the plan)")
    keys: int = setting(10_000, "distinct keys")
    zipf: float = setting(1.0, "Zipf exponent of the key distribution (0 = uniform)")
    seed: int = setting(42, "seed of the synthetic input")
    theta: float = setting(0.08, "imbalance tolerance given to the Mixed planner")
    tracked_keys: int = setting(2000, "heavy hitters the router publishes (the planner moves only these)")
    reduce: bool = setting(
        True, "run the Spark stateful reduce in this process (--no-reduce: the router part only)"
    )
    processor: str = setting(
        "aggregate:size=10s",
        "the reduce's processor, with tumbling windows (the input's event times are 1 ms apart, so "
        "10s is 10 windows per key at 100,000 records)",
    )
    watermark_delay: str = setting(
        "",
        "the reduce's event-time watermark delay, a Spark interval (none: half the input's event-time "
        "span, so no record can be late however the router interleaves the input partitions)",
    )
    trigger: str = setting("2 seconds", "the reduce's micro-batch trigger interval (a Spark interval)")
    local_cores: int = setting(2, "task slots of the reduce's local Spark (local[N])", minimum=1)
    reduce_timeout_s: float = setting(
        300.0,
        "how long to wait on the reduce: to read the first half, then for its last windows",
        minimum=1.0,
    )
    keep: bool = setting(False, "leave a local stack the demo started running afterwards")
    report_json: str = setting("", "also write the report as JSON to this file (tests read it)")

    def __post_init__(self) -> None:
        if self.records < 2 or self.keys < 1 or self.tracked_keys < 1:
            raise ValueError("records must be >= 2, keys and tracked_keys >= 1")
        from spark_jobs.processors.spec import from_spec  # numpy only: no Spark is started

        try:
            windows = getattr(from_spec(self.processor), "windows", None)
        except ValueError as exc:
            raise ValueError(f"--processor: {exc}") from None
        # the check adds up each key's windows: a record must be in exactly one of them
        if windows is None or not windows.tumbling:
            raise ValueError(f"--processor: {self.processor!r} needs tumbling windows (no slide)")
