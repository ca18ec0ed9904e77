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


# --- a command whose optional dependency is missing -----------------------------------------------


def extras() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def needs_pandas(sub: argparse._SubParsersAction) -> None:
    """A register() like ``ballast reduce``'s before the guard: it adds its parser and sub-commands,
    then builds settings that import an optional dependency that is not installed."""
    fake = sub.add_parser("fake", help="half registered")
    fake.add_subparsers(dest="fake_command").add_parser("run")
    raise ModuleNotFoundError("No module named 'pandas'", name="pandas")


@pytest.fixture
def with_fake(monkeypatch):
    real = list(commands.registered_commands())
    fake = commands.CommandEntry("fake", "spark_jobs.fake.cli:register", commands._guarded(
        "fake", "spark_jobs.fake.cli:register", needs_pandas
    ))  # fmt: skip
    monkeypatch.setattr("ballast.cli.main.registered_commands", lambda: [*real, fake])
    monkeypatch.setenv("COLUMNS", "400")  # argparse wraps help at the terminal's width


def test_a_register_that_imports_a_missing_extra_names_the_extra_and_the_others_work(with_fake, capsys):
    assert "pandas>=2.3.3,<3" in extras()["spark"]  # the extra the message must name
    with pytest.raises(SystemExit) as help_exit:
        main(["--help"])
    assert help_exit.value.code == 0
    listed = capsys.readouterr().out
    assert "(unavailable: needs pandas, which is not installed: pip install 'ballast[spark]')" in listed
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == {*declared(), "fake"}
    assert [a.dest for a in sub._choices_actions].count("fake") == 1  # the half-made parser is gone

    line = (
        "error: `ballast fake` is unavailable: needs pandas, which is not installed: "
        "pip install 'ballast[spark]'"
    )
    for argv in (["fake"], ["fake", "run"], ["fake", "run", "-h", "--flag", "x"]):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.splitlines() == [line], argv
    with pytest.raises(SystemExit) as fake_help:
        main(["fake", "-h"])
    assert fake_help.value.code == 0
    assert "pip install 'ballast[spark]'" in capsys.readouterr().out
    assert main(["stack", "status", "--state-dir", "/nonexistent-ballast"]) == 1  # the others still work
    assert "no stack recorded" in capsys.readouterr().err


def test_an_error_in_a_register_that_is_no_import_error_is_not_hidden(monkeypatch):
    def buggy(sub: argparse._SubParsersAction) -> None:
        raise KeyError("a bug")

    fake = commands.CommandEntry("fake", "x:y", commands._guarded("fake", "x:y", buggy))
    monkeypatch.setattr("ballast.cli.main.registered_commands", lambda: [fake])
    with pytest.raises(KeyError):
        build_parser()


def test_an_optional_dependency_imported_when_the_command_runs_names_its_extra(monkeypatch, capsys):
    def register(sub: argparse._SubParsersAction) -> None:
        def run(_args: argparse.Namespace) -> int:
            raise ModuleNotFoundError("No module named 'faust.auth'", name="faust.auth")

        sub.add_parser("fake").set_defaults(func=run)

    fake = commands.CommandEntry("fake", "x:y", commands._guarded("fake", "x:y", register))
    monkeypatch.setattr("ballast.cli.main.registered_commands", lambda: [fake])
    assert main(["fake"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "error: `ballast fake` needs faust, which is not installed: pip install 'ballast[shedder]'"
    ]


def test_extra_for_reads_the_declared_requirements():
    """Every optional dependency maps back to its own extra (not ``all``), a base one to "", a module
    the project does not declare to None; import names that differ from their distribution's too."""
    requirements = commands.declared_requirements()
    for extra, reqs in extras().items():
        if extra == "all":
            continue
        for req in reqs:
            dist = req.split(">")[0].split("<")[0].split("=")[0]
            module = {"faust-streaming": "faust", "protobuf": "google"}.get(dist, dist.replace("-", "_"))
            assert commands.extra_for(module, requirements) == extra, req
    assert commands.extra_for("confluent_kafka", requirements) == ""
    assert commands.extra_for("numpy", requirements) == ""
    assert commands.extra_for("left_pad", requirements) is None
    assert commands.missing_dependency(ModuleNotFoundError("x", name="left_pad")) is None
    assert commands.missing_dependency(ModuleNotFoundError("x", name="services.ghost")) is None
