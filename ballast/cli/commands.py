"""Sub-commands are registered, not imported: each concern and service declares its ``ballast``
sub-commands as entry points in the ``ballast.commands`` group (``pyproject.toml``).

Why entry points: the ``ballast`` command is part of the library, and the library never imports a
service or a Spark job. A service adds ``ballast controller …`` by declaring
``controller = "services.controller.cli:register"`` in its package metadata, without a line of the
library changing; the direction of imports stays library ← services. The same mechanism would take
a plugin installed from another distribution.

Each entry point names a function ``register(subparsers)`` that adds one top-level command. A
command whose module cannot be imported (a service's optional dependency missing) does not take
the others down: it is listed with the reason, and running it says why.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points

GROUP = "ballast.commands"

Register = Callable[[argparse._SubParsersAction], None]


@dataclass(frozen=True)
class CommandEntry:
    """One registered top-level command."""

    name: str
    target: str  # "module:function"
    register: Register

    @property
    def from_library(self) -> bool:
        return self.target.startswith("ballast.")


def _broken(name: str, target: str, exc: BaseException) -> Register:
    """A stand-in for a command that cannot be loaded: it appears in --help and explains itself."""

    def register(sub: argparse._SubParsersAction) -> None:
        reason = f"{type(exc).__name__}: {exc}"
        parser = sub.add_parser(name, help=f"(unavailable: {reason})")

        def fail(_args: argparse.Namespace) -> int:
            raise RuntimeError(f"`ballast {name}` cannot be loaded from {target}: {reason}")

        parser.set_defaults(func=fail)

    return register


def _load(ep: EntryPoint) -> CommandEntry:
    try:
        register = ep.load()
    except Exception as exc:  # an import error in one command must not break the others
        register = _broken(ep.name, ep.value, exc)
    return CommandEntry(ep.name, ep.value, register)


def registered_commands() -> list[CommandEntry]:
    """Every ``ballast.commands`` entry point, the library's first, then by name."""
    found = {ep.name: ep for ep in entry_points(group=GROUP)}  # one per name (a reinstall may repeat)
    entries = [_load(ep) for ep in found.values()]
    return sorted(entries, key=lambda e: (not e.from_library, e.name))
