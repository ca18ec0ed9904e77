"""Bytes as an older version of Ballast wrote them, built here from their documented layout (not
by the code under test): state a checkpoint saved, or a chunk in flight, before a change."""

from __future__ import annotations

import struct

import numpy as np


def table_v1(keys: list[str], run: list[int], window: list[int], columns: list[tuple[str, list]]) -> bytes:
    """A state table in the first format (``BT1``): magic, row count, keys (int32 lengths, then
    UTF-8), run, window, then every column of the schema of its day, raw little-endian, in schema
    order (``columns``: (dtype, values) each)."""
    encoded = [k.encode() for k in keys]
    parts = [b"BT1", struct.pack("<I", len(keys)), np.array([len(k) for k in encoded], "<i4").tobytes()]
    parts += [b"".join(encoded), np.array(run, "<i8").tobytes(), np.array(window, "<i8").tobytes()]
    parts += [np.array(values, dtype).tobytes() for dtype, values in columns]
    return b"".join(parts)


def aggregate_rows_v1(
    keys: list[str], windows: list[int], count: list[int], total: list[float], low: list[float],
    high: list[float],
) -> bytes:  # fmt: skip
    """An ``aggregate`` state table before the sampling columns: count, sum, min, max, then the
    engine's excluded, dirty, revision (run 0, dirty, never emitted)."""
    n = len(keys)
    return table_v1(
        keys,
        [0] * n,
        windows,
        [
            ("<i8", count),
            ("<f8", total),
            ("<f8", low),
            ("<f8", high),
            ("<i8", [0] * n),  # excluded
            ("<i1", [1] * n),  # dirty
            ("<i4", [-1] * n),  # revision
        ],
    )
