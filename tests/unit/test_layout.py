"""The layout promise: an import name is its file's path, and pyproject remaps nothing.

Why a test: a ``package-dir`` mapping (or a stray top-level module) makes ``ballast.x`` live
somewhere its name does not say; this fails the day that comes back.
"""

from __future__ import annotations

import importlib.util
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("ballast", "services", "spark_jobs")


def _modules() -> list[tuple[str, Path]]:
    found = []
    for top in PACKAGES:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            found.append((".".join(parts), path))
    return found


def test_pyproject_has_no_package_dir_mapping():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    setuptools = config["tool"]["setuptools"]
    assert "package-dir" not in setuptools
    assert setuptools["packages"]["find"]["include"] == [f"{p}*" for p in PACKAGES]


def test_every_folder_of_code_is_a_package():
    for top in PACKAGES:
        for folder in [ROOT / top, *(p for p in (ROOT / top).rglob("*") if p.is_dir())]:
            if folder.name == "__pycache__" or not any(folder.glob("*.py")):
                continue
            assert (folder / "__init__.py").is_file(), f"{folder} holds modules but is no package"


def test_every_import_name_resolves_to_its_path():
    modules = _modules()
    assert len(modules) > 40  # the walk found the code
    wrong = {}
    for name, path in modules:
        spec = importlib.util.find_spec(name)
        origin = Path(spec.origin).resolve() if spec is not None and spec.origin else None
        if origin != path.resolve():
            wrong[name] = str(origin)
    assert not wrong, wrong


# --- import directions ----------------------------------------------------------------------------
#
# The library (ballast) is imported by everything and imports nothing above it; each service talks
# to the others only through Kafka; the demo and the benchmarks start services and the reduce job
# through the stack's supervisor and the CLI, never by importing them. Lazy (function-level) and
# TYPE_CHECKING imports count: a dependency is a dependency wherever the statement sits.

SERVICES = ("router", "controller", "shedder", "demo")
SPARK_JOB = "spark_jobs.reduce"  # the job; spark_jobs' other modules are a library for Spark code


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every module name ``path`` imports, anywhere in the file (relative imports resolved)."""
    import ast

    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # `from pkg import module`
    return found


def _code(*tops: str) -> dict[str, Path]:
    return {_module_name(p): p for top in tops for p in sorted((ROOT / top).rglob("*.py"))}


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _violations(modules: dict[str, Path], banned) -> list[str]:
    wrong = []
    for name, path in modules.items():
        for imported in sorted(imports_of(path)):
            reason = banned(name, imported)
            if reason:
                wrong.append(f"{name} imports {imported}: {reason}")
    return wrong


def test_the_library_imports_no_service_and_no_spark_job():
    def banned(_name: str, imported: str) -> str | None:
        for top in ("services", "spark_jobs", "bench", "tests"):
            if _under(imported, top):
                return f"the library never imports {top} (register commands as entry points instead)"
        return None

    assert not _violations(_code("ballast"), banned)


def test_no_service_imports_another_service():
    def banned(name: str, imported: str) -> str | None:
        own = name.split(".")[1] if name.count(".") else ""
        if _under(imported, "services") and imported.count(".") and imported.split(".")[1] != own:
            return "services talk to each other only through Kafka"
        if _under(imported, "spark_jobs") and own != "demo":
            return "a service does not run Spark code (the reduce is its own process)"
        return None

    assert not _violations(_code("services"), banned)


def test_spark_jobs_import_no_service():
    def banned(_name: str, imported: str) -> str | None:
        return "the Spark side talks to services only through Kafka" if _under(imported, "services") else None

    assert not _violations(_code("spark_jobs"), banned)


def test_the_demo_and_benchmarks_run_services_only_through_the_supervisor_and_the_cli():
    def banned(name: str, imported: str) -> str | None:
        if _under(imported, "services") and not _under(imported, "services.demo"):
            return "start services with ballast.devstack.services (their `ballast … run` commands)"
        if _under(imported, SPARK_JOB):
            return "start the reduce with `ballast reduce run|submit` through ballast.devstack.services"
        return None

    modules = {
        n: p
        for n, p in _code("services", "bench").items()
        if _under(n, "services.demo") or _under(n, "bench")
    }
    assert modules, "no demo or benchmark modules found"
    assert not _violations(modules, banned)


def test_no_import_circles():
    """Between modules of the library, the services and the Spark side (lazy imports included)."""
    modules = _code(*PACKAGES)
    graph = {
        name: {m for m in imports_of(path) if m in modules and m != name} for name, path in modules.items()
    }
    # Tarjan's strongly connected components: any with more than one module is a circle
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for v in graph:
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    assert not circles, circles
