"""The controller's pure core: the next control event from the log's state and a request, or why not.

Why pure: what the controller appends (and refuses) is the whole of its authority over the pipeline,
and it must be the same on every replay (a request consumed, the transaction aborted, the request
consumed again; a controller killed and restarted on the same log). So :class:`Sequencer` decides
from nothing but the folded log, the ids of the requests the log already answers and the request;
the transport (:mod:`services.controller.transport`) only moves bytes and transactions.

Decisions:

* **Dense epochs.** An accepted request becomes event ``state.epoch + 1``; the sequencer folds it at
  once (the same fold every reader runs), so a request that the fold would refuse is refused here,
  with its reason, before anything is written.
* **Exactly once per request id.** The event carries the request's id; a resend whose id the log
  already holds is answered with the first answer (``duplicate``), not applied again. The ids of the
  last :attr:`RequestLimits.remembered` events are kept (older resends are rare, and the memory must
  be bounded: a resend older than that is treated as new, and documented so).
* **Refusals are answers, not errors.** Each has a stable reason word (:data:`REFUSALS`) and a detail
  for people; a refused request changes nothing, and a malformed one never stops the controller.
  A refusal is not remembered: only the log's events are, so the same id sent again is judged anew
  (the shedder sends a refused decision again under its id; an id is still applied at most once).
* **Expiry on one clock.** A request is ``expired`` when its ``waited_ms`` (how long it sat in the
  requests topic, measured on the broker's clock by the service: :mod:`services.controller.request_age`)
  exceeds the time to live; the sender's ``issued_at`` is only information. An unknown wait never
  expires.
* **Compare-and-set.** ``expected_epoch`` lets a sender say "only if the log is still where I read
  it" (a planner outside the controller, a careful operator).
* **Snapshots** every ``snapshot_every`` epochs keep readers' start-up bounded, as the old writer did.
* **A shedding request without a seed keeps the seed in force** for its target (its own setting's,
  else ``*``'s, else 0): the routers keep a record iff its draw under the seed is below the
  keep-probability (:mod:`ballast.routing.shedding_sample`), so the shedder's steps down and up
  keep nested samples. A request that names a seed starts another sample.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ballast.avro.codec import AvroCodec, CodecError
from ballast.control.state import (
    ControlLogError,
    ControlState,
    StateBuilder,
    make_event,
    table_snapshot,
)
from ballast.routing.table import InvalidKeyError, check_key

KINDS = ("ROUTING_UPDATE", "SCALE", "SHEDDING", "REBALANCE")
REQUEST_RECORD = {
    "ROUTING_UPDATE": "io.ballast.RoutingUpdateRequest",
    "SCALE": "io.ballast.ScaleRequest",
    "SHEDDING": "io.ballast.SheddingRequest",
    "REBALANCE": "io.ballast.RebalanceRequest",
}
REFUSALS = {
    "malformed": "not a ControlRequest (bad bytes, unknown schema)",
    "missing-request-id": "the request has no id to answer to",
    "unknown-kind": "a kind the controller does not order",
    "kind-mismatch": "the kind names another record than the payload holds",
    "too-large": "more keys or bytes than one request may carry",
    "stale-epoch": "the log is no longer at the expected epoch",
    "empty-update": "a routing update that assigns and unassigns nothing",
    "invalid-key": "a key that cannot be routed (empty, too long, not UTF-8)",
    "assign-and-unassign": "a key both assigned and handed back in one update",
    "worker-out-of-range": "a worker outside 0 .. hashed workers - 1",
    "workers-out-of-range": "a worker count below 1 or above the routed partitions",
    "scale-leaves-pins": "a SCALE below a worker that table entries still use",
    "keep-probability-out-of-range": "a keep-probability outside (0, 1]",
    "empty-target": "a shedding setting without a target",
    "migration-in-flight": "it touches keys (or all keys) a paced migration is moving",
    "no-load": "a plan was asked for before any router published statistics",
    "expired": "it waited in the requests topic longer than its time to live (its sender gave up)",
    "invalid": "the log's fold refuses it",
}


@dataclass(frozen=True)
class RequestLimits:
    max_keys: int = 100_000  # keys one routing update may name (assign + unassign)
    max_bytes: int = 4 * 1024 * 1024  # encoded request size
    remembered: int = 100_000  # request ids of the latest events kept for answering resends


@dataclass(frozen=True)
class Request:
    """A decoded ControlRequest (``body``: its payload record as a dict)."""

    request_id: str
    issuer: str
    kind: str
    body: Mapping[str, Any]
    expected_epoch: int | None = None
    record: str = ""  # the payload's record name
    size: int = 0  # encoded bytes
    issued_at: int = 0  # ms, the sender's clock: information only (it decides nothing)
    waited_ms: int | None = None  # in the requests topic, on the broker's clock; None: unknown


@dataclass(frozen=True)
class Answer:
    """What to tell the sender, and the event to append when accepted (None: nothing to write)."""

    request_id: str
    accepted: bool
    epoch: int
    reason: str = ""
    detail: str = ""
    duplicate: bool = False
    event: dict[str, Any] | None = None

    def response(self, controller: str, now_ms: int) -> dict[str, Any]:
        """The ControlResponse record (codec dict)."""
        return {
            "request_id": self.request_id,
            "accepted": self.accepted,
            "epoch": self.epoch,
            "reason": self.reason,
            "detail": self.detail,
            "duplicate": self.duplicate,
            "controller": controller,
            "answered_at": now_ms,
        }


def refuse(request_id: str, epoch: int, reason: str, detail: str = "") -> Answer:
    assert reason in REFUSALS, reason
    return Answer(request_id, False, epoch, reason, detail or REFUSALS[reason])


_REQUESTS: AvroCodec | None = None


def decode_request(value: bytes | None, key: bytes | None, epoch: int) -> Request | Answer:
    """The request in a record of the requests topic, or the refusal to send back.

    A record that does not decode is answered under its Kafka key (senders key requests by id),
    so its sender learns why instead of waiting for a time-out."""
    global _REQUESTS
    if _REQUESTS is None:
        _REQUESTS = AvroCodec("io.ballast.ControlRequest")
    fallback = key.decode("utf-8", "replace") if key else ""
    try:
        raw = _REQUESTS.decode(value)
    except CodecError as exc:
        return refuse(fallback, epoch, "malformed", str(exc)[:500])
    record, body = raw["payload"]
    request_id = str(raw["request_id"]) or fallback
    if not request_id:
        return refuse("", epoch, "missing-request-id")
    return Request(
        request_id,
        str(raw["issuer"]),
        str(raw["kind"]),
        dict(body),
        raw.get("expected_epoch"),
        record,
        len(value or b""),
        int(raw["issued_at"]),
    )


@dataclass
class Sequencer:
    """The log's state and the ids it answers; :meth:`answer` orders or refuses one request.

    ``in_flight``: the keys a paced migration is moving (set by the controller's loop); ``all`` in
    it means a change of every key (a SCALE) is under way.
    """

    state: ControlState
    issuer: str
    limits: RequestLimits = field(default_factory=RequestLimits)
    snapshot_every: int = 1000
    request_ttl_ms: int = 0  # 0: requests never expire
    in_flight: set[str] = field(default_factory=set)
    answered: OrderedDict[str, int] = field(default_factory=OrderedDict)
    since_snapshot: int = 0

    def __post_init__(self) -> None:
        self._builder = StateBuilder(self.state)

    # --- the log as it is -----------------------------------------------------------------------

    def remember(self, events: Iterable[Mapping[str, Any]]) -> None:
        """Events already in the log (folded by the caller): their request ids answer resends."""
        for e in events:
            rid = str(e.get("request_id") or "")
            if rid:
                self._remember(rid, int(e["epoch"]))
            if e.get("type") == "TABLE_SNAPSHOT":
                self.since_snapshot = 0
            else:
                self.since_snapshot += 1

    def _remember(self, request_id: str, epoch: int) -> None:
        self.answered[request_id] = epoch
        while len(self.answered) > self.limits.remembered:
            self.answered.popitem(last=False)

    # --- deciding ---------------------------------------------------------------------------------

    def answer(self, request: Request, now_ms: int) -> Answer:
        """Accept (the event appended to the state) or refuse ``request``."""
        epoch = self.state.epoch
        rid = request.request_id
        first = self.answered.get(rid)
        if first is not None:
            return Answer(rid, True, first, duplicate=True, detail=f"answered before: epoch {first}")
        refusal = self.check(request)
        waited = request.waited_ms
        if refusal is None and self.request_ttl_ms and waited is not None and waited > self.request_ttl_ms:
            refusal = (
                "expired",
                f"waited {waited} ms in the requests topic (broker's clock); time to live "
                f"{self.request_ttl_ms} ms",
            )
        if refusal is not None:
            return refuse(rid, epoch, *refusal)
        if request.kind == "REBALANCE":
            raise ValueError("a REBALANCE request is the loop's to answer (it plans), not an event")
        etype, body = self._event_body(request)
        event = make_event(epoch + 1, etype, body, issuer=self.issuer, issued_at=now_ms, request_id=rid)
        try:
            self._append(event)
        except ControlLogError as exc:
            return refuse(rid, epoch, "invalid", str(exc))
        return Answer(rid, True, epoch + 1, event=event)

    def own(self, etype: str, body: Mapping[str, Any], now_ms: int) -> dict[str, Any]:
        """An event of the controller's own (a migration step, a snapshot), appended to the state.
        Raises :class:`ControlLogError` when the fold refuses it: the controller's own plan must
        never be invalid."""
        event = make_event(self.state.epoch + 1, etype, body, issuer=self.issuer, issued_at=now_ms)
        self._append(event)
        return event

    def snapshot_due(self) -> bool:
        return self.since_snapshot >= self.snapshot_every

    def snapshot(self, now_ms: int) -> dict[str, Any]:
        """A TABLE_SNAPSHOT of the state (the next epoch), so a reader starts near the log's end."""
        return self.own(*table_snapshot(self.state), now_ms)

    def _append(self, event: dict[str, Any]) -> None:
        builder = StateBuilder(self.state)  # a refused event leaves self.state untouched
        builder.apply(event)
        self.state = builder.state()
        self._builder = builder
        if event.get("request_id"):
            self._remember(event["request_id"], int(event["epoch"]))
        self.since_snapshot = 0 if event["type"] == "TABLE_SNAPSHOT" else self.since_snapshot + 1

    # --- checks -------------------------------------------------------------------------------------

    def check(self, r: Request) -> tuple[str, str] | None:
        """The first refusal that applies (reason, detail), or None."""
        if r.kind not in KINDS:
            return "unknown-kind", f"kind {r.kind!r}; the controller orders {', '.join(KINDS)}"
        if REQUEST_RECORD[r.kind] != r.record:
            return "kind-mismatch", f"kind {r.kind} with a {r.record.rsplit('.', 1)[-1]} payload"
        if r.size > self.limits.max_bytes:
            return "too-large", f"{r.size} bytes; at most {self.limits.max_bytes}"
        if r.expected_epoch is not None and r.expected_epoch != self.state.epoch:
            return "stale-epoch", f"expected epoch {r.expected_epoch}, the log is at {self.state.epoch}"
        if r.kind == "ROUTING_UPDATE":
            return self._check_update(r.body)
        if r.kind == "SCALE":
            return self._check_scale(r.body)
        if r.kind == "SHEDDING":
            p = float(r.body.get("keep_probability", -1.0))
            if not str(r.body.get("target", "")):
                return "empty-target", ""
            if not 0.0 < p <= 1.0:
                return "keep-probability-out-of-range", f"keep_probability {p}"
        return None

    def _check_update(self, body: Mapping[str, Any]) -> tuple[str, str] | None:
        assign = dict(body.get("assign", {}))
        unassign = list(body.get("unassign", []))
        if not assign and not unassign:
            return "empty-update", ""
        if len(assign) + len(unassign) > self.limits.max_keys:
            return "too-large", f"{len(assign) + len(unassign)} keys; at most {self.limits.max_keys}"
        for key in [*assign, *unassign]:
            try:
                check_key(str(key).encode("utf-8"))
            except (InvalidKeyError, UnicodeEncodeError) as exc:
                return "invalid-key", f"key {str(key)[:80]!r}: {exc}"
        both = sorted(set(assign) & set(unassign))
        if both:
            return "assign-and-unassign", f"keys {both[:5]}"
        n = self.state.num_workers
        bad = {k: w for k, w in assign.items() if not 0 <= int(w) < n}
        if bad:
            first = next(iter(bad))
            return "worker-out-of-range", f"key {first!r} -> worker {bad[first]}; workers are 0..{n - 1}"
        moving = (set(assign) | set(unassign)) & self.in_flight
        if moving or "all" in self.in_flight:
            return "migration-in-flight", f"keys {sorted(moving)[:5] or 'all'} are being moved"
        return None

    def _check_scale(self, body: Mapping[str, Any]) -> tuple[str, str] | None:
        n = int(body.get("num_workers", 0))
        most = self.state.max_workers
        if n < 1 or (most is not None and n > most):
            return "workers-out-of-range", f"{n} hashed workers; 1..{most} routed partitions"
        high = {k.decode(): w for k, w in self.state.table.items() if w >= n}
        if high:
            first = next(iter(high))
            return (
                "scale-leaves-pins",
                f"key {first!r} is pinned to worker {high[first]} (hand it back first)",
            )
        if self.in_flight:
            return "migration-in-flight", "a paced migration is under way"
        return None

    def _event_body(self, r: Request) -> tuple[str, dict[str, Any]]:
        if r.kind == "ROUTING_UPDATE":
            return "ROUTING_UPDATE", {
                "assign": {str(k): int(w) for k, w in r.body.get("assign", {}).items()},
                "unassign": [str(k) for k in r.body.get("unassign", [])],
                "reason": str(r.body.get("reason", "")),
                "migration_id": "",
            }
        if r.kind == "SCALE":
            return "SCALE", {
                "num_workers": int(r.body["num_workers"]),
                "reason": str(r.body.get("reason", "")),
            }
        target = str(r.body["target"])
        seed = r.body.get("seed")
        return "SHEDDING", {
            "target": target,
            "keep_probability": float(r.body["keep_probability"]),
            "reason": str(r.body.get("reason", "")),
            # no seed asked for: the one in force for the target, so a step of the keep-probability
            # keeps a subset (lower) or a superset (higher) of the records it kept before
            "seed": self.state.seed_for(target) if seed is None else int(seed),
        }
