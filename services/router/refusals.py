"""What a router does with a record it cannot route: a dead letter with its reason, never a crash.

Why apart from the loop: the loop's hot path only decides *that* a record is refused; how the
refusal is worded (reason, detail, the exception's class in a header) and counted is one concern
with one home, shared by the fast and the general decode paths (docs/router.md, "Bad input").
"""

from __future__ import annotations

import logging

from confluent_kafka import KafkaError, Message

from ballast.avro.wire import BodyError
from services.router.envelopes import PRODUCE_MARGIN, EnvelopeWriter
from services.router.errors import RouterError
from services.router.input_formats import RECORD_ERRORS, InputError

log = logging.getLogger("services.router")

# the errors that say why a record is dead-lettered (``reason``, ``detail``)
DEAD_LETTER_ERRORS = (*RECORD_ERRORS, BodyError)


class Refusals:
    """Dead letters of one router, counted per reason into the batch's ``reasons``."""

    def __init__(self, envelopes: EnvelopeWriter, router_id: str, max_future_ms: int) -> None:
        self.envelopes = envelopes
        self.router_id = router_id
        self.max_future_ms = max_future_ms

    def dead_letter(self, m: Message, exc: Exception, reasons: dict[str, int]) -> None:
        """``m`` to the dead-letter topic: a typed error (:data:`DEAD_LETTER_ERRORS`) carries its
        reason; any other exception raised while reading one record (RecursionError from a deeply
        nested JSON document, a bug in a parser) is ``malformed``. The exception's class goes into a
        header either way."""
        if isinstance(exc, DEAD_LETTER_ERRORS):
            reason, detail = exc.reason, exc.detail
        else:
            reason, detail = "malformed", f"{type(exc).__name__}: {exc}"
        self.envelopes.dead_letter(m, reason, detail, type(exc).__name__)
        reasons[reason] = reasons.get(reason, 0) + 1

    def future(self, m: Message, event_ms: int, limit_ms: int, reasons: dict[str, int]) -> None:
        """A record whose event time is further ahead of this router's clock than --max-future-ms:
        dead-lettered (``future``), so it moves no partition's event time (docs/router.md)."""
        ahead = event_ms - (limit_ms - self.max_future_ms)
        detail = (
            f"event_time {event_ms} is {ahead} ms ahead of router {self.router_id}'s clock "
            f"(more than --max-future-ms {self.max_future_ms})"
        )
        self.dead_letter(m, InputError("future", detail), reasons)


def consumer_error(m: Message) -> None:
    """An error the consumer handed back as a message: logged, or the end of the router if fatal."""
    err = m.error()
    if err.code() == KafkaError._PARTITION_EOF:
        return
    if err.fatal():
        raise RouterError(f"fatal consumer error: {err}")
    log.warning("consumer error: %s", err)


def record_limit(router_id: str, wanted: int, writable: int) -> int:
    """``--max-record-bytes`` (0: as large as the producer allows), lowered to what it can write."""
    if wanted > writable:
        log.warning(
            "router %s: max_record_bytes %d is more than the producer can write "
            "(message.max.bytes %d minus a %d-byte margin); using %d",
            router_id, wanted, writable + PRODUCE_MARGIN, PRODUCE_MARGIN, writable,
        )  # fmt: skip
    return min(wanted, writable) if wanted else writable
