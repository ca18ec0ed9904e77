"""The package's promises, checked from its declaration: pyproject.toml names every third-party
package the code imports, by a range that admits the lock (requirements.txt), and without the
extras every command but those that need one works, while those say which extra to install.

Why here and not only in tests/e2e/test_package.py (which installs a real wheel): these are quick
and need no network; that one proves the same on a real install of ``[all]`` and of no extra.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("ballast", "services", "spark_jobs")
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# import names whose distribution is named otherwise
DISTRIBUTION_OF = {"faust": "faust-streaming", "google": "protobuf"}
# imported, but brought by a declared package as its own pinned dependency (pyspark's gateway)
COMES_WITH = {"py4j": "pyspark"}


def declared() -> dict[str, tuple[str, Requirement]]:
    """Distribution -> (extra, "" for the base, its requirement)."""
    out = {canonicalize_name(Requirement(r).name): ("", Requirement(r)) for r in PROJECT["dependencies"]}
    for extra, reqs in PROJECT["optional-dependencies"].items():
        for r in reqs:
            req = Requirement(r)
            if canonicalize_name(req.name) != "ballast":  # all = ballast[spark,shedder,demo]
                out[canonicalize_name(req.name)] = (extra, req)
    return out


def imported_packages() -> dict[str, set[str]]:
    """Top-level third-party import name -> files importing it (anywhere in the file)."""
    found: dict[str, set[str]] = {}
    for top in PACKAGES:
        for path in (ROOT / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    first = name.partition(".")[0]
                    if first not in sys.stdlib_module_names and first not in (*PACKAGES, "__future__"):
                        found.setdefault(first, set()).add(str(path.relative_to(ROOT)))
    return found


def test_every_imported_package_is_declared():
    deps = declared()
    imported = imported_packages()
    assert {"numpy", "pandas", "pyspark", "faust", "confluent_kafka"} <= set(imported)  # the walk works
    missing = {
        name: sorted(files)[:3]
        for name, files in imported.items()
        if canonicalize_name(DISTRIBUTION_OF.get(name, COMES_WITH.get(name, name))) not in deps
    }
    assert not missing, f"imported but not in pyproject.toml: {missing}"


def test_extras_hold_what_the_base_commands_do_not_need():
    deps = declared()
    assert {d for d, (extra, _) in deps.items() if extra == "spark"} >= {"pyspark", "pandas", "pyarrow"}
    assert deps["faust-streaming"][0] == "shedder"
    assert set(PROJECT["optional-dependencies"]) == {"spark", "shedder", "demo", "all"}
    assert PROJECT["optional-dependencies"]["all"] == ["ballast[spark,shedder,demo]"]


def locked() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version
    return pins


def test_every_range_admits_the_lock_and_has_a_ceiling():
    """requirements.txt is what the tests ran on: a range that excludes it declares an untested
    version; one without a ceiling lets a new major release in untested."""
    pins = locked()
    for dist, (extra, req) in declared().items():
        assert dist in pins, f"{dist} ([{extra}]) is not locked in requirements.txt"
        assert req.specifier.contains(pins[dist]), f"{req} does not admit the lock's {pins[dist]}"
        assert any(s.operator == "<" for s in req.specifier), f"{req}: no upper bound"
        assert any(s.operator == ">=" for s in req.specifier), f"{req}: no floor"


# --- without the extras ---------------------------------------------------------------------------

# `python -c` with every optional dependency made impossible to import, as in `pip install ballast`
WITHOUT_EXTRAS = """
import importlib.abc, sys
BLOCKED = set(sys.argv[1].split(","))

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
from ballast.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


def optional_modules() -> list[str]:
    names = {"faust-streaming": "faust", "protobuf": "google.protobuf"}
    return sorted(
        names.get(dist, dist.replace("-", "_")) for dist, (extra, _) in declared().items() if extra
    )


def ballast_without_extras(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BALLAST_")}
    env.update(PYTHONPATH=str(ROOT), COLUMNS="400")
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_EXTRAS, ",".join(optional_modules()), *argv],
        capture_output=True, text=True, timeout=120, cwd=ROOT, env=env,
    )  # fmt: skip


def test_without_the_extras_the_other_commands_work_and_those_that_need_one_say_which():
    assert "pandas" in optional_modules() and "pyspark" in optional_modules()
    top = ballast_without_extras("-h")
    assert top.returncode == 0, top.stderr
    commands = list(PROJECT["entry-points"]["ballast.commands"])
    listing = {line.split()[0]: line for line in top.stdout.splitlines() if line.startswith("    ")}
    assert set(listing) == set(commands)
    spark = "(unavailable: needs pandas, which is not installed: pip install 'ballast[spark]')"
    assert spark in listing["reduce"]
    assert [c for c in commands if "unavailable" in listing[c]] == ["reduce"], listing
    for command in commands:
        shown = ballast_without_extras(command, "-h")
        assert shown.returncode == 0 and shown.stdout.startswith(f"usage: ballast {command}"), shown.stderr
    run = ballast_without_extras("reduce", "run", "-h")
    assert run.returncode == 1
    assert run.stderr.splitlines() == [
        "error: `ballast reduce` is unavailable: needs pandas, which is not installed: "
        "pip install 'ballast[spark]'"
    ]
