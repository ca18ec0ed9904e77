"""What the shedding policy can be told: its knobs, and the input streams each declaring a latency
target, a priority and a minimum accuracy.

Why the defaults (docs/shedder.md, "Shedding policy"): a 5 s cycle is Stream-Economics' period; a
shed starts when a stream's lag (or the wait its backlog promises) passes the target, and is lifted
only below half the target, so a load that sits at the threshold does not flap; a keep-probability
moves by at most a factor 2 or 0.25 per cycle, whichever is more, so any change completes within
3 cycles (a 2× overload is caught in 2) while one noisy sample cannot swing it from 1 to nothing.

Streams are declared in a TOML or JSON file (``--streams-file``), by repeated ``--stream`` flags, or
both (a topic declared twice is an error)::

    --stream topic=ballast.input,target=30s,priority=1,min-accuracy=0.5

    # shedder.toml
    [[stream]]
    topic = "ballast.input"
    target = "30s"          # or target_s = 30
    priority = 1            # higher is more important; default 0
    min_accuracy = 0.5      # the keep-probability floor; default 1.0: never shed

Every bad declaration is a :class:`~ballast.settings.SettingsError` naming where it came from and
the field.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, Self

from ballast.kafka import identities
from ballast.settings import Settings, SettingsError, setting
from services.shedder.lag_status import StatusRules

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-z]*)\s*$")
# the names a declaration's fields may take (dashes as on the command line, underscores as in TOML)
_FIELDS = {
    "topic": "topic",
    "target": "target_s",
    "target_s": "target_s",
    "target-s": "target_s",
    "priority": "priority",
    "min_accuracy": "min_accuracy",
    "min-accuracy": "min_accuracy",
}


def parse_duration(raw: Any) -> float:
    """Seconds from ``30``, ``30s``, ``500ms``, ``2m``, ``1h`` (a bare number is seconds)."""
    if isinstance(raw, bool):
        raise ValueError(f"expected a duration, got {raw!r}")
    if isinstance(raw, int | float):
        return float(raw)
    match = _DURATION.match(str(raw))
    if not match or match.group(2) not in ("", *_UNITS):
        raise ValueError(f"expected a duration like 30s, 500ms or 2m, got {raw!r}")
    return float(match.group(1)) * _UNITS.get(match.group(2), 1.0)


@dataclass(frozen=True)
class StreamDeclaration:
    """One input stream (topic) as its owner declares it.

    ``min_accuracy`` is Stream-Economics' accuracy: the fraction of the stream's records that reach
    the reduce, so it is the floor of the stream's keep-probability (a reader who wants a relative
    error ε at confidence z on windows of N records needs at least ``1 / (1 + ε²N/z²)``;
    docs/shedder.md). It must be above 0: the controller refuses a keep-probability of 0.
    ``priority``: higher is more important; lower priorities lose accuracy first.
    """

    topic: str
    target_s: float
    priority: int = 0
    min_accuracy: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.topic, str) or not self.topic.strip() or any(c in self.topic for c in " ,;="):
            raise ValueError(f"topic: must be a topic name, got {self.topic!r}")
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise ValueError(f"priority: expected an integer, got {self.priority!r}")
        for name in ("target_s", "min_accuracy"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ValueError(f"{name}: expected a finite number, got {value!r}")
            object.__setattr__(self, name, float(value))
        if self.target_s <= 0:
            raise ValueError(f"target_s: must be > 0 seconds, got {self.target_s:g}")
        if not 0.0 < self.min_accuracy <= 1.0:
            raise ValueError(f"min_accuracy: must be in (0, 1], got {self.min_accuracy:g}")

    @classmethod
    def from_fields(cls, raw: Mapping[str, Any]) -> Self:
        """From a file's table or a flag's ``name=value`` pairs: field names checked, values converted."""
        values: dict[str, Any] = {}
        for name, value in raw.items():
            field = _FIELDS.get(str(name).strip().lower())
            if field is None:
                known = "topic, target, priority, min-accuracy"
                raise ValueError(f"{name}: unknown field (known: {known})")
            if field in values:
                raise ValueError(f"{field}: given twice")
            try:
                if field == "target_s":
                    value = parse_duration(value)
                elif field == "priority":
                    value = _integer(value)
                elif field == "min_accuracy":
                    value = _number(value)
                else:
                    value = str(value).strip()
            except ValueError as exc:
                raise ValueError(f"{field}: {exc}") from None
            values[field] = value
        for required in ("topic", "target_s"):
            if required not in values:
                raise ValueError(f"{required}: missing")
        return cls(**values)


def _integer(raw: Any) -> int:
    if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
        raise ValueError(f"expected an integer, got {raw!r}")
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise ValueError(f"expected an integer, got {raw!r}") from None


def _number(raw: Any) -> float:
    if isinstance(raw, bool):
        raise ValueError(f"expected a number, got {raw!r}")
    try:
        return float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"expected a number, got {raw!r}") from None


def parse_stream(text: str) -> StreamDeclaration:
    """``topic=T,target=30s,priority=1,min-accuracy=0.5`` (a flag's value) as a declaration."""
    pairs: dict[str, str] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        name, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"{part.strip()!r}: expected name=value")
        if name.strip() in pairs:
            raise ValueError(f"{name.strip()}: given twice")
        pairs[name.strip()] = value.strip()
    return StreamDeclaration.from_fields(pairs)


def load_streams_file(path: Path) -> tuple[StreamDeclaration, ...]:
    """The ``stream`` list of a TOML (``[[stream]]`` tables) or JSON (``{"stream": [...]}``) file.

    The format goes by the suffix: ``.json`` is JSON, anything else TOML. Errors name the file, the
    stream (its topic, else its position) and the field.
    """
    try:
        text = path.read_text()
    except OSError as exc:
        raise SettingsError(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        doc = json.loads(text) if path.suffix.lower() == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SettingsError(f"{path}: not valid {'JSON' if path.suffix.lower() == '.json' else 'TOML'}: "
                            f"{exc}") from None
    if not isinstance(doc, dict) or set(doc) - {"stream"}:
        extra = sorted(set(doc) - {"stream"}) if isinstance(doc, dict) else []
        raise SettingsError(f"{path}: expected only a 'stream' list of tables, found {extra or type(doc)}")
    items = doc.get("stream", [])
    if not isinstance(items, list):
        raise SettingsError(f"{path}: 'stream' must be a list of tables")
    streams = []
    for i, item in enumerate(items, 1):
        where = f"{path}: stream {i}"
        if not isinstance(item, dict):
            raise SettingsError(f"{where}: expected a table, got {item!r}")
        if isinstance(item.get("topic"), str):
            where += f" ({item['topic']})"
        try:
            streams.append(StreamDeclaration.from_fields(item))
        except ValueError as exc:
            raise SettingsError(f"{where}: {exc}") from None
    return tuple(streams)


def _unique(streams: Iterable[tuple[str, StreamDeclaration]]) -> tuple[StreamDeclaration, ...]:
    seen: dict[str, str] = {}
    out = []
    for where, stream in streams:
        if stream.topic in seen:
            raise SettingsError(f"{where}: topic {stream.topic!r} is already declared ({seen[stream.topic]})")
        seen[stream.topic] = where
        out.append(stream)
    return tuple(out)


@dataclass(frozen=True)
class PolicySettings(Settings):
    """The shedding policy's knobs and where its streams are declared (``ballast shedder run -h``)."""

    ENV_PREFIX: ClassVar[str] = "BALLAST_SHEDDER_"

    streams_file: str = setting("", "TOML or JSON file declaring the input streams ([[stream]] tables)")
    stream: str = setting(
        "",
        "an input stream: topic=T,target=30s,priority=1,min-accuracy=0.5 (priority: higher sheds "
        "later, default 0; min-accuracy: keep-probability floor, default 1 = never shed); repeatable, "
        "or several separated by ';'",
    )
    cycle_s: float = setting(5.0, "policy cycle: a decision this often", minimum=0.1)
    lift_margin: float = setting(
        0.5, "hysteresis h: lift only while lag < target * (1 - h) and not rising", minimum=0
    )
    rising_cycles: int = setting(
        2, "start shedding once lag rises this many cycles in a row and the load exceeds capacity", minimum=1
    )
    overload_margin: float = setting(
        0.05,
        "rising lag counts as overload only if the kept load exceeds capacity by this fraction",
        minimum=0,
    )
    headroom: float = setting(
        0.05, "plan the kept load at most capacity * (1 - headroom) - backlog / drain horizon", minimum=0
    )
    drain_horizon_s: float = setting(
        30.0, "the shed plan clears the backlog within this long (at least one cycle)", minimum=0.1
    )
    step_factor: float = setting(
        2.0, "per cycle a keep-probability moves at most by this factor or step-abs, whichever is more",
        minimum=1,
    )
    step_abs: float = setting(0.25, "per cycle a keep-probability moves at most by this much or the factor",
                              minimum=0)
    min_change: float = setting(
        0.05,
        "a smaller move is not made (no request for noise), unless it reaches 1 or the minimum",
        minimum=0,
    )

    def __post_init__(self) -> None:
        if not self.lift_margin < 1:
            raise ValueError(f"lift_margin must be < 1, got {self.lift_margin:g}")
        if not self.headroom < 1:
            raise ValueError(f"headroom must be < 1, got {self.headroom:g}")
        if not self.step_abs <= 1:
            raise ValueError(f"step_abs must be <= 1, got {self.step_abs:g}")
        if self.step_factor <= 1 and self.step_abs <= 0:
            raise ValueError("step_factor > 1 or step_abs > 0 is needed, else a keep-probability never moves")

    @classmethod
    def add_arguments(
        cls,
        parser: argparse.ArgumentParser | argparse._ArgumentGroup,
        only: tuple[str, ...] | None = None,
    ) -> None:
        """The base's flags, but ``--stream`` may be repeated (one declaration per flag)."""
        names = tuple(f.name for f, _, _ in cls._settings() if f.name != "stream")
        super().add_arguments(parser, tuple(n for n in names if only is None or n in only))
        if only is None or "stream" in only:
            help_text = next(m["help"] for f, m, _ in cls._settings() if f.name == "stream")
            parser.add_argument(
                cls.flag_name("stream"),
                dest="stream",
                action="append",
                default=None,
                metavar="DECLARATION",
                help=f"{help_text} (default: none; env {cls.env_name('stream')})",
            )

    @classmethod
    def from_args(
        cls, args: argparse.Namespace | None = None, env: Mapping[str, str] | None = None, **given: Any
    ) -> Self:
        """As the base; repeated ``--stream`` flags are joined with ``;``."""
        if args is not None and isinstance(getattr(args, "stream", None), list):
            args = argparse.Namespace(**{**vars(args), "stream": ";".join(args.stream)})
        return super().from_args(args, env, **given)

    def streams(self) -> tuple[StreamDeclaration, ...]:
        """Every declared stream: the file's, then the flags' (a topic declared twice is an error)."""
        found: list[tuple[str, StreamDeclaration]] = []
        if self.streams_file:
            path = Path(self.streams_file)
            found += [(f"{path}: stream {s.topic}", s) for s in load_streams_file(path)]
        for text in (t for t in self.stream.split(";") if t.strip()):
            where = f"{self.flag_name('stream')} {text.strip()!r}"
            try:
                found.append((where, parse_stream(text)))
            except ValueError as exc:
                raise SettingsError(f"{where}: {exc}") from None
        return _unique(found)


@dataclass(frozen=True)
class ShedderSettings(Settings):
    """The service's own knobs (``ballast shedder run -h``); the policy's are :class:`PolicySettings`.

    Why these defaults: offsets are sampled every second, so a 5 s cycle sees five points per
    partition and a lag shorter than the cycle is still resolved (kafka-lag-exporter's 30 s poll
    suits dashboards, not a controller). Rates forget with a 10 s time constant: a 2x step is
    seen at 40% after one cycle and 63% after two, when the rising trigger fires; 30 s would plan
    that cycle with a rate a quarter of the way there. The shedder's id is stable (the prefix's by
    default), because the request ids derived from it are what the controller deduplicates across
    a restart; a random id would make a resend after a crash a second request.
    """

    ENV_PREFIX: ClassVar[str] = "BALLAST_SHEDDER_"

    shedder_id: str = setting(
        "", "this shedder's id: its request ids, its faust app and consumer group (empty: <prefix>.shedder)"
    )
    router_group: str = setting(
        "", "consumer group of the routers, whose committed offsets are measured (empty: <prefix>.routers)"
    )
    reduce_jobs: str = setting(
        "", "comma-separated reduce job ids whose ReduceProgress counts (default: every job that reports)"
    )
    sample_s: float = setting(1.0, "log-end and committed offsets are sampled this often", minimum=0.05)
    trend_tolerance_s: float = setting(
        1.0, "a stream's lag is rising (falling) when it moved more than this since the last cycle", minimum=0
    )
    rate_tau_s: float = setting(10.0, "time constant of the smoothed service rates", minimum=0.1)
    arrival_tau_s: float = setting(
        3.0,
        "time constant of the smoothed arrival rates (log ends move smoothly: a step shows within a cycle)",
        minimum=0.1,
    )
    rate_interval_s: float = setting(
        2.0,
        "rates are measured over intervals at least this long (offsets move by commits: a shorter "
        "interval reads a burst or a zero)",
        minimum=0,
    )
    capacity_window_s: float = setting(
        60.0, "the reduce's cost per batch and per row is fitted over its batches of this long", minimum=1
    )
    capacity_batch_s: float = setting(
        5.0,
        "the capacity is the reduce's rate at batches of this long (its lag then stays about twice that)",
        minimum=0.1,
    )
    table_capacity: int = setting(64, "points kept per partition to turn offsets into time", minimum=3)
    status_window: int = setting(5, "evaluations a partition's status is judged over (Burrow's window)",
                                 minimum=2)  # fmt: skip
    allowed_lag_s: float = setting(0.0, "a time lag up to this counts as none for the status", minimum=0)
    stop_after_s: float = setting(
        60.0, "a consumer silent this long, with records older than that unread, is STOP", minimum=0.1
    )
    metrics_from: str = setting(
        "latest",
        "where the shedder's first start reads the metrics topic (later starts: where it left off)",
        choices=("latest", "earliest"),
    )
    session_timeout_s: float = setting(
        10.0, "consumer group session of the metrics agent (a restart rejoins at once: static member)",
        minimum=6,
    )
    scaling_hold_s: float = setting(
        30.0,
        "after a scaling action in the control log (SCALE, or an applied SCALING decision), decide nothing "
        "for this long: its rates are the reconfiguration's, not the new capacity's (docs/scaling.md)",
        minimum=0,
    )
    publish_lag: bool = setting(True, "publish a LagSample per group and partition every cycle")
    dry_run: bool = setting(False, "decide and log, send no SHEDDING request")
    resend_max_s: float = setting(
        60.0,
        "a refused request is sent again when decided again: the next cycle, then 2, 4, ... cycles after "
        "each refusal, at most this long",
        minimum=0,
    )
    metrics_port: int = setting(0, "Prometheus /metrics port (0: off)", minimum=0)
    metrics_host: str = setting("127.0.0.1", "address the Prometheus endpoint binds (loopback by default)")
    log_level: str = setting("info", "log level", choices=("debug", "info", "warning", "error"))

    def resolved(self, prefix: str) -> ShedderSettings:
        """These settings with the defaults that depend on the deployment filled in: the id
        ``<prefix>.shedder`` and the routers' group ``<prefix>.routers``, named as the routers name
        it (:mod:`ballast.kafka.identities`); explicit values are kept."""
        return replace(
            self,
            shedder_id=self.shedder_id or identities.shedder_id(prefix),
            router_group=self.router_group or identities.router_group(prefix),
        )

    def jobs(self) -> frozenset[str]:
        return frozenset(j.strip() for j in self.reduce_jobs.split(",") if j.strip())

    def status_rules(self) -> StatusRules:
        return StatusRules(self.status_window, self.allowed_lag_s, self.stop_after_s)
