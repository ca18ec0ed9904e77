"""Processors named in one string, so a command line can choose one: ``name[:option=value,...]``.

Examples: ``aggregate:tumbling=10s``, ``aggregate:size=10s,slide=5s``, ``last_values:n=5,size=10s``.
Durations are a whole number with a unit: ``500ms``, ``10s``, ``2m``, ``1h``.

A user's own processor is named by where it lives: ``my_pkg.my_module:MyProcessor[:option=value,...]``
(any importable module, on the driver and the executors alike). The class is built with
``from_options(options)`` when it has that classmethod, else with the options as keyword strings;
it must be a :class:`~spark_jobs.processors.interface.Processor` (per key) or a
:class:`~spark_jobs.processors.batch.BatchProcessor` (docs/processors.md has a worked example).

Why a registry module of its own: the interface must not import the processors (they import it),
and a new built-in is then one entry here, next to the options it takes.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

from spark_jobs.durations import parse_duration
from spark_jobs.processors.aggregate import WindowAggregate
from spark_jobs.processors.batch import BatchProcessor
from spark_jobs.processors.interface import Processor
from spark_jobs.processors.last_values import LastValues
from spark_jobs.processors.windows import WindowSpec

_WINDOW_OPTIONS = ("tumbling", "size", "slide")


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


def from_spec(text: str) -> Processor | BatchProcessor:
    """The processor ``text`` names, e.g. ``aggregate:size=10s,slide=5s``; ValueError says what is wrong."""
    name, _, rest = text.strip().partition(":")
    name = name.strip()
    entry = REGISTRY.get(name)
    if entry is None:
        class_name = rest.partition(":")[0].strip()
        if "." in name or class_name.isidentifier():  # module.path[:Class] or module:Class
            return _user_processor(name, rest)
        valid = ", ".join(f"{n} (e.g. {e.example})" for n, e in REGISTRY.items())
        raise ValueError(
            f"unknown processor {name!r}; valid processors: {valid}, "
            "or your own as module.path:Class[:options]"
        )
    options = _options(name, rest, entry.options)
    missing = [o for o in entry.required if o not in options]
    if missing:
        raise ValueError(f"{name}: missing option {', '.join(missing)} (e.g. {entry.example})")
    return entry.build(options)


def _options(name: str, text: str, allowed: tuple[str, ...] | None) -> dict[str, str]:
    options: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        option, eq, value = (s.strip() for s in item.partition("="))
        if allowed is not None and option not in allowed:
            raise ValueError(f"{name}: unknown option {option!r}; valid options: {', '.join(allowed)}")
        if not eq or not value:
            raise ValueError(f"{name}: option {option!r} needs a value ({option}=...)")
        if option in options:
            raise ValueError(f"{name}: option {option!r} given twice")
        options[option] = value
    return options


def _user_processor(module_name: str, rest: str) -> Processor | BatchProcessor:
    """``module.path:Class[:options]``: a user's processor class, built from its options."""
    class_name, _, options_text = rest.partition(":")
    class_name = class_name.strip()
    where = f"{module_name}:{class_name}"
    if not class_name.isidentifier():
        raise ValueError(f"{module_name}: name the class too, as module.path:Class[:option=value,...]")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(
            f"processor module {module_name!r} cannot be imported ({exc}); is it on PYTHONPATH?"
        ) from None
    cls = getattr(module, class_name, None)
    if not isinstance(cls, type):
        raise ValueError(f"{module_name} has no class {class_name!r}")
    options = _options(where, options_text, None)
    try:
        built = cls.from_options(options) if hasattr(cls, "from_options") else cls(**options)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from None
    if not isinstance(built, Processor | BatchProcessor):
        raise ValueError(f"{where} is neither a Processor (per key) nor a BatchProcessor")
    return built
