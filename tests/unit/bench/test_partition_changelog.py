"""The partition stage's changelog: a state rebuilt from a batch's records equals the folded one."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bench.reduce.partition_changelog import META_KEY, apply_records, entry_records, meta_value
from bench.reduce.partition_fold import PartitionState, fold

W = 1_000


def batches(n: int, seed: int = 3):
    rng = np.random.default_rng(seed)
    for b in range(n):
        size = 300
        keys = rng.choice([f"k{i}" for i in range(25)], size)
        times = rng.integers(b * W - W, b * W + 2 * W, size)  # some late, some ahead
        yield b, keys, rng.normal(size=size), times, max(0, (b - 1) * W)


def changelog_of(state: PartitionState, step) -> list[tuple[bytes, bytes | None]]:
    return [*entry_records(step.changed, step.removed), (META_KEY, meta_value(state))]


def test_the_changelog_of_every_batch_rebuilds_the_folded_state() -> None:
    state, log = PartitionState(), []
    for b, keys, values, times, watermark in batches(8):
        state, step = fold(state, b, keys, values, times, watermark, W)
        log += changelog_of(state, step)
    rebuilt = apply_records(PartitionState(), log)
    assert (rebuilt.batch_id, rebuilt.max_event_ms, rebuilt.late_total, rebuilt.last_late) == (
        state.batch_id, state.max_event_ms, state.late_total, state.last_late)  # fmt: skip
    assert state.late_total > 0, "no late record: the meta's late count is untested"
    pd.testing.assert_frame_equal(rebuilt.table.sort_index(), state.table.sort_index(), check_dtype=False)


def test_a_catch_up_from_a_saved_state_equals_a_rebuild_from_the_start() -> None:
    state, log, saved, saved_at = PartitionState(), [], None, 0
    for b, keys, values, times, watermark in batches(6, seed=9):
        state, step = fold(state, b, keys, values, times, watermark, W)
        log += changelog_of(state, step)
        if b == 2:
            saved, saved_at = state, len(log)
    caught_up = apply_records(saved, log[saved_at:])
    pd.testing.assert_frame_equal(caught_up.table.sort_index(), state.table.sort_index(), check_dtype=False)
    assert caught_up.batch_id == state.batch_id == 5


def test_a_record_that_is_not_the_changelogs_is_refused() -> None:
    with pytest.raises(ValueError, match="neither an entry nor the meta"):
        apply_records(PartitionState(), [(b"no-separator", b"x")])
    with pytest.raises(ValueError, match="meta record has no value"):
        apply_records(PartitionState(), [(META_KEY, None)])
