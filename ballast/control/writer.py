"""The one fenced writer of the control log.

Why a transactional writer with a fixed ``transactional.id``: ``init_transactions`` fences any
older writer with the same id and completes its open transaction, so reading the last epoch
*after* it and writing ``last + 1`` cannot race another writer into a duplicate epoch. The id is
derived from the control topic (:func:`writer_transactional_id`), so every writer of one control
log (the controller, ``ballast control send``, ``ballast topics create``, the demo, tests) fences
every other. It folds the log with the history (:mod:`ballast.control.history`), so the snapshots
it appends carry it.

Why it signs (:mod:`ballast.control.signing`): with a ``signing_key`` (default: the file
``BALLAST_CONTROL_SIGNING_KEY_FILE`` names), every record it writes carries the key's signature and
a genesis it writes names the key, which makes the log signed for good. A writer of a signed log
without its key, or with another one, refuses before writing anything: readers would skip it all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ballast.avro.codec import AvroCodec
from ballast.control.genesis import Genesis, check_create, genesis_snapshot
from ballast.control.log import SNAPSHOT_EVERY, ControlLogReader
from ballast.control.signing import PUBLIC_KEY_HEADER, SigningKey, signing_key_from_env
from ballast.control.state import (
    CONTROL_SCHEMA,
    ControlLogError,
    ControlState,
    apply_event,
    initial_state,
    make_event,
    table_snapshot,
)
from ballast.kafka.configuration import KafkaConfig
from ballast.waiting import WaitTimeout, wait_until


def writer_transactional_id(control_topic: str) -> str:
    """The one transactional id of the writers of ``control_topic``."""
    return f"ballast-control-writer.{control_topic}"


class ControlLogWriter:
    """Appends events with dense epochs; a fixed ``transactional.id`` fences any second writer.

    ``initial`` is the state the caller expects before epoch 0 (its ``max_workers`` is checked
    against the routed partitions the log records); ``snapshot_every`` (0: never) makes
    :meth:`send` append a snapshot of the new state, in the same transaction, once that many
    epochs passed since the last one, so readers that start at the latest snapshot stay fast.
    """

    def __init__(
        self,
        kafka: KafkaConfig,
        topic: str,
        initial: ControlState | None = None,
        issuer: str = "ballast-control-cli",
        snapshot_every: int = SNAPSHOT_EVERY,
        signing_key: SigningKey | None = None,
    ) -> None:
        from confluent_kafka import Producer

        self.signing_key = signing_key if signing_key is not None else signing_key_from_env()
        self.kafka = kafka
        self.topic = topic
        self.initial = initial
        self.issuer = issuer
        self.snapshot_every = snapshot_every
        self.codec = AvroCodec(CONTROL_SCHEMA)
        self.producer = Producer(kafka.producer(**{"transactional.id": writer_transactional_id(topic)}))
        self.producer.init_transactions(30)
        self._reader: ControlLogReader | None = None
        self._written_epoch = 0

    def current_state(self, timeout: float = 30.0) -> ControlState:
        """The folded log, including this writer's own earlier sends.

        Right after ``commit_transaction`` returns, the commit markers may not be written yet, so
        the last stable offset can still hide our own event; wait until the reader has it.
        """
        if self._reader is None:  # with the history: the snapshots it appends carry it
            self._reader = ControlLogReader(self.kafka, self.topic, self.initial, history=True)
        reader = self._reader
        reader.read_to_end(timeout)
        check_signer(self.topic, reader, self.signing_key)

        def own_event_visible() -> bool:
            if reader.state.epoch >= self._written_epoch:
                return True
            reader.poll(timeout=0.2)
            return False

        try:
            wait_until(own_event_visible, timeout, f"own event {self._written_epoch} visible", interval=0)
        except WaitTimeout as exc:
            raise ControlLogError(str(exc)) from None
        return reader.state

    def send(self, etype: str, body: Mapping[str, Any], timeout: float = 30.0) -> dict[str, Any]:
        """Validate against the folded log, then write ``last epoch + 1`` in one transaction
        (followed by a snapshot at ``last epoch + 2`` when one is due)."""
        state = self.current_state(timeout)
        event = make_event(state.epoch + 1, etype, body, issuer=self.issuer)
        after = apply_event(state, event)  # refuse to write an event the readers would reject
        events = [event]
        assert self._reader is not None
        since = after.epoch - (self._reader.last_snapshot_epoch or 0)
        if not self._reader.history_snapshots and after.epoch >= self.snapshot_every:
            since = self.snapshot_every  # no snapshot has the history yet (an older writer's log): one now
        if etype != "TABLE_SNAPSHOT" and self.snapshot_every and since >= self.snapshot_every:
            snapshot = make_event(after.epoch + 1, *table_snapshot(after), issuer=self.issuer)
            apply_event(after, snapshot)
            events.append(snapshot)
        self._write(events, timeout)
        return event

    def _write(self, events: list[dict[str, Any]], timeout: float, genesis: bool = False) -> None:
        self.producer.begin_transaction()
        for event in events:
            value = self.codec.encode(event)
            key = str(event["epoch"]).encode()
            headers = signed(self.signing_key, self.topic, key, value, genesis=genesis)
            self.producer.produce(self.topic, value=value, key=key, headers=headers)
        self.producer.commit_transaction(timeout)
        self._written_epoch = events[-1]["epoch"]

    def write_genesis(
        self, routed_partitions: int, active_workers: int = 0, timeout: float = 30.0
    ) -> tuple[str, Genesis]:
        """Give the log its genesis, once: ``("written" | "rebased" | "exists", genesis)``.

        An empty log gets the genesis at epoch 0. A log with a genesis is left alone when the
        arguments agree with it (:class:`~ballast.control.genesis.GenesisConflictError`
        otherwise). A log written before the genesis existed is folded from offset 0 over the
        state the arguments describe and gets a snapshot of it at ``last + 1`` (a re-base).
        Runs under this writer's fence, so no other writer appends in between.
        """
        initial = initial_state(routed_partitions, active_workers)
        reader = ControlLogReader(self.kafka, self.topic, initial, require_genesis=False)
        try:
            recorded = reader.genesis(timeout)
            if recorded is not None:
                check_create(recorded, self.topic, routed_partitions, active_workers)
                return "exists", recorded
            reader.read_to_end(timeout)
            state = reader.state
            if state.started:
                status, event = "rebased", make_event(state.epoch + 1, *table_snapshot(state), self.issuer)
            else:
                kind = genesis_snapshot(routed_partitions, active_workers)
                status, event = "written", make_event(0, *kind, issuer=self.issuer)
            apply_event(state, event)
            self._write([event], timeout, genesis=True)
            try:
                wait_until(lambda: reader.genesis(timeout), timeout, f"the genesis of {self.topic} visible")
            except WaitTimeout as exc:
                raise ControlLogError(str(exc)) from None
        finally:
            reader.close()
        genesis = Genesis.of(event)
        assert genesis is not None
        return status, genesis

    def close(self) -> None:
        """Flush and close the producer and the reader: no client outlives the writer."""
        self.producer.flush(10)
        self.producer.close()
        if self._reader is not None:
            self._reader.close()


def signed(
    key: SigningKey | None, topic: str, record_key: bytes, value: bytes, *, genesis: bool = False
) -> list[tuple[str, bytes]] | None:
    """The headers of a control record: its signature, and on a genesis the key that signs the log."""
    if key is None:
        return None
    headers = key.headers(topic, record_key, value)
    if genesis:
        headers.append((PUBLIC_KEY_HEADER, key.public.raw))
    return headers


def check_signer(topic: str, reader: ControlLogReader, key: SigningKey | None) -> None:
    """Refuse to write a log with a key other than the one its genesis names (readers would skip
    every record), and to sign an unsigned log's events (its readers check nothing)."""
    signer = reader.signer
    if signer is None and key is None:
        return
    if signer is None:
        raise ControlLogError(
            f"control log {topic} is unsigned (its genesis names no key), but this writer has signing key "
            f"{key.public.id}: a log is signed from its genesis on, by `ballast topics create` with the key "
            f"(unset BALLAST_CONTROL_SIGNING_KEY_FILE to write this log; docs/security.md)"
        )
    if key is None:
        raise ControlLogError(
            f"control log {topic} is signed by key {signer.id}: give its writers the key's file "
            f"(BALLAST_CONTROL_SIGNING_KEY_FILE); unsigned events would be skipped by every reader"
        )
    if key.public != signer:
        raise ControlLogError(
            f"control log {topic} is signed by key {signer.id}, not this writer's {key.public.id}: "
            f"readers would skip every event it writes (docs/security.md)"
        )
