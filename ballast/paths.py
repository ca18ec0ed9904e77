"""Where Ballast finds its own files: the source tree, the jar cache and default state folder.

Everything is resolved relative to the checkout (the package is installed editable by
``make setup``). These are locations, not knobs: the one knob here, the state folder, is a
setting (``--state-dir`` / ``BALLAST_STATE_DIR``, :mod:`ballast.settings`) whose default is below.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DEPLOY_DIR = PROJECT_ROOT / "deploy"
SCHEMAS_DIR = PROJECT_ROOT / "schemas"
CACHE_DIR = PROJECT_ROOT / ".cache"
JARS_DIR = CACHE_DIR / "jars"
DEFAULT_STATE_DIR = PROJECT_ROOT / "state" / "stack"


class MissingJarsError(RuntimeError):
    """The Maven-resolved jars are not there: `make setup` has not run (or ran elsewhere)."""


def jar_dir(name: str) -> Path:
    """Return ``.cache/jars/<name>`` or raise a clear error telling the user to run setup."""
    folder = JARS_DIR / name
    if not folder.is_dir() or not any(folder.glob("*.jar")):
        raise MissingJarsError(
            f"no jars in {folder}: run `make setup` (resolves them with Maven from deploy/)"
        )
    return folder


def classpath(name: str) -> str:
    """A JVM classpath with every jar of one cached group (wildcard form, as Kafka's scripts use)."""
    return str(jar_dir(name) / "*")


def spark_jars() -> list[str]:
    """The connector jars Spark needs on top of pyspark's own (Kafka source/sink, Avro)."""
    return sorted(str(p) for p in jar_dir("spark").glob("*.jar"))


def spark_home() -> Path:
    """The installed pyspark folder, used as ``SPARK_HOME``.

    The pip package carries Spark's launch scripts (``bin/spark-class``, ``bin/spark-submit``) and
    every jar, so the local cluster and ``spark-submit`` need no separate Spark download. Found
    without importing pyspark, so commands that only launch Spark do not pay for that import.
    """
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise MissingJarsError("pyspark is not installed in this environment: run `make setup`")
    return Path(spec.origin).parent
