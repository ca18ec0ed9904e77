"""The archive of Ballast's code that executors on other hosts get (spark_jobs/shipping.py).

Judged against the checkout itself: every source file of the three packages and every schema is in
it, nothing compiled is, and a Python that has the archive unpacked on its path (as an executor
does) imports Ballast from there and reads the schemas from there, not from this checkout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from ballast.paths import SCHEMAS_DIR
from spark_jobs.shipping import ARCHIVE, PACKAGES, build_code_archive, package_dir

PROBE = """
import json, ballast, spark_jobs.reduce.job, services
from ballast.avro.codec import SchemaStore
from ballast.paths import SCHEMAS_DIR
print(json.dumps({
    "ballast": ballast.__file__, "job": spark_jobs.reduce.job.__file__, "services": services.__file__,
    "schemas": str(SCHEMAS_DIR), "names": SchemaStore.from_dir().names(),
}))
"""


def test_the_archive_holds_every_source_file_and_schema_and_nothing_compiled(tmp_path):
    archive = build_code_archive(tmp_path)
    assert archive == tmp_path / ARCHIVE
    names = set(zipfile.ZipFile(archive).namelist())
    for package in PACKAGES:
        root = package_dir(package)
        sources = {f"{package}/{p.relative_to(root).as_posix()}" for p in root.rglob("*.py")}
        sources = {s for s in sources if "__pycache__" not in s}
        assert sources and sources <= names, package
    root = package_dir("ballast")
    schemas = {f"ballast/{p.relative_to(root).as_posix()}" for p in SCHEMAS_DIR.rglob("*.avsc")}
    assert schemas and schemas <= names  # the older writer versions in schemas/previous too
    assert not [n for n in names if n.endswith(".pyc") or "__pycache__" in n]
    assert {n.split("/")[0] for n in names} == set(PACKAGES)  # nothing else of the checkout


def test_unpacked_it_is_what_an_executor_imports_and_reads(tmp_path):
    unpacked = tmp_path / "work" / "ballast-code"
    zipfile.ZipFile(build_code_archive(tmp_path)).extractall(unpacked)
    # as an executor's Python worker starts: in its working folder, the relative entry on PYTHONPATH
    env = {**os.environ, "PYTHONPATH": "ballast-code"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=unpacked.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    for key in ("ballast", "job", "services"):
        assert Path(found[key]).is_relative_to(unpacked), found
    assert found["schemas"] == str(unpacked / "ballast" / "schemas")
    schemas = [json.loads(p.read_text()) for p in SCHEMAS_DIR.glob("*.avsc")]
    assert found["names"] == sorted(f"{s['namespace']}.{s['name']}" for s in schemas)
