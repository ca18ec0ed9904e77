"""``ballast reduce run|submit``: the stateful reduce in a local Spark, or on a standalone cluster.

``run`` starts a local SparkSession (``local[--local-cores]``, or ``--master``) in this process.
``submit`` hands the same job to ``spark-submit --master spark://...`` with the Maven-resolved
connector jars; the driver then runs ``python -m spark_jobs.reduce run`` with the same flags.
"""

from __future__ import annotations

import argparse

from ballast.kafka.connection import ConnectionSettings
from ballast.kafka.topics import LayoutSettings
from spark_jobs.reduce.config import ReduceSettings


def cmd_run(args: argparse.Namespace) -> int:
    from spark_jobs.reduce.job import SPARK_CONF
    from spark_jobs.reduce.runner import job_spec, run_job
    from spark_jobs.session import local_spark

    settings = ReduceSettings.from_args(args)
    layout = LayoutSettings.from_args(args).layout()
    kafka = ConnectionSettings.from_args(args).checked_kafka_config("ballast-reduce")
    spark = local_spark(
        "ballast-reduce",
        cores=settings.local_cores,
        master=settings.master or None,
        shuffle_partitions=_routed_partitions(kafka, layout),
        log_level=settings.log_level,
        conf=SPARK_CONF,
    )
    spec = job_spec(spark, kafka, layout, settings, tuple(args.input_topics or ()))
    try:
        return run_job(spark, spec, settings)
    finally:
        spark.stop()


def _routed_partitions(kafka, layout) -> int:
    from ballast.kafka.admin import make_admin, partition_count

    return partition_count(make_admin(kafka), layout.name("routed"))


def _add_common(p: argparse.ArgumentParser) -> None:
    ConnectionSettings.add_arguments(p)
    LayoutSettings.add_arguments(p, only=("prefix",))
    ReduceSettings.add_arguments(p)
    p.add_argument(
        "--input-topics", nargs="*", default=(), help="input topics of the job (default: <prefix>.input)"
    )


def register(sub: argparse._SubParsersAction) -> None:
    reduce = sub.add_parser("reduce", help="the Spark stateful reduce")
    rsub = reduce.add_subparsers(dest="reduce_command", required=True)
    run = rsub.add_parser("run", help="run the reduce job in a local Spark (or --master)")
    _add_common(run)
    run.set_defaults(func=cmd_run)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m spark_jobs.reduce")
    sub = parser.add_subparsers(dest="command", required=True)
    register_run = sub.add_parser("run", help="run the reduce job")
    _add_common(register_run)
    register_run.set_defaults(func=cmd_run)
    args = parser.parse_args(argv)
    return args.func(args)
