"""The replay check of the e2e tests' dead letters can fail: a repeat without a replay's signature."""

from __future__ import annotations

import pytest

from ballast.kafka.dead_letters import DeadLetter
from tests.support.letter_replays import once_each


def late(offset: int, watermark: int, partition: int = 0) -> DeadLetter:
    return DeadLetter("late", f"event_time 1 < watermark {watermark}; counted", "routed", partition, offset)


def test_a_replayed_batch_is_counted_once() -> None:
    first = [late(o, 100) for o in range(5)] + [late(9, 200, 1)]
    letters = [*first, late(3, 100), late(4, 100), late(9, 200, 1)]
    assert once_each(letters, restarts=2) == first


def test_no_repeats_need_no_restart() -> None:
    letters = [late(o, 100) for o in range(3)]
    assert once_each(letters, restarts=0) == letters


@pytest.mark.parametrize(
    ("letters", "restarts", "says"),
    [
        ([late(1, 100), late(1, 100)], 0, "never restarted"),
        ([late(1, 100), late(1, 100), late(1, 100)], 1, "more than twice"),
        ([late(1, 100), late(1, 300)], 1, "different reasons or details"),
        ([late(1, 100), late(1, 100), late(7, 300), late(7, 300)], 1, "2 watermarks"),
    ],
)
def test_a_repeat_a_replay_does_not_explain_fails(letters, restarts, says) -> None:
    with pytest.raises(AssertionError, match=says):
        once_each(letters, restarts)
