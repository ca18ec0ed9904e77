"""Spark reads every released ``RoutedEnvelope`` version the way fastavro resolves it.

Each version's values are encoded with that version's own schema file (what a router or job of its
release wrote); the job's decode expression (:func:`spark_jobs.reduce.decode.with_envelope`) reads
them in Spark, and every row must equal what fastavro's reader/writer resolution gives for the
same bytes with the current schema (``AvroCodec.decode``): another implementation of Avro's rules
than the Java one Spark runs. Values Avro cannot read stay recognisable: an unknown header is not
``header_ok``, a known header over a broken body has no ``env``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from ballast.avro.codec import AvroCodec, default_store
from tests.support.old_formats import ENVELOPE_VERSIONS, envelope_value

BRANCHES = ("io.ballast.DataRecord", "io.ballast.EpochMarker", "io.ballast.StateChunk")  # member0, 1, 2


@pytest.fixture(scope="module")
def spark():
    from spark_jobs.session import local_spark

    session = local_spark("ballast-test-envelope-decode", shuffle_partitions=1)
    yield session
    session.stop()


def samples(version: int) -> list[bytes]:
    """Data records, markers (no cover, several, event times known and not, shed spans) and state
    chunks (pieces, an empty state, "shipment done"), as ``version`` writes each of them."""
    data = {
        "key": "k-é", "value": 2.25, "payload": b"\x00\xffp", "event_time": 1_767_225_600_123,
        "epoch": 3, "router_id": "r1", "source_topic": "in", "source_partition": 2, "source_offset": 99,
    }  # fmt: skip
    covers = [
        {"topic": "in", "partition": 0, "event_time": 1_767_225_600_500},
        {"topic": "in", "partition": 3, "event_time": None},
    ]
    shed = [{"topic": "in", "first": 1_767_225_600_000, "last": 1_767_225_601_000, "keep": 0.25}]
    marker = {"epoch": 4, "router_id": "r2", "worker": 5, "marker_time": 1_767_225_700_000}
    chunk = {"epoch": 4, "key": "k-é", "from_worker": 1, "to_worker": 5, "chunk_index": 1,
             "chunk_count": 3, "state": b"BT2\x01\x02", "job": "agg"}  # fmt: skip
    return [
        envelope_value(version, "DataRecord", data),
        envelope_value(
            version, "DataRecord", {**data, "payload": b"", "value": -0.5, "source_offset": 2**40}
        ),
        envelope_value(version, "EpochMarker", {**marker, "covers": [], "shed": []}),
        envelope_value(version, "EpochMarker", {**marker, "covers": covers, "shed": shed}),
        envelope_value(version, "StateChunk", chunk),
        envelope_value(version, "StateChunk", {**chunk, "key": "", "state": b"", "chunk_count": 0}),
    ]


def as_avro(value: Any) -> Any:
    """A Spark row of the envelope in fastavro's terms: the union as (branch, fields), timestamps
    as epoch milliseconds, binary as bytes."""
    if value is None:
        return None
    if hasattr(value, "asDict"):
        fields = value.asDict()
        if set(fields) == {"member0", "member1", "member2"}:
            (i,) = [i for i in range(3) if fields[f"member{i}"] is not None]
            return (BRANCHES[i], as_avro(fields[f"member{i}"]))
        return {k: as_avro(v) for k, v in fields.items()}
    if isinstance(value, list):
        return [as_avro(v) for v in value]
    if isinstance(value, dt.datetime):  # Spark hands timestamps over as local naive datetimes
        return round(value.timestamp() * 1000)
    if isinstance(value, bytearray):
        return bytes(value)
    return value


def test_every_version_reads_as_fastavro_resolves_it(spark) -> None:
    from spark_jobs.reduce.decode import with_envelope

    assert len(default_store().versions("io.ballast.RoutedEnvelope")) == len(ENVELOPE_VERSIONS) >= 4
    values = [(v, i, b) for v in ENVELOPE_VERSIONS for i, b in enumerate(samples(v))]
    frame = spark.createDataFrame(
        [(v, i, bytearray(b)) for v, i, b in values], "version INT, i INT, value BINARY"
    )
    rows = with_envelope(frame).orderBy("version", "i").collect()
    assert len(rows) == len(values) == 6 * len(ENVELOPE_VERSIONS)
    reference = AvroCodec("io.ballast.RoutedEnvelope")
    for row, (version, i, value) in zip(rows, values, strict=True):
        assert (row["version"], row["i"]) == (version, i)
        assert row["header_ok"] is True
        expected = reference.decode(value)
        assert as_avro(row["env"]) == expected, (version, i)
    # what resolution filled in, stated once by hand: a v1 marker covers nothing, a v2 chunk has no job
    by = {(r["version"], r["i"]): as_avro(r["env"])["body"][1] for r in rows}
    assert by[(1, 3)]["covers"] == [] and by[(1, 3)]["shed"] == []
    assert [c["event_time"] for c in by[(3, 3)]["covers"]] == [None, None] and by[(3, 3)]["shed"] == []
    assert by[(2, 4)]["job"] == "" and by[(3, 4)]["job"] == "agg"
    assert by[(4, 3)]["covers"][0]["event_time"] == 1_767_225_600_500 and len(by[(4, 3)]["shed"]) == 1


def test_an_unknown_header_and_a_broken_body_are_told_apart(spark) -> None:
    from spark_jobs.reduce.decode import with_envelope

    good = samples(2)[0]
    junk = [
        b"\xc3\x01" + b"\x00" * 8 + good[10:],  # a fingerprint nobody registered
        b"not avro at all",
        good[:12],  # a v2 header, its body cut short
    ]
    frame = spark.createDataFrame([(i, bytearray(b)) for i, b in enumerate(junk)], "i INT, value BINARY")
    rows = with_envelope(frame).orderBy("i").collect()
    assert [(r["header_ok"], r["env"]) for r in rows] == [(False, None), (False, None), (True, None)]
