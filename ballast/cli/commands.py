"""Sub-commands are registered, not imported: each concern and service declares its ``ballast``
sub-commands as entry points in the ``ballast.commands`` group (``pyproject.toml``).

Why entry points: the ``ballast`` command is part of the library, and the library never imports a
service or a Spark job. A service adds ``ballast controller …`` by declaring
``controller = "services.controller.cli:register"`` in its package metadata, without a line of the
library changing; the direction of imports stays library ← services. The same mechanism would take
a plugin installed from another distribution.

Each entry point names a function ``register(subparsers)`` that adds one top-level command. A
command that cannot be set up does not take the others down: neither when its module cannot be
imported nor when its ``register()`` imports what is missing (``ballast reduce`` builds its flags
from settings that import pandas). It is listed with the reason, and running it says why in one
line; when the missing module is an optional dependency, the line names the extra that brings it
(``pip install 'ballast[spark]'``), read from the project's own declaration (:func:`extra_for`).
"""

from __future__ import annotations

import argparse
import re
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from importlib.metadata import EntryPoint, entry_points

from ballast.cli.console import EnvironmentProblem

GROUP = "ballast.commands"
DISTRIBUTION = "ballast"
FIRST_PARTY = ("ballast", "services", "spark_jobs")
# import names whose distribution is named otherwise (the rest: the same name, `_` as `-`)
DISTRIBUTIONS = {"faust": "faust-streaming", "google": "protobuf", "mode": "mode-streaming"}

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


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def extra_for(module: str, requirements: Iterable[str]) -> str | None:
    """The extra whose requirements bring ``module`` (an import name), "" for a base dependency,
    None for a module the project does not declare. ``requirements`` are ``Requires-Dist`` lines
    (``pandas<3,>=2.3.3; extra == "spark"``); a specific extra is named before ``all``."""
    wanted = _normalized(DISTRIBUTIONS.get(module, module))
    extras = []
    for line in requirements:
        name = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line)
        if name is None or _normalized(name.group(1)) != wanted:
            continue
        extra = re.search(r"""extra\s*==\s*["']([^"']+)["']""", line)
        extras.append(extra.group(1) if extra else "")
    if not extras:
        return None
    return sorted(extras, key=lambda e: (e == "all", e))[0]


def declared_requirements() -> list[str]:
    """The project's requirements as ``Requires-Dist`` lines: the checkout's pyproject.toml when this
    runs from one (an editable install's metadata is as old as its last ``make setup``), else the
    installed distribution's metadata."""
    from ballast.paths import CHECKOUT

    if CHECKOUT is not None:
        project = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["project"]
        lines = list(project.get("dependencies", ()))
        for extra, reqs in project.get("optional-dependencies", {}).items():
            lines += [f'{r}; extra == "{extra}"' for r in reqs]
        return lines
    try:
        return list(metadata.requires(DISTRIBUTION) or ())
    except metadata.PackageNotFoundError:
        return []


def missing_dependency(exc: BaseException) -> str | None:
    """"needs pandas, which is not installed: pip install 'ballast[spark]'" when ``exc`` is a
    module the project declares (in an extra or not) that is not installed; else None."""
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    top = (missing or "").partition(".")[0]
    if not top or top in FIRST_PARTY:
        return None
    extra = extra_for(top, declared_requirements())
    if extra is None:
        return None
    install = f"pip install '{DISTRIBUTION}[{extra}]'" if extra else f"pip install '{DISTRIBUTION}'"
    return f"needs {top}, which is not installed: {install}"


def unavailable_reason(exc: BaseException) -> str:
    """Why a command cannot be set up, in a few words: the missing dependency and how to install
    it when the project declares it, else the exception itself."""
    return missing_dependency(exc) or f"{type(exc).__name__}: {exc}"


def _broken(name: str, target: str, exc: BaseException) -> Register:
    """A stand-in for a command that cannot be set up: it appears in --help and explains itself,
    with any sub-command or flag after it (``ballast reduce run -h``)."""
    reason = unavailable_reason(exc)
    if missing_dependency(exc):
        line = f"`ballast {name}` is unavailable: {reason}"
    else:
        line = f"`ballast {name}` cannot be loaded from {target}: {reason}"

    def register(sub: argparse._SubParsersAction) -> None:
        parser = sub.add_parser(name, help=f"(unavailable: {reason})", description=line)
        parser.add_argument("rest", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

        def fail(_args: argparse.Namespace) -> int:
            raise EnvironmentProblem(line)

        parser.set_defaults(func=fail)

    return register


def _guarded(name: str, target: str, register: Register) -> Register:
    """``register``, or the stand-in when it raises an ImportError (an optional dependency the
    command's flags already need). Only import errors: any other error in a ``register()`` is a bug,
    and shows as one."""

    def guarded(sub: argparse._SubParsersAction) -> None:
        # argparse cannot remove a sub-command: what a failed register() added is taken back by hand
        names, listed = dict(sub._name_parser_map), len(sub._choices_actions)
        try:
            register(sub)
        except ImportError as exc:
            for added in set(sub._name_parser_map) - set(names):
                del sub._name_parser_map[added]
            del sub._choices_actions[listed:]
            _broken(name, target, exc)(sub)

    return guarded


def _load(ep: EntryPoint) -> CommandEntry:
    try:
        register = _guarded(ep.name, ep.value, ep.load())
    except Exception as exc:  # an import error in one command must not break the others
        register = _broken(ep.name, ep.value, exc)
    return CommandEntry(ep.name, ep.value, register)


def registered_commands() -> list[CommandEntry]:
    """Every ``ballast.commands`` entry point, the library's first, then by name."""
    found = {ep.name: ep for ep in entry_points(group=GROUP)}  # one per name (a reinstall may repeat)
    entries = [_load(ep) for ep in found.values()]
    return sorted(entries, key=lambda e: (not e.from_library, e.name))
