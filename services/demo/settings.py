"""The demo's own knobs (the Kafka connection and topic layout are the shared settings groups)."""

from __future__ import annotations

from dataclasses import dataclass

from ballast.settings import Settings, setting


@dataclass(frozen=True)
class DemoSettings(Settings):
    """How much traffic the demo makes and how it plans."""

    ENV_PREFIX = "BALLAST_DEMO_"

    records: int = setting(100_000, "input events to produce (half before, half after the plan)")
    keys: int = setting(10_000, "distinct keys")
    zipf: float = setting(1.0, "Zipf exponent of the key distribution (0 = uniform)")
    seed: int = setting(42, "seed of the synthetic input")
    theta: float = setting(0.08, "imbalance tolerance given to the Mixed planner")
    tracked_keys: int = setting(2000, "heavy hitters the router publishes (the planner moves only these)")
    keep: bool = setting(False, "leave a local stack the demo started running afterwards")
    report_json: str = setting("", "also write the report as JSON to this file (tests read it)")

    def __post_init__(self) -> None:
        if self.records < 2 or self.keys < 1 or self.tracked_keys < 1:
            raise ValueError("records must be >= 2, keys and tracked_keys >= 1")
