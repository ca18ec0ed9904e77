"""The shedder's policy settings and stream declarations: flags, environment, files, and errors that
name the field."""

from __future__ import annotations

import argparse
import json

import pytest

from ballast.settings import SettingsError
from services.shedder.config import (
    PolicySettings,
    StreamDeclaration,
    load_streams_file,
    parse_duration,
    parse_stream,
)

pytestmark = pytest.mark.unit


def settings(*argv: str, env: dict[str, str] | None = None) -> PolicySettings:
    parser = argparse.ArgumentParser()
    PolicySettings.add_arguments(parser)
    return PolicySettings.from_args(parser.parse_args(list(argv)), env=env or {})


def test_a_flag_declaration_with_every_field_and_the_defaults():
    assert parse_stream("topic=ballast.input,target=30s,priority=1,min-accuracy=0.5") == StreamDeclaration(
        "ballast.input", 30.0, 1, 0.5
    )
    # priority 0 and min-accuracy 1 (never shed) unless declared
    assert parse_stream(" topic = in , target = 2m ") == StreamDeclaration("in", 120.0, 0, 1.0)
    assert parse_stream("topic=in,target_s=45,min_accuracy=0.25") == StreamDeclaration("in", 45.0, 0, 0.25)


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [("30", 30.0), ("30s", 30.0), ("500ms", 0.5), ("1.5m", 90.0), ("1h", 3600.0), (12, 12.0)],
)
def test_durations(raw, seconds):
    assert parse_duration(raw) == seconds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("topic=in", "target_s: missing"),
        ("target=30s", "topic: missing"),
        ("topic=in,target=soon", "target_s: expected a duration"),
        ("topic=in,target=30 days", "target_s: expected a duration"),
        ("topic=in,target=0s", "target_s: must be > 0"),
        ("topic=in,target=30s,min-accuracy=1.5", r"min_accuracy: must be in \(0, 1\]"),
        ("topic=in,target=30s,min-accuracy=0", r"min_accuracy: must be in \(0, 1\]"),
        ("topic=in,target=30s,min-accuracy=most", "min_accuracy: expected a number"),
        ("topic=in,target=30s,priority=high", "priority: expected an integer"),
        ("topic=in,target=30s,priority=1.5", "priority: expected an integer"),
        ("topic=in,target=30s,weight=2", "weight: unknown field"),
        ("topic=in,target=30s,target=40s", "target: given twice"),
        ("topic=in,target=30s,target_s=40", "target_s: given twice"),
        ("topic=in,30s", "expected name=value"),
        ("topic=,target=30s", "topic: must be a topic name"),
    ],
)
def test_a_bad_declaration_names_the_field(text, message):
    with pytest.raises(ValueError, match=message):
        parse_stream(text)


def test_repeated_flags_and_the_environment():
    s = settings(
        "--stream", "topic=a,target=30s,min-accuracy=0.5", "--stream", "topic=b,target=1m,priority=2"
    )
    assert s.streams() == (StreamDeclaration("a", 30.0, 0, 0.5), StreamDeclaration("b", 60.0, 2, 1.0))
    env = {
        "BALLAST_SHEDDER_STREAM": "topic=a,target=30s;topic=b,target=10s",
        "BALLAST_SHEDDER_HEADROOM": "0.1",
    }
    s = settings(env=env)
    assert [d.topic for d in s.streams()] == ["a", "b"] and s.headroom == 0.1
    # flags and their values give the same settings back
    again = settings(*s.to_argv())
    assert again == s and again.streams() == s.streams()


def test_a_bad_flag_declaration_is_a_settings_error_naming_it():
    with pytest.raises(SettingsError, match=r"--stream 'topic=a,target=30s,min-accuracy=2': min_accuracy"):
        settings("--stream", "topic=a,target=30s,min-accuracy=2").streams()
    with pytest.raises(SettingsError, match="topic 'a' is already declared"):
        settings("--stream", "topic=a,target=30s", "--stream", "topic=a,target=40s").streams()


TOML = """
[[stream]]
topic = "clicks"
target = "30s"
priority = 1
min_accuracy = 0.5

[[stream]]
topic = "logs"
target_s = 120
"""


def test_a_toml_and_a_json_file_declare_the_same_streams(tmp_path):
    toml_file = tmp_path / "shedder.toml"
    toml_file.write_text(TOML)
    json_file = tmp_path / "shedder.json"
    json_file.write_text(json.dumps({"stream": [
        {"topic": "clicks", "target": "30s", "priority": 1, "min-accuracy": 0.5},
        {"topic": "logs", "target_s": 120},
    ]}))
    expected = (StreamDeclaration("clicks", 30.0, 1, 0.5), StreamDeclaration("logs", 120.0, 0, 1.0))
    assert load_streams_file(toml_file) == expected == load_streams_file(json_file)
    # the file and the flags together; a topic in both is an error
    s = settings("--streams-file", str(toml_file), "--stream", "topic=alerts,target=5s")
    assert [d.topic for d in s.streams()] == ["clicks", "logs", "alerts"]
    with pytest.raises(SettingsError, match="topic 'logs' is already declared"):
        settings("--streams-file", str(toml_file), "--stream", "topic=logs,target=5s").streams()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[stream]]\ntopic = "x"\ntarget = "3s"\nmin_accuracy = 7\n', r"stream 1 \(x\): min_accuracy: must"),
        ('[[stream]]\ntopic = "x"\n', r"stream 1 \(x\): target_s: missing"),
        ('[[stream]]\ntopic = "x"\ntarget = 1\n[[stream]]\ntarget = true\n', "stream 2: target_s: expected"),
        ('[[stream]]\ntopic = "x"\ntarget = "1s"\nlatency = 3\n', "latency: unknown field"),
        ("stream = 3\n", "'stream' must be a list"),
        ("[policy]\nheadroom = 0.1\n", "expected only a 'stream' list"),
        ("[[stream]\n", "not valid TOML"),
    ],
)
def test_a_bad_file_names_the_file_the_stream_and_the_field(tmp_path, text, message):
    path = tmp_path / "shedder.toml"
    path.write_text(text)
    with pytest.raises(SettingsError, match=message) as err:
        load_streams_file(path)
    assert str(path) in str(err.value)


def test_a_missing_file_is_a_settings_error(tmp_path):
    with pytest.raises(SettingsError, match="cannot read"):
        settings("--streams-file", str(tmp_path / "absent.toml")).streams()


def test_the_knobs_are_checked():
    assert settings().cycle_s == 5.0 and settings().step_factor == 2.0
    with pytest.raises(SettingsError, match="lift_margin must be < 1"):
        settings("--lift-margin", "1")
    with pytest.raises(SettingsError, match="--rising-cycles: must be >= 1"):
        settings("--rising-cycles", "0")
    with pytest.raises(SettingsError, match="never moves"):
        settings("--step-factor", "1", "--step-abs", "0")
    with pytest.raises(SettingsError, match="BALLAST_SHEDDER_HEADROOM"):
        settings(env={"BALLAST_SHEDDER_HEADROOM": "lots"})
