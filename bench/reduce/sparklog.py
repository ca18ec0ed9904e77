"""Every micro-batch's full progress, as Spark itself reports it, from a file beside each Spark.

Why: the reduce job publishes a ``ReduceProgress`` per batch with Spark's durations, but not the
state operators' metrics (rows updated, time in updates and commits, RocksDB's own figures),
which say where a batch's time goes; and the native query is not the job, so it publishes none.
Spark logs each progress (``ProgressReporter``: "Streaming query made progress: {json}") at
INFO. A log4j2 configuration of the benchmark's own, given to each contender's Spark with
``spark.driver.extraJavaOptions`` (the job takes any Spark option through ``--spark-conf``), sends
that one logger to a file of its own and leaves everything else as Spark's defaults have it
(warnings and up, on the process's stderr). Both contenders are then measured from the same
source, parsed the same way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# the class moved to ``streaming.runtime`` in Spark 4.1; a logger naming the old one logs nothing
LOGGER = "org.apache.spark.sql.execution.streaming.runtime.ProgressReporter"
MARK = "Streaming query made progress: "

_CONFIG = """\
rootLogger.level = warn
rootLogger.appenderRef.console.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
appender.progress.type = File
appender.progress.name = progress
appender.progress.fileName = {path}
appender.progress.layout.type = PatternLayout
appender.progress.layout.pattern = %m%n
logger.progress.name = {logger}
logger.progress.level = info
logger.progress.additivity = false
logger.progress.appenderRef.progress.ref = progress
"""


def progress_conf(folder: Path, java_options: str = "") -> tuple[str, Path]:
    """The Spark option (``KEY=VALUE``) that sends the progress of a Spark started with it to a
    file in ``folder``, and that file; ``java_options``: more options for that JVM (a profiler)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "progress.log"
    config = folder / "log4j2-progress.properties"
    config.write_text(_CONFIG.format(path=path, logger=LOGGER))
    options = f"-Dlog4j2.configurationFile=file:{config} {java_options}".strip()
    return f"spark.driver.extraJavaOptions={options}", path


def read_progress(path: Path) -> list[dict[str, Any]]:
    """Every progress in the file (pretty-printed JSON after the mark), in order; a progress still
    being written is left for the next read."""
    if not path.exists():
        return []
    text = path.read_text(errors="replace")
    decoder = json.JSONDecoder()
    out: list[dict[str, Any]] = []
    at = text.find(MARK)
    while at >= 0:
        try:
            obj, end = decoder.raw_decode(text, at + len(MARK))
        except ValueError:
            break
        out.append(obj)
        at = text.find(MARK, end)
    return out


def batches(path: Path) -> dict[int, dict[str, Any]]:
    """The progress of every trigger that ran a batch (idle triggers have no ``addBatch``), by id."""
    return {int(p["batchId"]): p for p in read_progress(path) if "addBatch" in p.get("durationMs", {})}
