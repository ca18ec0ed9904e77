"""Spark reads our bytes: the Spark Kafka source (spark-sql-kafka-0-10, resolved by Maven) reads a
topic written by Ballast's codec, and Spark's ``from_avro`` (spark-avro) decodes every value after the
10-byte single-object header, giving the same fields the test wrote."""

from __future__ import annotations

import json

import pytest

from ballast.avro.codec import HEADER_LEN, AvroCodec
from ballast.kafka.clients import make_producer, produce_all
from ballast.paths import SCHEMAS_DIR
from ballast.workload import input_events

N = 2_000


@pytest.fixture(scope="module")
def spark():
    from spark_jobs.session import local_spark

    session = local_spark("ballast-test-avro", shuffle_partitions=2)
    yield session
    session.stop()


def test_spark_kafka_source_and_from_avro_decode_our_records(spark, bootstrap, kafka_config, topic_factory):
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    topic = topic_factory("spark-avro", partitions=2)
    codec = AvroCodec("io.ballast.InputEvent")
    events = list(input_events(N, num_keys=100, z=1.0, seed=11))
    produce_all(make_producer(kafka_config), topic, ((e["key"].encode(), codec.encode(e)) for e in events))

    schema_json = (SCHEMAS_DIR / "input_event.avsc").read_text()
    raw = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    header = F.substring("value", 1, HEADER_LEN)
    body = F.expr(f"substring(value, {HEADER_LEN + 1}, length(value) - {HEADER_LEN})")
    decoded = raw.select(
        F.hex(header).alias("header"),
        F.col("key").cast("string").alias("kafka_key"),
        from_avro(body, schema_json, {"mode": "FAILFAST"}).alias("e"),
    ).select(
        "header", "kafka_key", "e.key", "e.value", "e.payload", F.col("e.event_time").cast("long").alias("t")
    )
    rows = decoded.collect()

    assert len(rows) == N
    assert {r["header"] for r in rows} == {codec.schema.header.hex().upper()}
    expected = {(e["key"], e["value"], bytes(e["payload"])) for e in events}
    got = {(r["key"], r["value"], bytes(r["payload"])) for r in rows}
    assert got == expected
    assert all(r["kafka_key"] == r["key"] for r in rows)
    # timestamp-millis became a Spark timestamp; cast back to seconds it matches
    assert sorted(r["t"] for r in rows) == sorted(e["event_time"] // 1000 for e in events)
    assert json.loads(schema_json)["name"] == "InputEvent"
