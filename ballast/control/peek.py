"""A control event's epoch and type, read from the first bytes of its Avro body without decoding it.

Why: finding the latest snapshot scans the control log backwards, and most records it passes are
not snapshots; decoding each one (a 10,000-key ROUTING_UPDATE takes milliseconds) would make the
scan cost what the fold it saves costs. ``ControlEvent`` begins with ``epoch`` (long), ``issued_at``
(long), ``issuer`` (string) and ``type`` (enum) in every version (fields added later, such as
``request_id``, come after ``type``), so four varints say what a record is. Anything that does not
parse that way is reported as unknown (None): the caller decodes it and gets the codec's precise
error.
"""

from __future__ import annotations

from ballast.avro.codec import HEADER_LEN, MAGIC
from ballast.avro.wire import read_long
from ballast.control.state import CONTROL_TYPES


def peek(value: bytes | None) -> tuple[int, str] | None:
    """(epoch, type) of a single-object-encoded ControlEvent, or None when it cannot tell."""
    if value is None or len(value) <= HEADER_LEN or value[:2] != MAGIC:
        return None
    try:
        epoch, i = read_long(value, HEADER_LEN)
        _issued_at, i = read_long(value, i)
        length, i = read_long(value, i)
        index, _ = read_long(value, i + length)
    except (IndexError, ValueError):
        return None
    if length < 0 or not 0 <= index < len(CONTROL_TYPES):
        return None
    return epoch, CONTROL_TYPES[index]
