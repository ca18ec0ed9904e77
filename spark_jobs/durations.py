"""Durations as people write them: ``500ms``/``10s``/``2m``/``1h``, or Spark's ``10 seconds``.

Why one home: processor options use the compact form (``aggregate:size=10s``), the job's settings
Spark's interval form (``--watermark-delay "10 seconds"``, which Spark itself parses), and the
engine needs both in milliseconds; two parsers would disagree on a corner.
"""

from __future__ import annotations

import re

_UNITS_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000}
_COMPACT = re.compile(r"(\d+)(ms|s|m|h)")
_SPARK_UNITS_MS = {
    "millisecond": 1,
    "milliseconds": 1,
    "second": 1_000,
    "seconds": 1_000,
    "minute": 60_000,
    "minutes": 60_000,
    "hour": 3_600_000,
    "hours": 3_600_000,
    "day": 86_400_000,
    "days": 86_400_000,
}


def parse_duration(text: str) -> int:
    """Milliseconds of ``500ms`` / ``10s`` / ``2m`` / ``1h``; a bare number is refused (which unit?)."""
    match = _COMPACT.fullmatch(text.strip())
    if match is None:
        raise ValueError(
            f"{text!r} is not a duration: use a whole number and a unit, e.g. 500ms, 10s, 2m, 1h"
        )
    return int(match.group(1)) * _UNITS_MS[match.group(2)]


def interval_ms(text: str) -> int:
    """Milliseconds of a Spark interval (``10 seconds``, ``1 minute``, ``500 milliseconds``) or of the
    compact form (``10s``)."""
    parts = text.strip().lower().split()
    if len(parts) == 2 and parts[0].isdigit() and parts[1] in _SPARK_UNITS_MS:
        return int(parts[0]) * _SPARK_UNITS_MS[parts[1]]
    try:
        return parse_duration(text)
    except ValueError:
        raise ValueError(
            f"{text!r} is not an interval: write e.g. '10 seconds', '1 minute', '500 milliseconds' or 10s"
        ) from None
