"""The reduce query: routed topic -> decode -> one group per worker -> stateful step -> Kafka.

Why the shape:

- **Decode in the JVM.** ``from_avro`` turns the routed envelopes into columns before the Python
  workers see them, so no Python call is made per record; every registered writer version is
  read, in the current shape (:mod:`spark_jobs.reduce.decode`); a value without the header of
  one of them, or one Avro cannot read, becomes a ``BAD`` row the worker dead-letters.
- **Group by worker label.** Each routed partition's rows carry its worker's label
  (:mod:`spark_jobs.reduce.placement`), so worker w's state lives in Spark state partition w and
  the router's placement survives the shuffle.
- **No Spark watermark.** Spark's is one per query: the highest event time read, minus the delay,
  so a stalled router or a bad clock made records late everywhere. Each worker keeps its own, from
  the event-time progress routers announce per input partition in their markers
  (:mod:`spark_jobs.reduce.event_time`); the query declares none (``timeMode="None"``: no timers,
  no empty batches), and every worker sees every record and dead-letters what is late itself.
- **One sink.** Every output row names its topic (and a chunk its partition), so one Kafka sink
  writes results, chunks, dead letters and stats, and the stateful operator runs once per batch.
"""

from __future__ import annotations

import json

from ballast.avro.codec import HEADER_LEN, default_store
from ballast.kafka.dead_letters import DETAIL, JOB, REASON, SOURCE_OFFSET, SOURCE_PARTITION, SOURCE_TOPIC
from ballast.paths import SCHEMAS_DIR
from spark_jobs.query_progress import WATERMARKS
from spark_jobs.reduce.contract import BAD, CHUNK, CONTROL, DATA, MARKER
from spark_jobs.reduce.decode import legacy_headers, with_envelope
from spark_jobs.reduce.outputs import OUTPUT_SCHEMA, RESULT
from spark_jobs.reduce.stateful import JobSpec, WorkerProcessor


def source_options(spec: JobSpec) -> dict[str, str]:
    """Options of both Kafka sources: the connection and security, read_committed, and the groups
    Spark's consumers take, ``<prefix>.reduce-<uuid>-...`` (``groupIdPrefix``; Spark's default,
    ``spark-kafka-source``, is the same for every deployment, so no ACL could tell them apart).
    Spark commits nothing under them: the offsets live in the checkpoint."""
    return {**spec.kafka.spark_source_options(), "groupIdPrefix": spec.group_prefix}


def routed_rows(spark, spec: JobSpec, max_offsets: int = 0):
    """The routed topic as engine rows (see :mod:`spark_jobs.reduce.engine` for the columns).

    Only rows that cannot be decoded carry their raw bytes (``raw``): they are what their dead
    letters hold. Every other row crosses to Python as typed columns alone; a record the worker
    dead-letters (late, refused) is read back from the routed topic by its position, so its
    letter carries it (:mod:`spark_jobs.reduce.letters`). A marker's progress per covered input
    partition (``cover_times``, -1: none) and the spans its writer shed (``shed``) cross as
    arrays; ``legacy`` says the row's writer predates event-time progress in markers (an older
    envelope version, :func:`spark_jobs.reduce.decode.legacy_headers`)."""
    from pyspark.sql import functions as F

    reader = (
        spark.readStream.format("kafka")
        .options(**source_options(spec))  # connection and security, read_committed, groups
        .option("subscribe", spec.topics["routed"])
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
    )
    if max_offsets:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    raw = reader.load()
    # every registered RoutedEnvelope version, in the current shape (spark_jobs.reduce.decode)
    body = with_envelope(raw.select("partition", "offset", "timestamp", "value"))
    d, m, c = F.col("env.body.member0"), F.col("env.body.member1"), F.col("env.body.member2")
    kind = (
        F.when(d.isNotNull(), F.lit(DATA))
        .when(m.isNotNull(), F.lit(MARKER))
        .when(c.isNotNull(), F.lit(CHUNK))
        .otherwise(F.lit(BAD))
    )
    labels = F.array(*[F.lit(int(x)) for x in spec.labels])
    # writers older than event-time progress in markers: their partitions follow their records
    old = legacy_headers()
    legacy = F.substring("value", 1, HEADER_LEN).isin(*[F.lit(h) for h in old]) if old else F.lit(False)
    rows = body.select(
        F.element_at(labels, F.col("partition") + 1).alias("label"),
        F.col("offset"),
        F.expr("unix_millis(timestamp)").alias("timestamp"),
        kind.cast("int").alias("kind"),
        F.coalesce(d["key"], c["key"]).alias("key"),
        d["value"].alias("value"),
        d["source_topic"].alias("source_topic"),  # which SHEDDING setting kept it (with its epoch)
        F.when(legacy, d["source_partition"]).alias("source_partition"),  # a legacy record's progress
        legacy.alias("legacy"),
        F.coalesce(F.unix_millis(d["event_time"]), F.lit(0)).alias("event_time"),
        F.coalesce(d["epoch"], m["epoch"], c["epoch"], F.lit(-1)).alias("epoch"),
        F.transform(
            m["covers"], lambda x: F.concat(x["topic"], F.lit(":"), x["partition"].cast("string"))
        ).alias("covers"),
        F.transform(m["covers"], lambda x: F.coalesce(F.unix_millis(x["event_time"]), F.lit(-1))).alias(
            "cover_times"
        ),
        F.transform(
            m["shed"],
            lambda s: F.struct(
                s["topic"].alias("topic"),
                F.unix_millis(s["first"]).alias("first"),
                F.unix_millis(s["last"]).alias("last"),
                s["keep"].alias("keep"),
            ),
        ).alias("shed"),
        m["worker"].alias("marker_worker"),
        c["from_worker"].alias("chunk_from"),
        c["to_worker"].alias("chunk_to"),
        c["chunk_index"].alias("chunk_index"),
        c["chunk_count"].alias("chunk_count"),
        c["state"].alias("chunk_state"),
        c["job"].alias("chunk_job"),
        F.when(~F.col("header_ok") | F.col("env").isNull(), F.col("value")).alias("raw"),
        F.when(~F.col("header_ok"), F.lit("not a RoutedEnvelope (unknown header)"))
        .when(F.col("env").isNull(), F.lit("Avro decoding failed"))
        .alias("error"),
    )
    return rows.unionByName(control_rows(spark, spec), allowMissingColumns=True)


def control_rows(spark, spec: JobSpec):
    """The control log's records as ``CONTROL`` rows, one per worker label each: their ``offset``
    tells every worker how far the log reached when the micro-batch was planned (the worker
    resolves it to the epoch after it, :func:`spark_jobs.reduce.stateful.resolve_log_end`; the
    ``epoch`` column, the record key the log writer gives every event, is only what the key says:
    anyone can produce a record with any key to the topic).

    Why the log as a second source and not read from the workers at run time: the emission rule
    asks whether a key's run has ended *in the log* (a lagging partition would not show it yet).
    Asked of the log "now", a batch replayed after a crash could get another answer than its
    first run did (a move appended in between) and write a window its first run held back, or
    the reverse. Read as a source, the log's end is part of the batch's planned offsets: the
    replay reads the same rows and answers the same. The log is small (an event per change), so
    reading it costs little; the workers fold the events themselves from the control topic."""
    from pyspark.sql import functions as F

    raw = (
        spark.readStream.format("kafka")
        .options(**source_options(spec))
        .option("subscribe", spec.topics["control"])
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "true")
        .load()
    )
    labels = F.array(*[F.lit(int(x)) for x in spec.labels])
    return raw.select(
        F.explode(labels).alias("label"),
        F.col("offset").cast("long").alias("offset"),
        F.expr("unix_millis(timestamp)").alias("timestamp"),
        F.lit(CONTROL).cast("int").alias("kind"),
        F.coalesce(F.col("key").cast("string").cast("long"), F.lit(0)).alias("epoch"),
    )


def result_value(job: str):
    """An output row's value: results encoded by Spark's ``to_avro`` from the columns the worker
    wrote (with Ballast's single-object header), every other row's ``value`` as Python encoded it.
    The estimates under shedding are the worker's (:func:`spark_jobs.processors.sampling.estimate`);
    min and max are bounds exactly when the row is not exact."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import to_avro

    version = default_store().current("io.ballast.OutputResult")
    schema = json.dumps(json.loads((SCHEMAS_DIR / "output_result.avsc").read_text()))
    count = F.col("r_count")
    record = F.struct(
        F.col("r_key").alias("key"),
        F.lit(job).alias("job"),
        F.timestamp_millis(F.col("r_window_start")).alias("window_start"),
        F.timestamp_millis(F.col("r_window_end")).alias("window_end"),
        count.alias("count"),
        F.col("r_sum").alias("sum"),
        F.col("r_min").alias("min"),
        F.col("r_max").alias("max"),
        F.when(count > 0, F.col("r_sum") / count).alias("mean"),
        F.coalesce(F.col("r_values"), F.array().cast("array<double>")).alias("values"),
        F.col("r_worker").alias("worker"),
        F.col("r_epoch").alias("epoch"),
        F.col("r_revision").alias("revision"),
        F.col("r_excluded").alias("excluded_records"),
        F.col("r_keep").alias("keep_probability"),
        F.col("r_est_count").alias("estimated_count"),
        F.col("r_rel_error").alias("relative_error"),
        F.col("r_exact").alias("exact"),
        F.col("r_sampled").alias("sampled_records"),
        F.col("r_est_sum").alias("estimated_sum"),
        F.col("r_count_se").alias("count_std_error"),
        F.col("r_sum_se").alias("sum_std_error"),
        F.col("r_count_low").alias("count_low"),
        F.col("r_count_high").alias("count_high"),
        F.col("r_sum_low").alias("sum_low"),
        F.col("r_sum_high").alias("sum_high"),
        (~F.col("r_exact")).alias("min_max_are_bounds"),
    )
    encoded = F.concat(F.lit(version.header), to_avro(record, schema))
    return F.when(F.col("row_kind") == F.lit(RESULT), encoded).otherwise(F.col("value"))


def headers_column(job: str):
    """Dead letters carry the reason and where the record was, as the router's do, and the job
    that refused it (several jobs may read one routed topic, each with its own windows)."""
    from pyspark.sql import functions as F

    def header(name: str, value):
        return F.struct(F.lit(name).alias("key"), F.encode(value.cast("string"), "UTF-8").alias("value"))

    return F.when(
        F.col("reason").isNotNull(),
        F.array(
            header(REASON, F.col("reason")),
            header(DETAIL, F.col("detail")),
            header(SOURCE_TOPIC, F.col("source_topic")),
            header(SOURCE_PARTITION, F.col("source_partition")),
            header(SOURCE_OFFSET, F.col("source_offset")),
            header(JOB, F.lit(job)),
        ),
    )


def build_query(spark, spec: JobSpec, checkpoint: str, *, trigger: str, max_offsets: int = 0):
    """Start the streaming query (returns the ``StreamingQuery``)."""
    from pyspark.sql import functions as F

    rows = routed_rows(spark, spec, max_offsets)
    out = rows.groupBy("label").transformWithStateInPandas(
        statefulProcessor=WorkerProcessor(spec),
        outputStructType=OUTPUT_SCHEMA,
        outputMode="Update",
        timeMode="None",
    )
    # each worker's watermark, from its stats row, into the batch's progress (observedMetrics)
    stats = F.struct(F.col("w_worker").alias("worker"), F.col("w_watermark").alias("ms"))
    worker_watermark = F.when(F.col("w_worker").isNotNull(), stats)
    out = out.observe(WATERMARKS, F.collect_list(worker_watermark).alias("workers"))
    out = out.withColumn("source_topic", F.lit(spec.topics["routed"]))
    value, headers = result_value(spec.job).alias("value"), headers_column(spec.job).alias("headers")
    sink = out.select("topic", "partition", "key", value, headers)
    return (
        sink.writeStream.format("kafka")
        .queryName(spec.job)
        .options(**spec.kafka.spark_sink_options())  # connection and security, acks=all, idempotent
        .option("checkpointLocation", checkpoint)
        .outputMode("update")
        .trigger(processingTime=trigger)
        .start()
    )
