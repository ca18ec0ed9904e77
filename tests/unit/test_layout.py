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
