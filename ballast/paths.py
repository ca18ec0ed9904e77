"""Where Ballast finds its own files: what ships inside the package, and what only a checkout has.

Ballast runs two ways, and every location below says which it is meant for:

- **from a checkout** (``make setup`` installs it editable into ``.venv``): everything is there,
  ``deploy/`` (setup.sh, the Maven poms, the Dockerfile, sample data), the Maven-resolved jars in
  ``.cache/jars`` and the state folder ``state/stack``;
- **installed** (``pip install 'ballast[all]'``, a wheel): the packages ``ballast``, ``services``
  and ``spark_jobs`` only, with what a running ``ballast`` reads shipped as package data beside the
  code that reads it: the Avro schemas (``ballast/schemas/``) and the local stack's broker, Connect
  and log4j2 configuration templates (``ballast/devstack/conf/``).

What a wheel cannot carry is the Java side: the Kafka broker and Connect jars (``ballast stack
up``, ``ballast connect``) and Spark's Kafka and Avro connectors (``ballast reduce``) are resolved by
Maven from ``deploy/maven/*/pom.xml`` (``make setup``; about 65 MB), with a JDK and Maven to do it.
An installed ``ballast`` finds them through the one knob here, ``--jars-dir`` / ``BALLAST_JARS_DIR``
(:class:`JarSettings`), and says so in one line when they are missing. Everything else that runs
against your own Kafka (routers, controller, shedder, topics, status) needs no file of a checkout.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from ballast.settings import Settings, setting

PACKAGE_DIR = Path(__file__).resolve().parent
# the folder that holds the packages (ballast/, services/, spark_jobs/): the checkout, or
# site-packages of an installed copy; services and Spark's Python workers get it on PYTHONPATH
PROJECT_ROOT = PACKAGE_DIR.parent
# a source checkout (editable install), or None for an installed copy
CHECKOUT: Path | None = (
    PROJECT_ROOT
    if (PROJECT_ROOT / "pyproject.toml").is_file() and (PROJECT_ROOT / "deploy" / "setup.sh").is_file()
    else None
)

# package data: present wherever ballast is
SCHEMAS_DIR = PACKAGE_DIR / "schemas"
STACK_CONF_DIR = PACKAGE_DIR / "devstack" / "conf"

# a checkout's only (setup.sh, the Maven poms, Dockerfile and compose, sample data)
DEPLOY_DIR = PROJECT_ROOT / "deploy"


def _user_dir(variable: str, fallback: str) -> Path:
    """An XDG base folder (``$XDG_STATE_HOME``, ``$XDG_CACHE_HOME``) or its usual default."""
    return Path(os.environ.get(variable) or Path.home() / fallback) / "ballast"


if CHECKOUT is not None:
    CACHE_DIR = CHECKOUT / ".cache"
    DEFAULT_JARS_DIR = CACHE_DIR / "jars"
    DEFAULT_STATE_DIR = CHECKOUT / "state" / "stack"
else:  # never inside site-packages
    CACHE_DIR = _user_dir("XDG_CACHE_HOME", ".cache")
    DEFAULT_JARS_DIR = CACHE_DIR / "jars"
    DEFAULT_STATE_DIR = _user_dir("XDG_STATE_HOME", ".local/state") / "stack"
JARS_DIR = DEFAULT_JARS_DIR  # the checkout's jar cache (tests and the Dockerfile's layout)

JAR_GROUPS = {
    "kafka": "Kafka broker and Connect jars (the local stack)",
    "spark": "Spark's Kafka and Avro connector jars (the reduce)",
}


@dataclass(frozen=True)
class JarSettings(Settings):
    """Where the Maven-resolved jars are: a flag of ``ballast`` itself (``ballast --jars-dir D
    stack up``), which the command hands on to every process it starts through the environment."""

    jars_dir: Path = setting(
        DEFAULT_JARS_DIR,
        "folder of the Maven-resolved jars, kafka/ and spark/ (what `make setup` writes to .cache/jars)",
    )


class MissingJarsError(RuntimeError):
    """The Maven-resolved jars are not there: `make setup` has not run (or ran elsewhere)."""


def jar_dir(name: str, root: Path | None = None) -> Path:
    """``<jars dir>/<name>``, or a one-line :class:`MissingJarsError` saying how to get them."""
    root = JarSettings.from_args().jars_dir if root is None else root
    folder = root / name
    if folder.is_dir() and any(folder.glob("*.jar")):
        return folder
    what = JAR_GROUPS.get(name, f"{name} jars")
    if CHECKOUT is not None and root == DEFAULT_JARS_DIR:
        raise MissingJarsError(f"no {what} in {folder}: run `make setup` (Maven resolves them from deploy/)")
    raise MissingJarsError(
        f"no {what} in {folder}: an installed ballast carries no jars; run `make setup` in a checkout of "
        f"Ballast (Maven resolves them into its .cache/jars) and point --jars-dir or BALLAST_JARS_DIR there"
    )


def classpath(name: str, root: Path | None = None) -> str:
    """A JVM classpath with every jar of one cached group (wildcard form, as Kafka's scripts use)."""
    return str(jar_dir(name, root) / "*")


def spark_jars(root: Path | None = None) -> list[str]:
    """The connector jars Spark needs on top of pyspark's own (Kafka source/sink, Avro)."""
    return sorted(str(p) for p in jar_dir("spark", root).glob("*.jar"))


def spark_home() -> Path:
    """The installed pyspark folder, used as ``SPARK_HOME``.

    The pip package carries Spark's launch scripts (``bin/spark-class``, ``bin/spark-submit``) and
    every jar, so the local cluster and ``spark-submit`` need no separate Spark download. Found
    without importing pyspark, so commands that only launch Spark do not pay for that import.
    """
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        how = "run `make setup`" if CHECKOUT is not None else "pip install 'ballast[spark]'"
        raise MissingJarsError(f"pyspark is not installed in this environment: {how}")
    return Path(spec.origin).parent
