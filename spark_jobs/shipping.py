"""Ballast's own code for executors on other hosts: one archive, built when a job is submitted.

Why: the workers of a cluster of your own have a JDK and a Python with Ballast's dependencies
(``--python``, docs/reduce.md), but no checkout of Ballast, and a checkout there would have to be
kept at the driver's version by hand. So every submit packs the code this driver runs —
``ballast`` (its Avro schemas inside it, as package data), ``services`` and ``spark_jobs`` — and
Spark hands it to each executor with the application.

Why ``--archives`` (unpacked into each executor's folder, that folder on its ``PYTHONPATH``) and
not ``--py-files``: Python imports a ``--py-files`` zip in place (zipimport), so nothing in it is
a file. Ballast reads its Avro schemas as files (:data:`ballast.paths.SCHEMAS_DIR`,
``ballast/schemas``); from inside a zip the reduce's executors would find none and fail on their
first record. Unpacked, the folder holds the three packages as an installed wheel does, so every
path the code derives from its own location holds there too.
"""

from __future__ import annotations

import importlib.util
import zipfile
from collections.abc import Iterator
from pathlib import Path

PACKAGES = ("ballast", "services", "spark_jobs")
# the folder each executor unpacks the archive to, relative to its working folder (which is where
# its Python workers start, so the same relative PYTHONPATH entry finds it on every executor)
UNPACKED = "ballast-code"
ARCHIVE = f"{UNPACKED}.zip"
SKIPPED = ("__pycache__",)


def package_dir(name: str) -> Path:
    """The folder ``import name`` would load from in this process (a checkout, or site-packages)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"package {name} is not importable here: nothing to ship")
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def _files(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*")):
        skipped = path.suffix == ".pyc" or any(part in SKIPPED for part in path.relative_to(root).parts)
        if path.is_file() and not skipped:
            yield path


def code_entries() -> list[tuple[Path, str]]:
    """(file, name in the archive) of everything shipped: each package's files, schemas included."""
    entries = []
    for name in PACKAGES:
        root = package_dir(name)
        entries += [(f, f"{name}/{f.relative_to(root).as_posix()}") for f in _files(root)]
    return entries


def build_code_archive(folder: str | Path) -> Path:
    """Write ``<folder>/ballast-code.zip`` (see the module's docstring) and return its path."""
    target = Path(folder) / ARCHIVE
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path, name in code_entries():
            archive.write(path, name)
    return target
