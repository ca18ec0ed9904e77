"""Ballast as a package: a wheel built from this checkout, installed in fresh virtualenvs outside it,
runs as a user's ``pip install 'ballast[all]'`` would (issue 29, acceptance 2).

- the wheel holds the packages ``ballast``, ``services`` and ``spark_jobs`` with their package data
  (the schemas, the local stack's config templates) and nothing else of the checkout;
- with ``[all]``: ``ballast --version``, every registered command's ``-h`` (and every action's
  below it), one router against the session's broker routing a few hundred records exactly where
  Kafka's own partitioner puts their keys, and a local stack started from the package's templates
  with the checkout's jars (``--jars-dir``), after the one-line error without them;
- with no extra: the commands that need one say which, in one line, and the others work.

Every ``ballast`` here runs from a folder outside the checkout, with no PYTHONPATH and no BALLAST_*
setting of the caller, so nothing of the checkout can leak in; the test checks where the code came
from. The wheel is built with the checkout's own pip and setuptools (``pip wheel --no-deps
--no-build-isolation``: no build tool to download), from a copy of the checkout's files (what git
tracks or would, so a stale ``build/`` cannot add to it). Installs use ``-c requirements.txt``: the
lock's versions, which pip's wheel cache already holds for the largest (pyspark, built once from its
sdist by ``make setup``); the others are downloaded unless ``PIP_FIND_LINKS`` holds them (set
``PIP_NO_INDEX=1`` too, offline). Both virtualenvs are deleted at the end (``[all]`` is ~1 GB).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ballast.cli.connection import ConnectionSettings
from ballast.kafka.configuration import KafkaConfig
from tests.support import frontier

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("ballast", "services", "spark_jobs")
VERSION = re.search(r'__version__ = "([^"]+)"', (ROOT / "ballast" / "__init__.py").read_text()).group(1)
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
DECLARED = list(PROJECT["entry-points"]["ballast.commands"])


def checkout_files() -> list[Path]:
    """The checkout's files as a clone of it with this work in it has them: tracked, or untracked
    and not ignored."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True, timeout=60,
    ).stdout.decode()  # fmt: skip
    return [Path(p) for p in listed.split("\0") if p and (ROOT / p).is_file()]


@pytest.fixture(scope="module")
def outside() -> Iterator[Path]:
    """A temporary folder outside the checkout, removed at the end."""
    folder = Path(tempfile.mkdtemp(prefix="ballast-package-"))
    assert not folder.resolve().is_relative_to(ROOT)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def wheel(outside: Path) -> Path:
    source = outside / "source"
    for rel in checkout_files():
        (source / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, source / rel)
    out = outside / "dist"
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", out]
    build.append(source)
    done = subprocess.run(build, capture_output=True, text=True, timeout=600, cwd=outside)
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = out.glob("*.whl")
    assert built.name == f"ballast-{VERSION}-py3-none-any.whl"
    return built


def test_the_wheel_holds_the_three_packages_and_their_data_and_nothing_else(wheel: Path):
    names = set(zipfile.ZipFile(wheel).namelist())
    metadata = {n for n in names if n.startswith(f"ballast-{VERSION}.dist-info/")}
    files = [f for f in checkout_files() if f.parts[0] in PACKAGES]
    code = {f.as_posix() for f in files if f.suffix == ".py"}
    data = {
        f.as_posix()
        for f in files
        if f.is_relative_to("ballast/schemas") or f.is_relative_to("ballast/devstack/conf")
    }
    assert len(data) > 20 and "ballast/schemas/routed_envelope.avsc" in data
    assert "ballast/devstack/conf/kafka/server.properties.tmpl" in data
    assert "ballast/schemas/previous/metrics.v1.avsc" in data
    assert names - metadata == code | data, {
        "missing": sorted((code | data) - names)[:10],
        "extra": sorted(names - metadata - code - data)[:10],
    }
    assert {n.split("/")[0] for n in names} == {*PACKAGES, f"ballast-{VERSION}.dist-info"}
    for other in ("tests", "bench", "deploy", "docs", "schemas"):
        assert not any(n.startswith(f"{other}/") for n in names), other


# --- installed --------------------------------------------------------------------------------


@dataclass
class Venv:
    folder: Path
    work: Path  # the working directory of every command: outside the checkout
    env: dict[str, str]

    @property
    def python(self) -> Path:
        return self.folder / "bin" / "python"

    def ballast(
        self, *args: str, timeout: float = 120, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.folder / "bin" / "ballast"), *args],
            capture_output=True, text=True, timeout=timeout, cwd=self.work, env={**self.env, **(env or {})},
        )  # fmt: skip


def make_venv(outside: Path, name: str, requirement: str) -> Venv:
    folder = outside / name
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", folder], check=True, timeout=300)
    # the checkout's pip (pinned by make setup) installs into it: no pip of the venv's own to set up
    install = [
        sys.executable, "-m", "pip", "--python", folder / "bin" / "python", "install", "-q",
        requirement, "-c", ROOT / "requirements.txt",
    ]  # fmt: skip
    done = subprocess.run(install, capture_output=True, text=True, timeout=1800, cwd=outside)
    assert done.returncode == 0, done.stdout + done.stderr
    work = outside / f"{name}-work"
    for sub in ("cache", "state"):
        (work / sub).mkdir(parents=True)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("BALLAST_") and k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
    }
    env.update(
        PATH=f"{folder / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        XDG_CACHE_HOME=str(work / "cache"),  # an installed ballast's jar and state folders: here,
        XDG_STATE_HOME=str(work / "state"),  # never the home folder of whoever runs the tests
        COLUMNS="400",
    )
    return Venv(folder, work, env)


@pytest.fixture(scope="module")
def full(outside: Path, wheel: Path) -> Venv:
    return make_venv(outside, "all", f"{wheel}[all]")


@pytest.fixture(scope="module")
def bare(outside: Path, wheel: Path) -> Venv:
    return make_venv(outside, "bare", str(wheel))


def test_installed_code_comes_from_the_venv_not_the_checkout(full: Venv):
    probe = (
        "import json, ballast, services, spark_jobs, ballast.paths as p\n"
        "print(json.dumps({'files': [m.__file__ for m in (ballast, services, spark_jobs)],"
        " 'checkout': str(p.CHECKOUT), 'schemas': str(p.SCHEMAS_DIR), 'state': str(p.DEFAULT_STATE_DIR)}))"
    )
    done = subprocess.run(
        [full.python, "-c", probe], capture_output=True, text=True, cwd=full.work, env=full.env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    where = json.loads(done.stdout)
    site = full.folder.resolve()
    for file in where["files"]:
        assert Path(file).resolve().is_relative_to(site), file
    assert where["checkout"] == "None"
    assert Path(where["schemas"]).is_relative_to(site) and (Path(where["schemas"]) / "metrics.avsc").is_file()
    assert where["state"] == str(full.work / "state" / "ballast" / "stack")


def test_version_and_every_commands_help(full: Venv):
    version = full.ballast("--version")
    assert (version.returncode, version.stdout.strip()) == (0, f"ballast {VERSION}"), version.stderr

    # the commands the installed distribution registers, as ballast finds them
    listed = subprocess.run(
        [full.python, "-c", "from importlib.metadata import entry_points as e; "
         "print('\\n'.join(sorted(x.name for x in e(group='ballast.commands'))))"],
        capture_output=True, text=True, cwd=full.work, env=full.env, timeout=60,
    )  # fmt: skip
    registered = listed.stdout.split()
    assert sorted(registered) == sorted(DECLARED)
    top = full.ballast("-h")
    assert top.returncode == 0 and "unavailable" not in top.stdout, top.stdout + top.stderr
    for command in registered:
        shown = full.ballast(command, "-h")
        assert shown.returncode == 0, f"ballast {command} -h: {shown.stderr}"
        assert shown.stdout.startswith(f"usage: ballast {command}") and "unavailable" not in shown.stdout

    # and every action below them (`ballast reduce run -h`, ...), walked in one process
    walk = """
import argparse, contextlib, io, sys
from ballast.cli.main import build_parser

def actions(parser, path):
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                yield [*path, name]
                yield from actions(sub, [*path, name])

failed = []
paths = list(actions(build_parser(), []))
for path in paths:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        build_parser().parse_args([*path, "-h"])
    if not out.getvalue().startswith("usage: ballast " + " ".join(path)):
        failed.append(" ".join(path))
print(len(paths), failed)
"""
    done = subprocess.run(
        [full.python, "-c", walk], capture_output=True, text=True, cwd=full.work, env=full.env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    count, failed = done.stdout.split(" ", 1)
    assert int(count) > 2 * len(registered) and failed.strip() == "[]", done.stdout


def test_without_extras_the_commands_that_need_one_say_which(bare: Venv, kafka_config: KafkaConfig):
    top = bare.ballast("-h")
    assert top.returncode == 0, top.stderr
    assert "(unavailable: needs pandas, which is not installed: pip install 'ballast[spark]')" in top.stdout
    for command in DECLARED:
        shown = bare.ballast(command, "-h")
        assert shown.returncode == 0 and shown.stdout.startswith(f"usage: ballast {command}"), shown.stderr
    reduce = bare.ballast("reduce", "run", "--bootstrap", "127.0.0.1:1")
    assert (reduce.returncode, reduce.stderr.splitlines()) == (
        1,
        ["error: `ballast reduce` is unavailable: needs pandas, which is not installed: "
         "pip install 'ballast[spark]'"],
    )  # fmt: skip
    # the shedder's flags need nothing, its run needs faust (imported once a broker answered)
    flags, secrets = connection_args(kafka_config, bare.work / "state" / "unused")
    shedder = bare.ballast("shedder", "run", "--stream", "topic=t,target=30s", *flags, env=secrets)
    assert (shedder.returncode, shedder.stderr.splitlines()) == (
        1,
        ["error: `ballast shedder` needs faust, which is not installed: pip install 'ballast[shedder]'"],
    )


# --- against a broker ---------------------------------------------------------------------------

WORKERS, INPUT_PARTITIONS, RECORDS = 4, 2, 400
EPOCH = datetime.fromtimestamp(0, UTC)


def connection_args(kafka_config: KafkaConfig, state_dir: Path) -> tuple[list[str], dict[str, str]]:
    """The session broker's connection as a user passes it: flags, and passwords by environment."""
    settings = ConnectionSettings.of(kafka_config, state_dir)
    return settings.to_argv(), settings.secret_env()


def kafka_partitions(kafka_config: KafkaConfig, topic: str, keys: list[str]) -> dict[str, int]:
    """Where librdkafka's Java-compatible murmur2 partitioner puts each key in ``topic`` (a plain
    Kafka producer's placement: what Ballast's hash must equal at epoch 0, found by another code)."""
    from confluent_kafka import Producer

    placed: dict[str, int] = {}

    def delivered(err, msg) -> None:
        assert err is None, err
        placed[msg.key().decode()] = msg.partition()

    producer = Producer({**kafka_config.producer(), "partitioner": "murmur2"})
    for key in keys:
        producer.produce(topic, key=key.encode(), value=b"", on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(60) == 0
    return placed


def test_an_installed_router_routes_records_where_kafka_would(
    full: Venv, kafka_config: KafkaConfig, topic_factory, unique
):
    from ballast.avro.codec import AvroCodec
    from ballast.kafka.clients import make_producer, produce_all
    from ballast.kafka.reading import read_topic

    prefix = unique("pkg")
    flags, secrets = connection_args(kafka_config, full.work / "state" / "unused")
    layout = ["--prefix", prefix, "--workers", str(WORKERS), "--input-partitions", str(INPUT_PARTITIONS)]
    created = full.ballast("topics", "create", *layout, *flags, env=secrets)
    assert created.returncode == 0, created.stdout + created.stderr
    assert f"created  {prefix}.routed" in created.stdout

    codec = AvroCodec("io.ballast.InputEvent")
    events = [
        {"key": f"key-{i % 37}", "value": float(i), "payload": i.to_bytes(8, "big"), "event_time": 1_000 * i}
        for i in range(RECORDS)
    ]
    produced = produce_all(
        make_producer(kafka_config), f"{prefix}.input", ((e["key"].encode(), codec.encode(e)) for e in events)
    )
    assert produced == RECORDS

    log = full.work / "router.log"
    with open(log, "wb") as out:
        router = subprocess.Popen(
            [str(full.folder / "bin" / "ballast"), "router", "run", "--router-id", "r1", *layout, *flags,
             "--commit-interval-ms", "200", "--log-level", "warning"],
            stdout=subprocess.PIPE, stderr=out, cwd=full.work, env={**full.env, **secrets},
        )  # fmt: skip
    try:
        messages = read_topic(kafka_config, f"{prefix}.routed", min_records=RECORDS, idle=3.0, timeout=180)
    finally:
        router.send_signal(signal.SIGTERM)
        try:
            stdout, _ = router.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            router.kill()
            stdout, _ = router.communicate()
    errors = log.read_text()
    assert router.returncode == 0, errors
    assert "Traceback" not in errors, errors
    assert json.loads(stdout.decode().strip().splitlines()[-1])["router_id"] == "r1"

    # judged from the topic alone: decoded with fastavro from the schema file, placed by librdkafka
    data = []
    for m in messages:
        kind, body = frontier.decode(m.value())
        if kind == "data":
            data.append((m.partition(), body))
    expected_at = kafka_partitions(
        kafka_config, topic_factory("pkg-placement", partitions=WORKERS), sorted({e["key"] for e in events})
    )
    seqs = sorted(int.from_bytes(body["payload"][:8], "big") for _, body in data)
    assert seqs == list(range(RECORDS)), "records lost or doubled"
    for partition, body in data:
        event = events[int.from_bytes(body["payload"][:8], "big")]
        when = EPOCH + timedelta(milliseconds=event["event_time"])  # fastavro reads timestamp-millis so
        assert (body["key"], body["value"], body["payload"], body["event_time"]) == (
            event["key"], event["value"], event["payload"], when
        )  # fmt: skip
        assert (body["router_id"], body["epoch"], body["source_topic"]) == ("r1", 0, f"{prefix}.input")
        assert partition == expected_at[event["key"]], f"{event['key']} in {partition}"
    assert len({p for p, _ in data}) > 1  # the keys spread over the workers: placement was judged


def test_an_installed_stack_needs_the_jars_and_starts_from_the_packaged_templates(full: Venv):
    from ballast.devstack.processes import pid_alive
    from ballast.paths import JARS_DIR  # the checkout's, resolved by make setup

    missing = full.ballast("stack", "up", "--brokers", "1")
    folder = full.work / "cache" / "ballast" / "jars" / "kafka"
    assert missing.returncode == 1
    assert missing.stderr.splitlines()[-1] == (
        f"error: no Kafka broker and Connect jars (the local stack) in {folder}: an installed ballast "
        "carries no jars; run `make setup` in a checkout of Ballast (Maven resolves them into its "
        ".cache/jars) and point --jars-dir or BALLAST_JARS_DIR there"
    )
    state = full.work / "stack"
    up = full.ballast("--jars-dir", str(JARS_DIR), "stack", "up", "--state-dir", str(state), timeout=300)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        status = full.ballast("stack", "status", "--json", "--state-dir", str(state))
        node = json.loads(status.stdout)["nodes"][0]
        assert node["running"], status.stdout
        # the broker runs on the venv's log4j2 config and a config rendered from the venv's template
        cmdline = Path(f"/proc/{node['pid']}/cmdline").read_bytes().decode().split("\0")
        log4j = next(a for a in cmdline if a.startswith("-Dlog4j2.configurationFile="))
        assert Path(log4j.split("=", 1)[1]).resolve().is_relative_to(full.folder.resolve()), log4j
        assert cmdline[cmdline.index("-cp") + 1] == str(JARS_DIR / "kafka" / "*")
        config = Path(cmdline[cmdline.index("kafka.Kafka") + 1]).read_text()
        assert config.startswith("# Ballast local broker (KRaft"), config[:200]
        assert "process.roles=broker,controller" in config
    finally:
        down = full.ballast("stack", "down", "--state-dir", str(state), timeout=180)
        assert down.returncode == 0, down.stdout + down.stderr
    assert not pid_alive(node["pid"], str(state))
