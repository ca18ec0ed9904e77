"""The demo's own knobs (the Kafka connection, the local stack and the topic prefix are the shared
settings groups).

Why these defaults (2 shared cores, both runs one after the other in about seven minutes):

* **the stream**: Zipf(1.0) over 4,000 keys (the hottest key is 11 % of the load, under a worker's
  share, so a level plan exists) at 600 events/s, whose hot set is drawn anew every ``shift_s`` (a
  fresh rank -> key permutation: the keys a plan placed cool down, others heat up);
* **6 workers**: with 8 the Spark job's micro-batches (a task per worker each) cost more fixed CPU
  for nothing the demo shows; with 4, Kafka's hash of this input is
  level enough in some periods (max/mean 1.11) that there is nothing to show. With 6 its median per
  5 s interval is 1.53 and never under 1.35;
* **the burst**: ``burst_factor`` × the rate for ``burst_s`` seconds (2,400 events/s), above what
  the reduce can do even when balanced, so only shedding keeps the lag under its target. At 6×
  the backlog of the seconds before the shedder acts is one micro-batch of 25 s on its own, and
  the lag stays over any target for longer than the input lasts;
* **the reduce's cost**: ``record_cost_us`` of simulated work per record at the stateful step
  (a sleep: it stands for a real processor's per-record work, such as a model call or a lookup,
  and makes the capacity a property of the job, not of whatever else shares the machine): 6 task
  slots × 1 / 3 ms = 2,000 records/s at most, so the calm rate uses under a third of it when the
  load is level, and one worker of the hash run carries up to twice the mean;
* **the loop**: intervals of 5 s, θ = 0.3, reacting on 2 intervals above; the plan is made from the
  last interval in records (a hot set replaced in one step is the case the forecast over-shoots,
  docs/controller.md), aims at 1 + θ/3 (a plan aimed at 1 + θ itself left the load hovering at
  1.25 to 1.32 per interval, above the line half the time and never far enough above for two
  intervals to trigger again) and is sent at once (the pacing modes are the migration benchmark's);
* **the target**: a 20 s time lag, at least twice what the reduce shows while it keeps up (5 to
  9 s per micro-batch cycle on 2 shared cores). With 15 s the lag after the burst, shedding in
  force, hovered around the target (12 to 18 s).
"""

from __future__ import annotations

from dataclasses import dataclass

from ballast.settings import Settings, setting

RUNS = ("ballast", "hash")


@dataclass(frozen=True)
class DemoSettings(Settings):
    """How much traffic the demo makes, how its services are set, and what it writes."""

    ENV_PREFIX = "BALLAST_DEMO_"

    runs: str = setting(
        "ballast,hash",
        "which runs, in order: ballast (the loop and shedding on), hash (hash-only routing, no "
        "shedding), each on the same seeded input",
    )
    together: bool = setting(
        False, "run them at the same time (for a machine with cores to spare: on 2 cores two Spark "
        "jobs leave none idle)",
    )  # fmt: skip
    input_s: float = setting(120.0, "seconds of streamed input", minimum=10)
    rate: float = setting(600.0, "events per second outside the burst", minimum=1)
    shift_s: float = setting(60.0, "the Zipf hot set is drawn anew this often (seconds)", minimum=5)
    burst_at_s: float = setting(70.0, "the overload burst starts this many seconds into the input", minimum=0)
    burst_s: float = setting(20.0, "how long the burst lasts (0: no burst)", minimum=0)
    burst_factor: float = setting(4.0, "the burst's rate, times --rate", minimum=1)
    keys: int = setting(4_000, "distinct keys", minimum=1)
    zipf: float = setting(1.0, "Zipf exponent of the key distribution (0 = uniform)", minimum=0)
    seed: int = setting(42, "seed of the synthetic input")
    connect_records: int = setting(
        4_000, "events written to a file and loaded through Kafka Connect's FileStreamSource first "
        "(0: none)", minimum=0,
    )  # fmt: skip
    workers: int = setting(6, "workers per run (routed partitions, Spark state partitions)", minimum=1)
    input_partitions: int = setting(4, "partitions of each run's input topic", minimum=1)
    routers: int = setting(2, "router services per run", minimum=1)
    interval_s: float = setting(5.0, "the controller's interval (and the report's)", minimum=1)
    theta: float = setting(0.3, "rebalance when max/mean stays above 1 + theta", minimum=0)
    tracked_keys: int = setting(1_000, "heavy hitters each router publishes (the planner moves only these)")
    target_s: float = setting(20.0, "the input stream's time-lag target (the shedder's)", minimum=1)
    min_accuracy: float = setting(0.2, "the stream's keep-probability floor", minimum=0.01)
    record_cost_us: float = setting(3000.0, "simulated work per record at the reduce (see above)", minimum=0)
    window: str = setting("10s", "the reduce's tumbling window (a duration: 500ms, 10s, 2m)")
    watermark_delay: str = setting("10 seconds", "the reduce's event-time watermark delay")
    trigger: str = setting("2 seconds", "the reduce's micro-batch trigger interval")
    drain_timeout_s: float = setting(
        60.0, "after the input, how long a run may take to close its last windows; a run that does not "
        "(the hash run after the burst) is reported with its lag, its results not judged", minimum=10,
    )  # fmt: skip
    ready_timeout_s: float = setting(300.0, "how long a service may take to start", minimum=10)
    report_dir: str = setting("demo-report", "where index.html, the plots and summary.json go")
    live: bool = setting(True, "draw the live view (--no-live: status lines, as in a log)")
    keep: bool = setting(False, "leave a local stack the demo started running afterwards")
    secure: bool = setting(
        False,
        "start the local stack secured (SASL_SSL, a SCRAM user per service, least-privilege ACLs: "
        "docs/security.md); each service then runs as its own principal",
    )

    def __post_init__(self) -> None:
        chosen = self.run_names()
        if not chosen or any(r not in RUNS for r in chosen):
            raise ValueError(f"--runs: pick from {', '.join(RUNS)}, got {self.runs!r}")
        if self.burst_s and self.burst_at_s + self.burst_s > self.input_s:
            raise ValueError("--burst-at-s + --burst-s must end within --input-s")

    def run_names(self) -> list[str]:
        return [r.strip() for r in self.runs.split(",") if r.strip()]
