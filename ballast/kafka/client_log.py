"""librdkafka's own log, through Python logging: one logger, de-duplicated, quiet in one-shot programs.

Why here and not in every client: librdkafka writes its log straight to stderr unless a client is
given a ``logger``. Every client Ballast builds gets :data:`LIBRDKAFKA_LOGGER` (the rendering in
:mod:`ballast.kafka.configuration` adds it), so a service's log has one format and a client that
cannot reach its broker says so once a minute, not once per retry.
"""

from __future__ import annotations

import logging
import re


class _OncePerMinute(logging.Filter):
    """Drop a librdkafka line already seen in the last minute (numbers ignored when comparing).

    A client that cannot reach its broker repeats the same "Connection refused" line for every
    retry; the first one says all there is to say.
    """

    def __init__(self) -> None:
        super().__init__()
        self._seen: dict[str, float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = re.sub(r"\d+", "#", record.getMessage())
        last = self._seen.get(key)
        if last is not None and record.created - last < 60:
            return False
        if len(self._seen) > 1000:
            self._seen.clear()
        self._seen[key] = record.created
        return True


LIBRDKAFKA_LOGGER = logging.getLogger("ballast.librdkafka")
LIBRDKAFKA_LOGGER.setLevel(logging.WARNING)
LIBRDKAFKA_LOGGER.addFilter(_OncePerMinute())


def quiet_retried_warnings() -> None:
    """For one-shot programs (a CLI command, the demo): librdkafka's errors show, its warnings do not.

    A one-shot program that fails says so itself; librdkafka's warnings about what it retries by
    itself (a transaction coordinator still loading on a fresh broker, a refreshed leader) would
    only be noise there. Services keep WARNING: they run for days and their log is where such
    retries belong.
    """
    LIBRDKAFKA_LOGGER.setLevel(logging.ERROR)
