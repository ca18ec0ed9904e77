"""A signed control log: what a stranger appends changes nothing (issue 28, item 3).

The reader over a scripted topic (no broker): forged events at the next epoch, a forged snapshot
at the end, a replayed genuine record, a genesis signed by another key. Each forged record is
skipped with its reason and the controller's own event at that epoch applies.
tests/integration/services/controller/test_control_forgery.py does it to a live pipeline.
"""

from __future__ import annotations

import os
import stat

import confluent_kafka
import pytest

from ballast.control import log as control_log
from ballast.control import state as cs
from ballast.control.genesis import genesis_snapshot
from ballast.control.log import ControlLogReader, SkippedRecord
from ballast.control.signing import (
    PUBLIC_KEY_HEADER,
    SIGNATURE_HEADER,
    SigningError,
    SigningKey,
    VerifyKey,
    pinned_key_from_env,
)
from ballast.control.writer import check_signer
from ballast.kafka.configuration import KafkaConfig
from tests.support.scripted_log import ScriptedLog


@pytest.fixture(scope="module")
def key(tmp_path_factory) -> SigningKey:
    return SigningKey.create(tmp_path_factory.mktemp("keys") / "control.pem")


@pytest.fixture(scope="module")
def stranger(tmp_path_factory) -> SigningKey:
    return SigningKey.create(tmp_path_factory.mktemp("keys") / "other.pem")


def ev(epoch: int, kind: tuple[str, dict], issuer: str = "controller") -> dict:
    return cs.make_event(epoch, *kind, issuer=issuer, issued_at=0)


def genuine(n: int) -> list[dict]:
    return [ev(0, genesis_snapshot(4))] + [ev(e, cs.routing_update({f"k{e}": e % 4})) for e in range(1, n)]


def reader_on(monkeypatch, scripted: ScriptedLog, **kw) -> tuple[ControlLogReader, list[SkippedRecord]]:
    monkeypatch.setattr(confluent_kafka, "Consumer", scripted)
    seen: list[SkippedRecord] = []
    reader = ControlLogReader(
        KafkaConfig.plaintext("scripted:1"), "c", cs.initial_state(4), on_skip=seen.append, **kw
    )
    return reader, seen


def test_a_signature_verifies_only_the_record_it_was_made_for(key, stranger):
    headers = key.headers("c", b"3", b"value")
    assert key.public.check("c", b"3", b"value", headers) is None
    assert key.public.check("c", b"3", b"valuE", headers) == "bad-signature"
    assert key.public.check("c", b"4", b"value", headers) == "bad-signature"  # another epoch's key
    assert key.public.check("other.control", b"3", b"value", headers) == "bad-signature"  # another log
    assert stranger.public.check("c", b"3", b"value", headers) == "bad-signature"
    assert key.public.check("c", b"3", b"value", None) == "unsigned"
    assert key.public.check("c", b"3", b"value", [(SIGNATURE_HEADER, b"short")]) == "bad-signature"


def test_forged_events_at_the_next_epoch_are_skipped_and_the_controllers_apply(monkeypatch, key, stranger):
    events = genuine(5)
    scale = ev(3, cs.scale(1), issuer="someone")  # well formed, at the epoch the controller writes next
    records = [*events[:3], scale, scale, scale, *events[3:]]
    codec_value = ScriptedLog([scale]).values[0]
    forged = {
        3: [],  # no signature at all
        4: [(SIGNATURE_HEADER, b"\x00" * 64)],  # a signature of nothing
        5: stranger.headers("c", b"5", codec_value),  # a valid signature, of another key
    }
    reader, seen = reader_on(monkeypatch, ScriptedLog(records, signed_by=key, headers=forged), start_offset=0)
    folded = reader.read_to_end(5)
    assert [e["epoch"] for e in folded] == [0, 1, 2, 3, 4]
    assert reader.state == cs.fold(cs.initial_state(4), events) and reader.state.num_workers == 4
    assert [(s.offset, s.reason) for s in seen] == [
        (3, "unsigned"),
        (4, "bad-signature"),
        (5, "bad-signature"),
    ]
    assert reader.signer == key.public


def test_a_forged_snapshot_at_the_end_is_no_place_to_start(monkeypatch, key):
    monkeypatch.setattr(control_log, "SCAN_CHUNK", 4)
    events = genuine(12)
    lie = cs.fold(cs.initial_state(4), events[:3])  # the routing of long ago, at the next epoch
    forged = ev(12, cs.table_snapshot(lie), issuer="someone")
    records = [*events, forged]
    reader, seen = reader_on(monkeypatch, ScriptedLog(records, signed_by=key, headers={12: []}))
    reader.read_to_end(5)
    assert reader.state == cs.fold(cs.initial_state(4), events)
    assert reader.start_offset == 0 and [(s.offset, s.reason) for s in seen] == [(12, "unsigned")]


def test_a_replayed_genuine_record_is_skipped_not_fatal(monkeypatch, key):
    """Its signature is genuine; its epoch was folded long ago (content no longer kept)."""
    monkeypatch.setattr(cs, "DIGEST_WINDOW", 3)
    events = genuine(10)
    scripted = ScriptedLog(events, signed_by=key)
    replay_value, replay_headers = scripted.values[1], scripted.headers[1]
    scripted.values.append(replay_value)
    # a byte-for-byte copy needs its original key (the epoch) to verify; the forger copies that too
    scripted.headers.append(replay_headers)
    scripted.keys = {len(scripted.values) - 1: b"1"}
    scripted.stall_at = len(scripted.values)
    reader, seen = reader_on(monkeypatch, scripted, start_offset=0)
    reader.read_to_end(5)
    assert reader.state == cs.fold(cs.initial_state(4), events)
    assert [(s.offset, s.reason) for s in seen] == [(10, "duplicate-epoch")]


def test_a_conflicting_duplicate_is_skipped_and_the_first_stands(monkeypatch):
    """Unsigned log: the first event at an epoch is the log's for every reader; stopping would hand
    the pipeline to whoever appends one."""
    events = genuine(5)
    records = [*events[:4], ev(3, cs.scale(2)), events[4]]
    reader, seen = reader_on(monkeypatch, ScriptedLog(records), start_offset=0)
    reader.read_to_end(5)
    assert reader.state == cs.fold(cs.initial_state(4), events)
    assert [(s.offset, s.reason) for s in seen] == [(4, "duplicate-epoch")] and reader.signer is None


def test_a_pinned_key_refuses_a_log_signed_by_another_or_unsigned(monkeypatch, key, stranger):
    for scripted, says in (
        (ScriptedLog(genuine(3), signed_by=stranger), f"names key {stranger.public.id}"),
        (ScriptedLog(genuine(3)), "names no key"),
    ):
        reader, _ = reader_on(monkeypatch, scripted, public_key=key.public)
        with pytest.raises(cs.ControlLogError, match=says):
            reader.read_to_end(5)
    reader, _ = reader_on(monkeypatch, ScriptedLog(genuine(3), signed_by=key), public_key=key.public)
    assert reader.read_to_end(5)[-1]["epoch"] == 2
    monkeypatch.setenv("BALLAST_CONTROL_PUBLIC_KEY", key.public.text())
    assert pinned_key_from_env() == key.public


def test_a_genesis_not_signed_by_the_key_it_names_is_refused(monkeypatch, key, stranger):
    scripted = ScriptedLog(genuine(3), signed_by=key)
    scripted.headers[0] = [
        *stranger.headers("c", b"0", scripted.values[0]),
        (PUBLIC_KEY_HEADER, key.public.raw),
    ]
    reader, _ = reader_on(monkeypatch, scripted)
    with pytest.raises(cs.ControlLogError, match="not signed by the key it names"):
        reader.read_to_end(5)
    scripted.headers[0] = [(PUBLIC_KEY_HEADER, b"not a key")]
    reader, _ = reader_on(monkeypatch, scripted)
    with pytest.raises(cs.ControlLogError, match="names no key"):
        reader.read_to_end(5)


def test_a_writer_refuses_a_log_it_cannot_sign_as_its_readers_expect(monkeypatch, key, stranger):
    def reader(scripted: ScriptedLog) -> ControlLogReader:
        r, _ = reader_on(monkeypatch, scripted)
        r.read_to_end(5)
        return r

    signed, unsigned = reader(ScriptedLog(genuine(3), signed_by=key)), reader(ScriptedLog(genuine(3)))
    check_signer("c", signed, key)
    check_signer("c", unsigned, None)
    with pytest.raises(cs.ControlLogError, match="give its writers the key"):
        check_signer("c", signed, None)
    with pytest.raises(cs.ControlLogError, match=f"not this writer's {stranger.public.id}"):
        check_signer("c", signed, stranger)
    with pytest.raises(cs.ControlLogError, match="is unsigned"):
        check_signer("c", unsigned, key)


def test_the_key_file_is_private_never_replaced_and_never_printed(tmp_path):
    path = tmp_path / "k.pem"
    created = SigningKey.create(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert SigningKey.load(path).public == created.public
    assert SigningKey.load_or_create(path)[1] is False
    with pytest.raises(SigningError, match="never replaced"):
        SigningKey.create(path)
    pem = path.read_text()
    assert repr(created) == f"SigningKey(id={created.public.id})" and pem.split("\n")[1] not in repr(created)
    (tmp_path / "bad.pem").write_text("nope")
    with pytest.raises(SigningError, match="not a PEM private key"):
        SigningKey.load(tmp_path / "bad.pem")
    with pytest.raises(SigningError, match="cannot read"):
        SigningKey.load(tmp_path / "missing.pem")
    assert VerifyKey.parse(created.public.text()) == created.public
    with pytest.raises(SigningError):
        VerifyKey.parse("c2hvcnQ=")


def test_keygen_writes_a_private_key_and_prints_only_what_readers_may_pin(tmp_path, capsys):
    from ballast.cli.main import main

    path = tmp_path / "control.pem"
    assert main(["control", "keygen", str(path)]) == 0
    printed = capsys.readouterr().out
    key = SigningKey.load(path)
    assert f"BALLAST_CONTROL_PUBLIC_KEY={key.public.text()}" in printed and key.public.id in printed
    assert "PRIVATE" not in printed and path.read_text().split("\n")[1] not in printed
    assert main(["control", "keygen", str(path)]) == 1  # never replaced
    assert SigningKey.load(path).public == key.public
