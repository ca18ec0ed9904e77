"""Every row a reduce job wrote to the output topic, as a frame the judge reads.

Why every revision and not the latest per key: a wrong row overwritten later is still a wrong row
that a consumer may have acted on, so the judge (:mod:`ballast.harness.judge`) sees them all.
"""

from __future__ import annotations

import pandas as pd

from ballast.avro.codec import AvroCodec
from ballast.harness.judge import ROW_FIELDS
from ballast.kafka.configuration import KafkaConfig
from ballast.kafka.follow import TopicFollower
from ballast.workload import FLUSH_KEY


def output_rows(kafka: KafkaConfig, topic: str, job: str, timeout: float = 300.0) -> pd.DataFrame:
    """Every row ``job`` wrote to ``topic`` up to its end now (all revisions), the flush key's left out."""
    codec = AvroCodec("io.ballast.OutputResult")
    with TopicFollower(kafka, topic) as f:
        messages = f.read_to_end(timeout)
    rows = []
    for m in messages:
        r = codec.decode(m.value())
        if r["job"] == job and r["key"] != FLUSH_KEY:
            rows.append({k: r[k] for k in ROW_FIELDS})
    return pd.DataFrame(rows, columns=list(ROW_FIELDS))
