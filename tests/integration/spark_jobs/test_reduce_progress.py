"""The reduce's ``ReduceProgress`` from a real Spark Kafka source: a query capped by max offsets per
trigger reads part of an unevenly filled topic per batch, and each batch's record says how far it read
in each partition (``end_offsets``) and where the log ended when it was planned (``latest_offsets``),
so the backlog the cap leaves is visible from outside the job."""

from __future__ import annotations

from itertools import pairwise

import pytest

from ballast.avro.codec import AvroCodec
from ballast.kafka.clients import make_producer
from ballast.metrics.records import ReduceProgress, metric_of
from ballast.waiting import wait_until
from spark_jobs.query_progress import as_dict, ran_batch
from spark_jobs.reduce.progress import progress_metric

WRITTEN = (1_500, 300)  # records per partition
CAP = 600  # max offsets per trigger


@pytest.fixture(scope="module")
def spark():
    from spark_jobs.session import local_spark

    session = local_spark("ballast-test-progress", shuffle_partitions=2)
    yield session
    session.stop()


def test_each_batch_says_how_far_it_read_and_where_the_log_ended(
    spark, bootstrap, kafka_config, topic_factory, tmp_path
):
    topic = topic_factory("progress", partitions=2)
    producer = make_producer(kafka_config)
    for p, n in enumerate(WRITTEN):
        for i in range(n):
            producer.produce(topic, value=b"x", key=str(i).encode(), partition=p)
    producer.flush(30)

    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(CAP))
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:

        def batches() -> list[dict]:
            return [p for p in map(as_dict, query.recentProgress) if ran_batch(p)]

        wait_until(
            lambda: sum(p["numInputRows"] for p in batches()) >= sum(WRITTEN),
            timeout=120,
            what="every record read",
        )
        seen = batches()
    finally:
        query.stop()

    codec = AvroCodec("io.ballast.MetricsRecord")
    records = [metric_of(codec.decode(codec.encode(progress_metric("j", p, topic, 2)))) for p in seen]
    bodies = [r.body for r in records]
    assert all(isinstance(b, ReduceProgress) for b in bodies)
    first = bodies[0]
    assert first.batch_id == 0 and first.input_rows == CAP
    assert first.latest_offsets == list(WRITTEN)  # the whole log, seen when planning batch 0
    assert sum(first.end_offsets) == CAP and all(
        0 < e < latest for e, latest in zip(first.end_offsets, WRITTEN, strict=True)
    )  # the cap spread over both partitions, each short of its end
    assert bodies[-1].end_offsets == list(WRITTEN)
    ends = [b.end_offsets for b in bodies]
    assert all(a <= b for x, y in pairwise(ends) for a, b in zip(x, y, strict=True))
    assert all(r.source == "j/driver" and r.interval_end >= r.interval_start > 0 for r in records)
