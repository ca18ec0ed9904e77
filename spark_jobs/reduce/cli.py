"""``ballast reduce run|submit``: the stateful reduce in a local Spark, or on a standalone cluster.

``run`` starts a SparkSession (``local[--local-cores]``, or ``--master``) in this process.
``submit`` hands the same job to ``spark-submit --master spark://...`` with the Maven-resolved
connector jars (:mod:`spark_jobs.submit`); the driver runs this module's ``run`` with the settings
``submit`` resolved (flags and environment), plus the master, so both sides agree on everything.
The master defaults to the local stack's cluster (``ballast stack up --spark``).

Client settings (``--kafka-config FILE``, ``-X``) reach the driver as the file's path and the
entries (secret ones by environment); the executors get the driver's resolved ``KafkaConfig``
pickled with the job, so they read no file, but a *path* a setting names (a keystore, a CA)
must exist on them too.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from ballast.cli.connection import ConnectionSettings
from ballast.kafka.topics import LayoutSettings
from spark_jobs.reduce.config import ReduceSettings


def resolved_settings(args: argparse.Namespace, **given: object) -> tuple[ReduceSettings, ConnectionSettings]:
    """The job's settings with its id and checkpoint resolved (the defaults depend on the deployment
    and the state folder), read before any broker or Spark is asked: a bad value is one line."""
    connection = ConnectionSettings.from_args(args)
    settings = ReduceSettings.from_args(args, **given)
    prefix = LayoutSettings.from_args(args).prefix
    job = settings.resolved_job_id(prefix)
    checkpoint = settings.resolved_checkpoint(prefix, connection.state_dir)
    return replace(settings, job_id=job, checkpoint=checkpoint), connection


def cmd_run(args: argparse.Namespace) -> int:
    from spark_jobs.reduce.checkpoint import Manifest, check, claim, local_folder
    from spark_jobs.reduce.runner import job_spec, run_job, stop_spark
    from spark_jobs.session import SPARK_CONF, local_spark

    settings, connection = resolved_settings(args)
    layout = LayoutSettings.from_args(args).layout()
    kafka = connection.checked_kafka_config("ballast-reduce")
    kafka.spark_sink_options()  # a client setting Spark's Java client cannot take: one line, before Spark
    workers = _routed_partitions(kafka, layout)
    routed = layout.name("routed")
    # what is known before Spark starts is compared now: a wrong start fails in a second
    known = Manifest(settings.job_id, routed, workers, (), settings.processor)
    check(settings.checkpoint, known, ignore=("labels",))
    spark_log = settings.spark_log if str(settings.spark_log) not in ("", ".") else None
    folder = local_folder(settings.checkpoint)  # None only on a file system ReduceSettings refuses
    if spark_log is None and folder is not None:
        spark_log = folder.parent / "spark.log"
    if spark_log is not None:
        Path(spark_log).parent.mkdir(parents=True, exist_ok=True)
    spark = local_spark(
        "ballast-reduce",
        cores=settings.local_cores,
        master=settings.master or None,
        shuffle_partitions=workers,
        log_level=settings.log_level,
        conf={**SPARK_CONF, "spark.ui.showConsoleProgress": "false", **settings.spark_options()},
        output=spark_log,
    )
    try:
        spec = job_spec(spark, kafka, layout, settings, settings.input_topics)
        manifest = Manifest(
            spec.job, spec.topics["routed"], spec.routed_partitions, spec.labels, spec.processor
        )
        lock = claim(settings.checkpoint, manifest)  # noqa: F841 - held for the job's life
        if spark_log is not None:
            print(f"reduce: Spark's own output goes to {spark_log}", file=sys.stderr, flush=True)
        return run_job(spark, spec, settings)
    finally:
        stop_spark(spark)


def cmd_submit(args: argparse.Namespace) -> int:
    from spark_jobs.submit import SubmitSettings, master_url_from_state, submit_app

    submit = SubmitSettings.from_args(args)
    settings, connection = resolved_settings(args)
    master = submit.master or master_url_from_state(connection.state_dir)
    settings = replace(settings, master=master)
    kafka = connection.checked_kafka_config("ballast-reduce")
    kafka.spark_sink_options()  # as in cmd_run: refused before spark-submit starts anything
    # the driver connects as this command does: the resolved connection as flags, secrets by environment
    resolved = ConnectionSettings.of(kafka, connection.state_dir)
    app_args = [
        "run",
        *resolved.to_argv(),
        *LayoutSettings.from_args(args).to_argv(),
        *settings.to_argv(),
    ]
    # the file spark-submit runs on the driver: this package's __main__ (which calls main below)
    entry = Path(__file__).with_name("__main__.py")
    print(f"reduce: spark-submit to {master} (driver log: {args.driver_log or 'this terminal'})", flush=True)
    log = args.driver_log or None
    return submit_app(entry, app_args, master=master, settings=submit, log=log, env=resolved.secret_env())


def _routed_partitions(kafka, layout) -> int:
    from ballast.kafka.admin import make_admin, partition_count

    return partition_count(make_admin(kafka), layout.name("routed"))


def _add_common(p: argparse.ArgumentParser, *, submit: bool = False) -> None:
    ConnectionSettings.add_arguments(p)
    LayoutSettings.add_arguments(p)
    # under submit, the master is spark-submit's (SubmitSettings), and local cores mean nothing
    skip = ("master", "local_cores") if submit else ()
    ReduceSettings.add_arguments(p, only=tuple(n for n in ReduceSettings().as_dict() if n not in skip))


RUN_DESCRIPTION = (
    "Run the stateful reduce: read the routed topic, keep each key's state in the worker that owns its "
    "routed partition (one Spark state partition each, RocksDB), move keys between workers live as the "
    "control log says, and write closed windows to the output topic. A local SparkSession "
    "(local[--local-cores]) unless --master names a cluster; the checkpoint resumes a stopped job. "
    "Spark's own log goes to --spark-log; this command prints Ballast's status lines."
)
SUBMIT_DESCRIPTION = (
    "The same job on a Spark standalone cluster, through spark-submit in client deploy mode (the driver "
    "runs here; Spark has no cluster mode for Python on standalone): the connector jars and Ballast's own "
    "code go to the executors, which run --python; the driver advertises --driver-host or this host's "
    "address on the route to the master. The master defaults to the local stack's cluster (ballast stack "
    'up --spark). See docs/reduce.md, "On a cluster of your own".'
)


def register(sub: argparse._SubParsersAction) -> None:
    reduce = sub.add_parser(
        "reduce", help="the Spark stateful reduce", description="The Spark stateful reduce."
    )
    rsub = reduce.add_subparsers(dest="reduce_command", required=True, metavar="ACTION")
    run = rsub.add_parser(
        "run", help="run the reduce job in a local Spark (or --master)", description=RUN_DESCRIPTION
    )
    _add_common(run)
    run.set_defaults(func=cmd_run)
    from spark_jobs.submit import SubmitSettings

    sub_ = rsub.add_parser(
        "submit",
        help="run the reduce job on a Spark cluster with spark-submit",
        description=SUBMIT_DESCRIPTION,
    )
    _add_common(sub_, submit=True)
    SubmitSettings.add_arguments(sub_)
    sub_.add_argument("--driver-log", default="", help="write the driver's output to this file")
    sub_.set_defaults(func=cmd_submit)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spark_jobs.reduce")
    sub = parser.add_subparsers(dest="command", required=True)
    register_run = sub.add_parser("run", help="run the reduce job", description=RUN_DESCRIPTION)
    _add_common(register_run)
    register_run.set_defaults(func=cmd_run)
    args = parser.parse_args(argv)
    return args.func(args)
