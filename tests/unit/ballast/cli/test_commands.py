"""Sub-commands are registered as entry points, not imported by the library: every command that
pyproject declares is what `ballast` offers, and a command that cannot load does not take the
others down."""

from __future__ import annotations

import argparse
import tomllib
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from ballast.cli import commands
from ballast.cli.main import build_parser, main

ROOT = Path(__file__).resolve().parents[4]


def declared() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return dict(project["entry-points"][commands.GROUP])


def test_every_declared_command_is_registered_and_offered():
    """A stale install (pyproject changed, `make setup` not run) would miss some: this says so."""
    found = {c.name: c.target for c in commands.registered_commands()}
    assert found == declared(), "run `make setup`: the installed entry points differ from pyproject.toml"
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == set(declared())


def test_the_library_commands_come_first():
    names = [c.from_library for c in commands.registered_commands()]
    assert names == sorted(names, reverse=True)


def test_a_command_that_cannot_load_is_listed_and_explains_itself(monkeypatch, capsys):
    broken = EntryPoint("ghost", "services.ghost.cli:register", commands.GROUP)
    real = list(commands.registered_commands())
    monkeypatch.setattr(commands, "registered_commands", lambda: [*real, commands._load(broken)])
    monkeypatch.setattr("ballast.cli.main.registered_commands", commands.registered_commands)
    with pytest.raises(SystemExit):
        main(["--help"])
    listed = capsys.readouterr().out
    assert "ghost" in listed and "(unavailable: ModuleNotFoundError" in listed
    assert main(["ghost"]) == 1
    err = capsys.readouterr().err
    assert "cannot be loaded from services.ghost.cli:register" in err and "ModuleNotFoundError" in err
    assert main(["stack", "status", "--state-dir", "/nonexistent-ballast"]) == 1  # the others still work
