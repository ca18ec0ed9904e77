"""What routers shed that would have come to this worker: event-time spans, kept until no window
they overlap can still be written.

Why spans and not the control log's clock: a window whose records were routed under a keep
probability below 1 but *all* dropped holds only records kept for sure, so its own rows cannot
show the loss. The earlier rule guessed from control-record times which settings were in force
while the window's records were routed (window ± a margin); a router lagging its input by more
than the margin at a shed's onset or lift made rows claim ``exact`` with counts below the truth.
Now each router says what it actually dropped: with every commit, the markers it writes into a
routed partition carry the event-time spans (whole seconds, per input topic, with the lowest keep
probability) of the records it shed that routing would have sent there. The marker follows those
records' would-be positions in the same transaction, so when a worker's watermark passes a window
every shed record of it that could have been routed here before is known. A window row is exact
only if nothing overlapping its window was reported shed, here or at the worker the row's state
came from (the row carries that as ``shed_keep``, see the engine). Spans are not per key: a window
of one key is not exact if records of *another* key of the same worker were shed in that second.
That errs only toward "not exact".

Kept sorted by start, merged when they touch; dropped once ``last + window + horizon`` is behind the
watermark (no row overlapping them can be written any more).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from spark_jobs.reduce.worker_meta import ShedSpan


class ShedSpans:
    """Shed event-time spans of the job's input topics, as reported to one worker."""

    def __init__(self, saved: Iterable[ShedSpan] = ()) -> None:
        self.spans: list[list[float]] = sorted([float(s.first), float(s.last), float(s.keep)] for s in saved)

    def __bool__(self) -> bool:
        return bool(self.spans)

    def add(self, first: int, last: int, keep: float) -> None:
        self.spans.append([float(first), float(last), float(keep)])
        self.spans.sort()
        merged: list[list[float]] = []
        for span in self.spans:
            if merged and span[0] <= merged[-1][1] + 1:
                top = merged[-1]
                top[1] = max(top[1], span[1])
                top[2] = min(top[2], span[2])
            else:
                merged.append(list(span))
        self.spans = merged

    def lowest_keep(self, start: np.ndarray, end: np.ndarray) -> np.ndarray:
        """Per window ``[start, end)``: the lowest keep-probability of a span overlapping it (1.0:
        none)."""
        out = np.ones(np.asarray(start).size, dtype=np.float64)
        for first, last, keep in self.spans:
            hit = (np.asarray(start) <= last) & (np.asarray(end) > first)
            out = np.where(hit, np.minimum(out, keep), out)
        return out

    def prune(self, before: int) -> None:
        """Forget spans ending before ``before`` (no window overlapping them can be written)."""
        self.spans = [s for s in self.spans if s[1] >= before]

    def saved(self) -> list[ShedSpan]:
        return [ShedSpan(int(a), int(b), float(k)) for a, b, k in self.spans]
