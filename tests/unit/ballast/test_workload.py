"""The flush that closes a finite input's last windows."""

from __future__ import annotations

import pytest

from ballast.workload import closing_flush, flush_event

pytestmark = pytest.mark.unit


def test_the_closing_flush_raises_the_watermark_past_the_last_window_and_not_much_further() -> None:
    end, ahead = closing_flush(25_999, 10_000, 5_000)
    assert end == 30_000  # the window [20 s, 30 s) holds the last event
    watermark = flush_event(25_999, ahead_ms=ahead)["event_time"] - 5_000
    assert end <= watermark <= end + 10_000
    assert closing_flush(30_000, 10_000, 0)[0] == 40_000  # an event on a boundary opens the next window
