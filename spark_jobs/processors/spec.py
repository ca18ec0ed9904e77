"""Processors named in one string, so a command line can choose one: ``name[:option=value,...]``.

Examples: ``aggregate:tumbling=10s``, ``aggregate:size=10s,slide=5s``, ``last_values:n=5,size=10s``.
Durations are a whole number with a unit: ``500ms``, ``10s``, ``2m``, ``1h``.

Why a registry module of its own: the interface must not import the processors (they import it),
and a new processor is then one entry here, next to the options it takes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from spark_jobs.processors.aggregate import WindowAggregate
from spark_jobs.processors.interface import Processor
from spark_jobs.processors.last_values import LastValues
from spark_jobs.processors.windows import WindowSpec

_UNITS_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000}
_DURATION = re.compile(r"(\d+)(ms|s|m|h)")
_WINDOW_OPTIONS = ("tumbling", "size", "slide")


def parse_duration(text: str) -> int:
    """Milliseconds of ``500ms`` / ``10s`` / ``2m`` / ``1h``; a bare number is refused (which unit?)."""
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise ValueError(
            f"{text!r} is not a duration: use a whole number and a unit, e.g. 500ms, 10s, 2m, 1h"
        )
    return int(match.group(1)) * _UNITS_MS[match.group(2)]


@dataclass(frozen=True)
class _Entry:
    options: tuple[str, ...]
    required: tuple[str, ...]
    build: Callable[[dict[str, str]], Processor]
    example: str


def _windows(name: str, options: dict[str, str]) -> WindowSpec:
    if "tumbling" in options:
        if "size" in options or "slide" in options:
            raise ValueError(f"{name}: give either tumbling=<duration> or size=<duration>[,slide=<duration>]")
        return WindowSpec(_duration(name, "tumbling", options["tumbling"]))
    if "size" not in options:
        raise ValueError(f"{name} needs windows: tumbling=<duration> or size=<duration>[,slide=<duration>]")
    size = _duration(name, "size", options["size"])
    slide = _duration(name, "slide", options["slide"]) if "slide" in options else None
    try:
        return WindowSpec(size, slide)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


def _duration(name: str, option: str, text: str) -> int:
    try:
        value = parse_duration(text)
    except ValueError as exc:
        raise ValueError(f"{name}: {option}: {exc}") from None
    if value <= 0:
        raise ValueError(f"{name}: {option} must be longer than 0")
    return value


def _positive_int(name: str, option: str, text: str) -> int:
    if not text.strip().isdigit() or int(text) <= 0:
        raise ValueError(f"{name}: {option} must be a positive whole number, got {text!r}")
    return int(text)


REGISTRY: dict[str, _Entry] = {
    "aggregate": _Entry(
        options=_WINDOW_OPTIONS,
        required=(),
        build=lambda o: WindowAggregate(_windows("aggregate", o)),
        example="aggregate:tumbling=10s",
    ),
    "last_values": _Entry(
        options=("n", *_WINDOW_OPTIONS),
        required=("n",),
        build=lambda o: LastValues(_positive_int("last_values", "n", o["n"]), _windows("last_values", o)),
        example="last_values:n=5,size=10s",
    ),
}


def from_spec(text: str) -> Processor:
    """The processor ``text`` names, e.g. ``aggregate:size=10s,slide=5s``; ValueError says what is wrong."""
    name, _, rest = text.strip().partition(":")
    name = name.strip()
    entry = REGISTRY.get(name)
    if entry is None:
        valid = ", ".join(f"{n} (e.g. {e.example})" for n, e in REGISTRY.items())
        raise ValueError(f"unknown processor {name!r}; valid processors: {valid}")
    options: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        option, eq, value = (s.strip() for s in item.partition("="))
        if option not in entry.options:
            raise ValueError(f"{name}: unknown option {option!r}; valid options: {', '.join(entry.options)}")
        if not eq or not value:
            raise ValueError(f"{name}: option {option!r} needs a value ({option}=...)")
        if option in options:
            raise ValueError(f"{name}: option {option!r} given twice")
        options[option] = value
    missing = [o for o in entry.required if o not in options]
    if missing:
        raise ValueError(f"{name}: missing option {', '.join(missing)} (e.g. {entry.example})")
    return entry.build(options)
