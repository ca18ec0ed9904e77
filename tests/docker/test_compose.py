"""deploy/docker-compose.yml runs Ballast's whole pipeline from the image deploy/Dockerfile builds.

No Docker engine answers on this machine or on CI, so what a running stack would show is checked
statically, against the code the containers would run: each service's command is a real ``ballast``
command, each ``BALLAST_*`` variable is a setting that command reads (a misspelt one is silently
ignored by a container), each published port is the port its setting serves, every service agrees
on the topic layout, and the image's entry point is ``ballast`` with the pinned requirements. The
stack itself is brought up only where an engine answers (``test_compose_stack_serves_ballast``).

The compose file is read with PyYAML's BaseLoader: every scalar as the string it is written as
(``KAFKA_NODE_ID: 1`` gives ``"1"``), as Compose passes environment values, so the checks compare text.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import sys
from typing import Any

import pytest
import yaml

from ballast.cli.connection import ConnectionSettings
from ballast.deployment.cli import TopicsSettings
from ballast.kafka.topics import LayoutSettings, TopicLayout
from ballast.paths import DEPLOY_DIR, JARS_DIR, PROJECT_ROOT
from ballast.settings import Settings
from services.controller.config import ControllerSettings
from services.router.config import RouterSettings
from services.shedder.config import PolicySettings, ShedderSettings
from spark_jobs.reduce.config import ReduceSettings

COMPOSE = DEPLOY_DIR / "docker-compose.yml"
DOCKERFILE = DEPLOY_DIR / "Dockerfile"
DOCKERIGNORE = PROJECT_ROOT / ".dockerignore"
IMAGE = "ballast:local"
INTERNAL_BOOTSTRAP = "kafka:29092"

# The settings groups each command reads with ``from_args``: every field of each is read from its
# environment variable, including fields the command leaves out of its flags (the controller reads
# LayoutSettings whole, with only --prefix as a flag), so ``--help`` alone would miss some.
# test_settings_map_matches_the_commands checks this map against each command's --help.
COMMAND_SETTINGS: dict[tuple[str, ...], tuple[type[Settings], ...]] = {
    ("topics", "create"): (ConnectionSettings, LayoutSettings, TopicsSettings),
    ("router", "run"): (ConnectionSettings, LayoutSettings, RouterSettings),
    ("controller", "run"): (ConnectionSettings, LayoutSettings, ControllerSettings),
    ("reduce", "run"): (ConnectionSettings, LayoutSettings, ReduceSettings),
    ("shedder", "run"): (ConnectionSettings, LayoutSettings, PolicySettings, ShedderSettings),
}
# the pipeline the file must run: command -> how many services run it
PIPELINE = {("topics", "create"): 1, ("router", "run"): 2, ("controller", "run"): 1,
            ("reduce", "run"): 1, ("shedder", "run"): 1}  # fmt: skip
LAYOUT_ENV = {name: LayoutSettings.env_name(name) for name in ("prefix", "workers", "input_partitions")}


def _engine_answers() -> bool:
    if not shutil.which("docker"):
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=15).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@functools.cache
def compose() -> dict[str, Any]:
    return yaml.load(COMPOSE.read_text(), Loader=yaml.BaseLoader)


def ballast_services() -> dict[str, dict[str, Any]]:
    """The services that run the Ballast image (the others are Kafka's)."""
    return {name: s for name, s in compose()["services"].items() if s.get("image") == IMAGE}


def command_words(service: dict[str, Any]) -> tuple[str, ...]:
    """The sub-command a service runs: its command's words before the first flag."""
    words = []
    for word in service.get("command") or []:
        if word.startswith("-"):
            break
        words.append(word)
    return tuple(words)


def environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    assert isinstance(env, dict), f"environment as a mapping, got {env!r}"
    return {k: "" if v is None else v for k, v in env.items()}


@functools.cache
def ballast_help(words: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    """``ballast <words> --help`` as this checkout's code prints it (wide: no env name is wrapped)."""
    path = os.pathsep.join(p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "COLUMNS": "1000", "PYTHONPATH": path}
    argv = [sys.executable, "-m", "ballast.cli", *words, "--help"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=PROJECT_ROOT, env=env)


def help_env_names(words: tuple[str, ...]) -> set[str]:
    return set(re.findall(r"env (BALLAST_[A-Z0-9_]+)\)", ballast_help(words).stdout))


def env_names(*groups: type[Settings]) -> set[str]:
    return {name for group in groups for name in group.env_names()}


def published(service: dict[str, Any]) -> list[tuple[str, int, int]]:
    """``(host address, host port, container port)`` of each published port (short syntax)."""
    ports = []
    for entry in service.get("ports") or []:
        parts = str(entry).split(":")
        assert len(parts) == 3, f"port {entry!r}: publish as HOST_IP:HOST_PORT:CONTAINER_PORT"
        ports.append((parts[0], int(parts[1]), int(parts[2])))
    return ports


# --- Kafka and Connect ---------------------------------------------------------------------------


def test_compose_file_declares_a_kraft_broker_and_connect():
    kafka = compose()["services"]["kafka"]
    env = environment(kafka)
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller", "KRaft combined mode, no ZooKeeper"
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false", "Ballast creates its topics (topics create)"
    assert "connect" in compose()["services"]
    assert "zookeeper" not in COMPOSE.read_text().lower()


def listeners(value: str) -> dict[str, str]:
    """``INTERNAL://kafka:29092,EXTERNAL://…`` as ``{name: host:port}``."""
    return dict(item.split("://", 1) for item in value.split(","))


def test_kafka_and_connect_publish_the_ports_they_serve():
    services = compose()["services"]
    env = environment(services["kafka"])
    advertised, bound = listeners(env["KAFKA_ADVERTISED_LISTENERS"]), listeners(env["KAFKA_LISTENERS"])
    assert published(services["kafka"]) == [("127.0.0.1", 9092, 9092)]
    assert advertised["EXTERNAL"] == "127.0.0.1:9092", (
        f"clients on the host are sent to the advertised EXTERNAL listener {advertised['EXTERNAL']}, "
        "which must be the published 127.0.0.1:9092"
    )
    assert bound["EXTERNAL"].endswith(":9092"), f"EXTERNAL listens on {bound['EXTERNAL']}, published is 9092"
    assert advertised["INTERNAL"] == INTERNAL_BOOTSTRAP, (
        f"services use bootstrap {INTERNAL_BOOTSTRAP}, "
        f"the broker advertises INTERNAL {advertised['INTERNAL']}"
    )
    props = dict(
        line.split("=", 1)
        for line in (DEPLOY_DIR / "docker" / "connect-distributed.properties").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    rest_port = int(props["listeners"].rsplit(":", 1)[1])
    assert published(services["connect"]) == [("127.0.0.1", 8083, rest_port)], (
        f"Connect's REST API listens on {props['listeners']}; published: {services['connect'].get('ports')}"
    )
    assert props["bootstrap.servers"] == INTERNAL_BOOTSTRAP


# --- the Ballast services ------------------------------------------------------------------------


def test_the_pipeline_runs_from_one_image_built_by_the_dockerfile():
    services = ballast_services()
    counts: dict[tuple[str, ...], int] = {}
    for name, service in services.items():
        counts[command_words(service)] = counts.get(command_words(service), 0) + 1
        build = service.get("build") or {}
        context = (COMPOSE.parent / build.get("context", "")).resolve()
        assert context == PROJECT_ROOT, f"{name}: build context {context}, expected the repository root"
        assert (context / build.get("dockerfile", "")).resolve() == DOCKERFILE, (
            f"{name}: builds {build.get('dockerfile')!r}, expected deploy/Dockerfile"
        )
    assert counts == PIPELINE, f"services of image {IMAGE} by command: {counts}, expected {PIPELINE}"


def test_every_service_command_is_a_ballast_command():
    for name, service in ballast_services().items():
        done = ballast_help(tuple(service["command"]))
        assert done.returncode == 0, (
            f"{name}: `ballast {' '.join(service['command'])} --help` exited {done.returncode}: "
            f"{done.stderr.strip()[-500:]}"
        )


def test_settings_map_matches_the_commands():
    """COMMAND_SETTINGS is exact: every env var a command's --help lists belongs to one of its
    groups, and every group it names is one the command registers (lists a variable of)."""
    for words, groups in COMMAND_SETTINGS.items():
        listed = help_env_names(words)
        assert listed, f"`ballast {' '.join(words)} --help` lists no environment variable"
        unmapped = listed - env_names(*groups)
        assert not unmapped, f"`ballast {' '.join(words)}` reads {sorted(unmapped)}: add their group here"
        for group in groups:
            assert env_names(group) & listed, f"`ballast {' '.join(words)}` does not take {group.__name__}"


def test_every_environment_variable_is_a_setting_of_its_command():
    for name, service in ballast_services().items():
        words = command_words(service)
        assert words in COMMAND_SETTINGS, f"{name}: no settings known for `ballast {' '.join(words)}`"
        unknown = {k for k in environment(service) if k.startswith("BALLAST_")} - env_names(
            *COMMAND_SETTINGS[words]
        )
        assert not unknown, (
            f"{name}: `ballast {' '.join(words)}` reads no {sorted(unknown)} (ignored in the container)"
        )
        bootstrap = environment(service).get(ConnectionSettings.env_name("bootstrap"))
        assert bootstrap == INTERNAL_BOOTSTRAP, (
            f"{name}: bootstrap {bootstrap!r}, the broker's internal listener is {INTERNAL_BOOTSTRAP} "
            "(unset: 127.0.0.1:9092, the container's own loopback)"
        )


def test_published_metrics_ports_are_the_services_metrics_ports():
    for name, service in ballast_services().items():
        env = environment(service)
        ports = published(service)
        port_vars = [k for k in env if k.endswith("_METRICS_PORT")]
        served = {int(env[k]) for k in port_vars if env[k] != "0"}
        assert {container for _, _, container in ports} == served, (
            f"{name}: publishes container ports {sorted(c for _, _, c in ports)}, "
            f"its metrics port ({', '.join(port_vars) or 'none set'}) is {sorted(served)}"
        )
        for host_ip, host_port, container in ports:
            assert host_ip == "127.0.0.1", f"{name}: port {container} published on {host_ip}, not loopback"
            assert host_port == container, f"{name}: host port {host_port} for metrics port {container}"
        host_vars = [k.replace("_PORT", "_HOST") for k in port_vars]
        words = command_words(service)
        for var in host_vars:
            if served and var in env_names(*COMMAND_SETTINGS.get(words, ())):
                assert env.get(var) == "0.0.0.0", (
                    f"{name}: {var} is {env.get(var, 'unset (loopback)')}: a published port reaches "
                    "only an endpoint bound to the container's addresses"
                )
    every = [(name, p[1]) for name, s in compose()["services"].items() for p in published(s)]
    host_ports = [port for _, port in every]
    assert len(host_ports) == len(set(host_ports)), f"a host port published twice: {every}"


def test_services_agree_on_the_topic_layout():
    services = ballast_services()
    values: dict[str, dict[str, str]] = {}
    for name, service in services.items():
        env = environment(service)
        offered = help_env_names(command_words(service))
        for setting, var in LAYOUT_ENV.items():
            if var in offered:
                assert var in env, f"{name}: {var} unset, so it would use the default layout's {setting}"
            if var in env:
                values.setdefault(var, {})[name] = env[var]
    for var, by_service in values.items():
        assert len(set(by_service.values())) == 1, f"services disagree on {var}: {by_service}"
    layout = TopicLayout(
        prefix=next(iter(values[LAYOUT_ENV["prefix"]].values())),
        workers=int(next(iter(values[LAYOUT_ENV["workers"]].values()))),
        input_partitions=int(next(iter(values[LAYOUT_ENV["input_partitions"]].values()))),
    )
    stream_var = PolicySettings.env_name("stream")
    for name, service in services.items():
        if command_words(service) != ("shedder", "run"):
            continue
        command = service["command"]
        declared = [command[i + 1] for i, word in enumerate(command[:-1]) if word == "--stream"]
        declared += [d for d in environment(service).get(stream_var, "").split(";") if d.strip()]
        assert declared, f"{name}: no stream declared (--stream or {stream_var})"
        for declaration in declared:
            fields = dict(item.split("=", 1) for item in declaration.split(","))
            assert fields.get("topic") == layout.name("input"), (
                f"{name}: sheds topic {fields.get('topic')!r}, the layout's input topic is "
                f"{layout.name('input')!r}"
            )


def _prefix(env: dict[str, str]) -> str:
    return env.get(LAYOUT_ENV["prefix"], LayoutSettings().prefix)


def test_shedder_watches_the_routers_group_and_routers_have_their_own_ids():
    """As each command resolves them: an unset group is the prefix's (ballast.kafka.identities)."""
    services = ballast_services()
    group_var, id_var = RouterSettings.env_name("group_id"), RouterSettings.env_name("router_id")
    routers = {n: environment(s) for n, s in services.items() if command_words(s) == ("router", "run")}
    groups = {
        RouterSettings(router_id="r", group_id=env.get(group_var, "")).resolved(_prefix(env)).group_id
        for env in routers.values()
    }
    assert len(groups) == 1, f"the routers are in different groups: {groups}"
    ids = [env.get(id_var, "") for env in routers.values()]
    assert all(ids) and len(set(ids)) == len(ids), (
        f"router ids {ids}: each needs its own stable one (its transactional.id fences a namesake)"
    )
    watched_var = ShedderSettings.env_name("router_group")
    for name, service in services.items():
        if command_words(service) == ("shedder", "run"):
            env = environment(service)
            shedder = ShedderSettings(router_group=env.get(watched_var, "")).resolved(_prefix(env))
            watched = shedder.router_group
            assert {watched} == groups, f"{name}: watches group {watched!r}, the routers are in {groups}"


def test_services_start_after_the_topics_and_restart():
    services = compose()["services"]
    assert services["topics"]["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert "healthcheck" in services["kafka"]
    for name, service in ballast_services().items():
        if command_words(service) == ("topics", "create"):
            assert service.get("restart", "no") == "no", f"{name}: a one-shot service restarted"
            continue
        after = (service.get("depends_on") or {}).get("topics") or {}
        assert after.get("condition") == "service_completed_successfully", (
            f"{name}: starts before the topics and genesis exist (depends_on topics: {after})"
        )
        assert service.get("restart") in ("unless-stopped", "always", "on-failure"), (
            f"{name}: long-running without a restart policy ({service.get('restart')!r})"
        )


# --- the image -----------------------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)``, continuation lines joined, comments dropped."""
    kept = [line for line in DOCKERFILE.read_text().splitlines() if not line.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(kept))
    split = (line.split(None, 1) for line in joined.splitlines() if line.strip())
    return [(parts[0].upper(), parts[1] if len(parts) > 1 else "") for parts in split]


def test_dockerfile_runs_ballast_with_the_pinned_requirements():
    instructions = dockerfile_instructions()
    entrypoints = [args for op, args in instructions if op == "ENTRYPOINT"]
    assert entrypoints and json.loads(entrypoints[-1]) == ["ballast"], f"ENTRYPOINT is {entrypoints}"
    runs = " ".join(args for op, args in instructions if op == "RUN")
    copies = [args for op, args in instructions if op == "COPY"]
    assert any("requirements.txt" in c for c in copies), "requirements.txt is not copied into the image"
    assert re.search(r"pip install (\S+ )*-r requirements\.txt", runs), "requirements.txt is not installed"
    assert "requirements-dev" not in runs, "the image installs the test and lint tools"
    assert "openjdk-17-jre-headless" in runs, "no JRE 17 for pyspark"
    assert re.search(r"pip install .*-e \.", runs), (
        "the project is not installed editable: ballast.paths finds the jars in the tree's .cache/jars"
    )
    pom = "deploy/maven/spark/pom.xml"
    assert any(pom in c for c in copies) and (PROJECT_ROOT / pom).is_file(), f"Spark's jars not from {pom}"
    jars = (JARS_DIR / "spark").relative_to(PROJECT_ROOT).as_posix()
    assert any(c.startswith("--from=") and c.split()[-1].rstrip("/") == jars for c in copies), (
        f"the connector jars are not copied to {jars}, where ballast.paths.spark_jars looks"
    )
    bases = [args for op, args in instructions if op == "FROM"]
    assert bases[-1].startswith("python:3.11"), f"the image is based on {bases[-1]}, not Python 3.11"


def test_dockerignore_keeps_local_state_out_of_the_build():
    ignored = {line.strip().rstrip("/") for line in DOCKERIGNORE.read_text().splitlines()}
    for path in (".venv", ".cache", "state", ".git"):
        assert path in ignored, f".dockerignore does not exclude {path}"


# --- with an engine ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def docker_compose_file():
    return str(COMPOSE)


@pytest.mark.skipif(not _engine_answers(), reason="no Docker engine answers here (docker info failed)")
def test_compose_stack_serves_ballast(docker_services):  # pragma: no cover - needs an engine
    from confluent_kafka.admin import AdminClient

    def ready() -> bool:
        try:
            return (
                len(AdminClient({"bootstrap.servers": "127.0.0.1:9092"}).list_topics(timeout=3).brokers) == 1
            )
        except Exception:
            return False

    docker_services.wait_until_responsive(timeout=180, pause=2, check=ready)
    env = environment(compose()["services"]["topics"])
    layout = TopicLayout(
        prefix=env[LAYOUT_ENV["prefix"]],
        workers=int(env[LAYOUT_ENV["workers"]]),
        input_partitions=int(env[LAYOUT_ENV["input_partitions"]]),
    )
    wanted = {spec.name for spec in layout.specs().values()}

    def created() -> bool:  # by the topics service, which the other services wait for
        topics = AdminClient({"bootstrap.servers": "127.0.0.1:9092"}).list_topics(timeout=3).topics
        return wanted <= set(topics)

    docker_services.wait_until_responsive(timeout=300, pause=2, check=created)


def test_the_runtime_requirements_hold_no_test_or_lint_tool():
    """The image installs requirements.txt alone: a test tool there would ship in every container."""
    pinned = {
        line.split("==")[0].strip().lower()
        for line in (PROJECT_ROOT / "requirements.txt").read_text().splitlines()
        if "==" in line and not line.lstrip().startswith("#")
    }
    tools = {"pytest", "pytest-timeout", "pytest-docker", "hypothesis", "selenium", "ruff", "pyyaml"}
    assert pinned and not pinned & tools, f"test tools among the runtime requirements: {pinned & tools}"
    dev = (PROJECT_ROOT / "requirements-dev.txt").read_text().splitlines()
    assert "-r requirements.txt" in dev, "requirements-dev.txt must build on the runtime pins"
    assert "requirements-dev.txt" in (PROJECT_ROOT / "deploy" / "setup.sh").read_text(), "make setup skips it"
