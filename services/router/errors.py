"""The router's one exception type, shared by the loop and its parts."""

from __future__ import annotations


class RouterError(RuntimeError):
    """A condition the router must not paper over (fatal Kafka error, broken control log, lost records)."""
