"""The input: phases of Zipf keys whose hot set is drawn anew at every phase, cut into slices.

Why a fresh rank -> key permutation per phase: the hot set has to shift, so that a plan made for
one phase is wrong for the next and (c) must react, as a controller must when the keys drift.
Values are multiples of 1/4 and event times advance 1 ms every ``PER_MS`` events, as the reduce
tests generate them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ballast.avro.wire import INPUT_HEADER, encode_input_body
from ballast.workload import key_name, zipf_key_ids
from bench.reduce.params import PER_MS, START_MS


@dataclass
class Slice:
    """A run of consecutive input events: released and routed as one transaction."""

    phase: int
    index: int  # 0: the phase's prefix
    first: int  # global index of its first event (event time = START_MS + index // PER_MS)
    records: list[tuple[bytes, bytes]]

    @property
    def kind(self) -> str:
        return "prefix" if self.index == 0 else "slice"


class Workload:
    """The events of one phase: Zipf(z) ranks through the phase's own rank -> key permutation."""

    def __init__(self, keys: int, z: float, seed: int) -> None:
        self.keys, self.z, self.seed = keys, z, seed
        self.names = [key_name(i).encode() for i in range(keys)]
        self.next_index = 0

    def phase(self, phase: int, sizes: list[int]) -> list[Slice]:
        n = sum(sizes)
        seed = self.seed + 101 * phase
        perm = np.random.default_rng(seed + 1).permutation(self.keys)
        ids = (
            perm[zipf_key_ids(n, self.keys, self.z, seed)]
            if self.z > 0
            else (np.random.default_rng(seed).integers(0, self.keys, size=n))
        )
        values = np.random.default_rng(seed + 2).integers(0, 400, size=n) / 4.0
        first = self.next_index
        self.next_index += n
        out: list[Slice] = []
        at = 0
        for i, size in enumerate(sizes):
            records = []
            for j in range(at, at + size):
                g = first + j
                k = self.names[ids[j]]
                body = encode_input_body(k, float(values[j]), g.to_bytes(8, "big"), START_MS + g // PER_MS)
                records.append((k, INPUT_HEADER + body))
            out.append(Slice(phase, i, first + at, records))
            at += size
        return out
