"""Input events as columns: what a harness produced, and what a reference computes its truth from.

Why columns (numpy arrays) and not dicts: a benchmark or the demo produces hundreds of thousands of
events and computes per-window truth from them with one ``groupby``; keeping ids, values and event
times as arrays makes that one pass, and the names of the keys are looked up only when produced.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Events:
    """Events as columns (key ids index ``names``)."""

    ids: np.ndarray
    values: np.ndarray
    times: np.ndarray
    names: list[str] | None = None  # None: key id i is named user_name(i)

    def name(self, i: int) -> str:
        return self.names[i] if self.names is not None else user_name(i)


def user_name(i: int) -> str:
    return f"user-{i:09d}"
