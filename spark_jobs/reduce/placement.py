"""Worker labels: the grouping values that put routed partition w's state in Spark state partition w.

Why labels: a stateful operator grouped by a column places a group in shuffle partition
``pmod(murmur3(value, seed 42), spark.sql.shuffle.partitions)``; grouping by the worker number
itself piles several workers into one partition and leaves others empty (spark-notes 2, 6). So
each worker gets the smallest non-negative *int* whose Spark hash lands in its own partition. The
search runs in Spark itself, on an int column: Murmur3 hashes int and bigint differently, and only
Spark's own function is the ground truth. The labels are a pure function of the worker count, so
a restarted job finds the same ones its checkpoint placed state under.
"""

from __future__ import annotations

from collections.abc import Iterable


def first_label_per_partition(pairs: Iterable[tuple[int, int]], partitions: int) -> list[int]:
    """From (candidate, its partition) pairs in increasing candidate order, the first per partition."""
    labels: dict[int, int] = {}
    for candidate, partition in pairs:
        labels.setdefault(int(partition), int(candidate))
        if len(labels) == partitions:
            break
    missing = sorted(set(range(partitions)) - set(labels))
    if missing:
        raise ValueError(f"no label found for partitions {missing}; search more candidates")
    return [labels[w] for w in range(partitions)]


def worker_labels(spark, workers: int, candidates: int = 10_000) -> list[int]:
    """``labels[w]`` is an int that Spark's hash places in shuffle partition ``w`` of ``workers``."""
    rows = (
        spark.range(0, candidates)
        .selectExpr("CAST(id AS INT) AS label", f"pmod(hash(CAST(id AS INT)), {int(workers)}) AS part")
        .orderBy("label")
        .collect()
    )
    return first_label_per_partition(((r.label, r.part) for r in rows), workers)
