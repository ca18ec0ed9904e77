"""The one configuration mechanism: flag > environment > default, typed conversion, errors that name
their source, and help that shows every default and environment variable."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from ballast.cli.connection import ConnectionSettings
from ballast.kafka.topics import LayoutSettings
from ballast.settings import Settings, SettingsError, setting


@dataclass(frozen=True)
class Demo(Settings):
    ENV_PREFIX: ClassVar[str] = "DEMO_"

    name: str = setting("alpha", "a name")
    count: int = setting(3, "how many", minimum=1)
    ratio: float = setting(0.5, "a fraction")
    fast: bool = setting(True, "go fast", off_flag="--slow")
    topics: tuple[str, ...] = setting(("a", "b"), "topics")
    ports: tuple[int, ...] = setting((), "ports")
    size: int = setting(1, "a size", choices=(1, 3))
    where: Path = setting(Path("/tmp/x"), "a folder", env="DEMO_FOLDER")


def parse(argv: list[str], env: dict[str, str] | None = None, cls: type[Settings] = Demo):
    parser = argparse.ArgumentParser()
    cls.add_arguments(parser)
    return cls.from_args(parser.parse_args(argv), env=env or {})


def test_flag_beats_env_beats_default():
    assert parse([]).count == 3
    assert parse([], {"DEMO_COUNT": "7"}).count == 7
    assert parse(["--count", "9"], {"DEMO_COUNT": "7"}).count == 9
    assert parse([], {"DEMO_FOLDER": "/srv/y"}).where == Path("/srv/y")  # an explicit env name


def test_keyword_values_beat_flag_and_env_and_unknown_keywords_are_refused():
    parser = argparse.ArgumentParser()
    Demo.add_arguments(parser)
    args = parser.parse_args(["--count", "9"])
    assert Demo.from_args(args, env={"DEMO_COUNT": "7"}, count=11).count == 11
    with pytest.raises(TypeError, match="nope"):
        Demo.from_args(args, env={}, nope=1)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("yes", True), ("ON", True), ("1", True), ("false", False), ("no", False), ("0", False)],
)
def test_bool_from_env(raw, expected):
    assert parse([], {"DEMO_FAST": raw}).fast is expected


def test_bool_flags_and_off_flag():
    assert parse([]).fast is True
    assert parse(["--no-fast"]).fast is False
    assert parse(["--slow"]).fast is False
    assert parse(["--fast"], {"DEMO_FAST": "false"}).fast is True


def test_tuple_and_number_conversion():
    s = parse(["--topics", " x, y,,z ", "--ports", "9092,9093", "--ratio", "0.25"])
    assert s.topics == ("x", "y", "z")
    assert s.ports == (9092, 9093)
    assert s.ratio == 0.25
    assert parse([]).topics == ("a", "b")


def test_int_choices_are_accepted_from_flag_and_checked_from_env():
    assert parse(["--size", "3"]).size == 3
    with pytest.raises(SettingsError, match=r"^DEMO_SIZE: 2 is not one of 1, 3$"):
        parse([], {"DEMO_SIZE": "2"})


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--count", "x"], {}, r"^--count: expected an integer, got 'x'$"),
        ([], {"DEMO_COUNT": "x"}, r"^DEMO_COUNT: expected an integer, got 'x'$"),
        ([], {"DEMO_RATIO": "half"}, r"^DEMO_RATIO: expected a number"),
        ([], {"DEMO_FAST": "maybe"}, r"^DEMO_FAST: expected true or false"),
        ([], {"DEMO_PORTS": "1,b"}, r"^DEMO_PORTS: expected an integer, got 'b'$"),
        (["--count", "0"], {}, r"^--count: must be >= 1, got '0'$"),
    ],
)
def test_bad_values_name_the_flag_or_env_var(argv, env, message):
    with pytest.raises(SettingsError, match=message):
        parse(argv, env)


def test_help_lists_default_and_env_var():
    parser = argparse.ArgumentParser()
    Demo.add_arguments(parser)
    text = " ".join(parser.format_help().split())  # argparse wraps lines
    assert "how many (default: 3; env DEMO_COUNT)" in text
    assert "topics (default: a,b; env DEMO_TOPICS)" in text
    assert "ports (default: none; env DEMO_PORTS)" in text
    assert "a folder (default: /tmp/x; env DEMO_FOLDER)" in text
    assert "--slow" in text and "--no-fast" in text


def test_only_limits_the_flags_but_not_the_environment():
    parser = argparse.ArgumentParser()
    ConnectionSettings.add_arguments(parser, only=("state_dir",))
    with pytest.raises(SystemExit):
        parser.parse_args(["--bootstrap", "h:1"])
    args = parser.parse_args(["--state-dir", "/tmp/s"])
    conn = ConnectionSettings.from_args(args, env={"BALLAST_BOOTSTRAP_SERVERS": "h:2"})
    assert conn.state_dir == Path("/tmp/s") and conn.bootstrap == "h:2"


def test_layout_settings_env_names_and_layout():
    env = {"BALLAST_TOPIC_PREFIX": "p", "BALLAST_WORKERS": "5", "BALLAST_INPUT_PARTITIONS": "2"}
    layout = LayoutSettings.from_args(None, env=env).layout()
    assert (layout.name("routed"), layout.workers, layout.input_partitions) == ("p.routed", 5, 2)
    with pytest.raises(SettingsError, match=r"^BALLAST_WORKERS: must be >= 1"):
        LayoutSettings.from_args(None, env={"BALLAST_WORKERS": "0"})


def test_bootstrap_flag_then_recorded_stack_then_localhost(tmp_path):
    from ballast.devstack.state import NodeState, StackState

    empty = ConnectionSettings.from_args(None, env={}, state_dir=tmp_path / "none")
    assert empty.bootstrap_servers() == "127.0.0.1:9092"
    node = NodeState(1, 41234, 41235, str(tmp_path / "d"), str(tmp_path / "c"), str(tmp_path / "l"))
    StackState(str(tmp_path), "cid", [node]).save()
    assert ConnectionSettings.from_args(None, env={}, state_dir=tmp_path).bootstrap_servers() == (
        "127.0.0.1:41234"
    )
    given = ConnectionSettings.from_args(None, env={"BALLAST_BOOTSTRAP_SERVERS": "h:9"}, state_dir=tmp_path)
    assert given.bootstrap_servers() == "h:9"


def test_mutable_defaults_are_refused():
    with pytest.raises(TypeError, match="immutable"):
        setting([], "a list")


def test_to_argv_gives_the_same_settings_back():
    """What ``ballast reduce submit`` relies on to hand its resolved settings to the driver."""
    import argparse

    from ballast.kafka.topics import LayoutSettings
    from services.router.config import RouterSettings
    from spark_jobs.reduce.config import ReduceSettings

    for settings in (
        ReduceSettings(processor="last_values:n=3,size=2s", record_cost_us=5.0, bins=7),
        LayoutSettings(prefix="p", workers=3),
        RouterSettings(router_id="r9", input_topics=("a", "b"), exactly_once=False),
    ):
        parser = argparse.ArgumentParser()
        type(settings).add_arguments(parser)
        assert type(settings).from_args(parser.parse_args(settings.to_argv()), env={}) == settings


def test_a_secret_comes_from_a_file_or_the_environment_and_a_flag_warns(tmp_path, capsys):
    """Issue 28, item 4: a password on the command line shows in `ps`."""
    secret = tmp_path / "sasl"
    secret.write_text("from-a-file\n")
    sasl = {
        "BALLAST_SECURITY_PROTOCOL": "SASL_SSL",
        "BALLAST_SASL_MECHANISM": "SCRAM-SHA-512",
        "BALLAST_SASL_USERNAME": "router",
    }
    env = {**sasl, "BALLAST_SASL_PASSWORD": "from-env"}
    assert (
        parse([], {**sasl, "BALLAST_SASL_PASSWORD_FILE": str(secret)}, ConnectionSettings).sasl_password
        == "from-a-file"
    )
    assert (
        parse(["--sasl-password-file", str(secret)], env, ConnectionSettings).sasl_password == "from-a-file"
    )
    assert (
        parse([], {**env, "BALLAST_SASL_PASSWORD_FILE": str(secret)}, ConnectionSettings).sasl_password
        == "from-env"
    )
    assert capsys.readouterr().err == ""
    got = parse(["--sasl-password", "on-the-line"], env, ConnectionSettings)
    assert got.sasl_password == "on-the-line" and repr(got.sasl_password) == "'***'"
    warned = capsys.readouterr().err
    assert "--sasl-password shows in `ps`" in warned and "on-the-line" not in warned
    with pytest.raises(SettingsError, match="BALLAST_SSL_KEY_PASSWORD_FILE: cannot read"):
        parse([], {"BALLAST_SSL_KEY_PASSWORD_FILE": str(tmp_path / "missing")}, ConnectionSettings)


@dataclass(frozen=True)
class Pairs(Settings):
    ENV_PREFIX: ClassVar[str] = "DEMO_"

    props: tuple[str, ...] = setting(
        (), "client settings", flag="-X", aliases=("--prop",), pairs=True,
        secret_key=lambda key: key.endswith("password"), secret_elsewhere="a file",
    )  # fmt: skip


def test_pairs_merge_the_variable_then_the_flags_and_a_key_in_both_takes_the_flag():
    env = {"DEMO_PROPS": "# a comment\na.b=1\n\n  c.d = two words \nz=env\n"}
    s = parse(["-X", "z=flag", "--prop", "e=x=y"], env, cls=Pairs)
    assert s.props == ("a.b=1", "c.d=two words", "e=x=y", "z=flag")  # sorted by key; '=' in a value kept
    assert parse([], {}, cls=Pairs).props == ()


def test_a_secret_pair_is_refused_as_a_flag_and_travels_by_the_variable():
    refused = r"^-X db.password: a secret in a flag shows in `ps`.*DEMO_PROPS.*a file$"
    with pytest.raises(SettingsError, match=refused):
        parse(["-X", "db.password=hunter2"], cls=Pairs)
    s = parse(["-X", "a=1"], {"DEMO_PROPS": "db.password=hunter2"}, cls=Pairs)
    assert "hunter2" not in repr(s) and "hunter2" not in " ".join(s.to_argv())
    assert s.to_argv() == ["-X", "a=1"] and s.secret_env() == {"DEMO_PROPS": "db.password=hunter2"}
    again = parse(s.to_argv(), s.secret_env(), cls=Pairs)
    assert again == s and [type(p).__name__ for p in again.props] == ["str", "Secret"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-X", "novalue"], r"^-X: expected KEY=VALUE, got 'novalue'$"),
        (["-X", "=v"], r"^-X: expected KEY=VALUE, the key is empty$"),
    ],
)
def test_a_pair_without_a_key_or_equals_sign_is_a_usage_error(argv, message):
    with pytest.raises(SettingsError, match=message):
        parse(argv, cls=Pairs)


def test_help_of_a_pairs_setting_names_its_variable():
    parser = argparse.ArgumentParser()
    Pairs.add_arguments(parser)
    text = " ".join(parser.format_help().split())
    assert "-X KEY=VALUE, --prop KEY=VALUE" in text
    assert "client settings (repeatable; a variable holds one KEY=VALUE a line; env DEMO_PROPS)" in text
