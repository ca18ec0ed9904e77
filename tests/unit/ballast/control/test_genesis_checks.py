"""The genesis checks, without a broker: what a router and ``topics create`` refuse, in one line."""

from __future__ import annotations

import pytest

from ballast.avro.codec import AvroCodec
from ballast.control import state as cs
from ballast.control.genesis import (
    Genesis,
    GenesisConflictError,
    GenesisMissingError,
    check_create,
    check_router,
    genesis_snapshot,
)
from ballast.control.peek import peek

GENESIS = Genesis(epoch=0, routed_partitions=8, active_workers=6)


def router(recorded=GENESIS, workers=8, routed=8, active=0) -> Genesis:
    return check_router(recorded, "p.control", "p", workers, "p.routed", routed, active)


def test_a_router_whose_flags_agree_with_the_genesis_starts():
    assert router() is GENESIS
    assert router(active=6) is GENESIS  # the same active workers, said twice


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        (
            {"workers": 6},
            "--workers 6 contradicts control log p.control: its genesis records 8 routed partitions",
        ),
        (
            {"workers": 8, "routed": 10},
            "p.routed has 10 partitions, but the genesis of p.control records 8: "
            "the routed topic changed under the control log",
        ),
        (
            {"active": 4},
            "--active-workers 4 contradicts control log p.control: its genesis records 6 active workers "
            "at epoch 0 (0 takes them from the log)",
        ),
    ],
)
def test_a_router_whose_flags_contradict_the_genesis_is_refused(kw, message):
    with pytest.raises(GenesisConflictError) as err:
        router(**kw)
    assert str(err.value) == message
    assert isinstance(err.value, cs.ControlLogError)  # the CLI's exit code 2


def test_a_log_without_genesis_names_the_command_that_writes_it():
    with pytest.raises(GenesisMissingError) as err:
        router(recorded=None, workers=4)
    assert str(err.value) == (
        "control log p.control has no genesis (the TABLE_SNAPSHOT that records epoch 0): "
        "run `ballast topics create --prefix p --workers 4` to write it"
    )


def test_create_accepts_the_same_flags_and_refuses_others():
    check_create(GENESIS, "p.control", 8, 0)  # 0: no opinion, the recorded value stays
    check_create(GENESIS, "p.control", 8, 6)
    with pytest.raises(GenesisConflictError, match="contradicts --active-workers 5"):
        check_create(GENESIS, "p.control", 8, 5)
    with pytest.raises(GenesisConflictError, match="contradicts the 4 routed partitions"):
        check_create(GENESIS, "p.control", 4, 0)


def test_the_genesis_event_folds_to_the_state_it_records():
    event = cs.make_event(0, *genesis_snapshot(8, 6), issued_at=1)
    assert Genesis.of(event) == GENESIS
    state = cs.apply_event(cs.initial_state(8), event)
    assert (state.epoch, state.num_workers, state.max_workers, len(state.table)) == (0, 6, 8, 0)
    assert Genesis.of(cs.make_event(0, *genesis_snapshot(8), issued_at=1)) == Genesis(0, 8, 8)
    assert Genesis.of(cs.make_event(3, *cs.scale(2), issued_at=1)) is None


def test_peek_reads_epoch_and_type_like_the_decoder():
    codec = AvroCodec(cs.CONTROL_SCHEMA)
    symbols = next(f for f in codec.schema.parsed["fields"] if f["name"] == "type")["type"]["symbols"]
    assert list(cs.CONTROL_TYPES) == symbols  # peek maps the enum index through CONTROL_TYPES
    migration = {"migration_id": "m", "phase": "DONE", "keys": ["a"], "from_workers": [1], "to_workers": [2]}
    kinds = [
        cs.routing_update({"k" * 200: 1}, ["j"]),
        genesis_snapshot(4),
        ("MIGRATION_STEP", migration),
        cs.scale(3),
        cs.shedding("t", 0.5),
    ]
    for epoch, kind in zip([0, 1, 63, 64, 10**9], kinds, strict=True):
        event = cs.make_event(epoch, *kind, issuer="i" * 100)
        data = codec.encode(event)
        decoded = codec.decode(data)
        assert peek(data) == (decoded["epoch"], decoded["type"]) == (epoch, kind[0])
    for garbage in (None, b"", b"\xc3\x01" + bytes(8), b"plain text", b"\xc3\x01" + bytes(8) + b"\xff" * 20):
        assert peek(garbage) is None


def test_peek_reads_every_released_version_like_the_decoder():
    """The snapshot scan peeks at records of every ControlEvent release the log may hold (the
    control log keeps everything): epoch, issued_at, issuer and type come first in each of them."""
    import json

    from ballast.avro.codec import SchemaStore, SchemaVersion
    from ballast.paths import SCHEMAS_DIR

    reader = AvroCodec(cs.CONTROL_SCHEMA)
    files = sorted((SCHEMAS_DIR / "previous").glob("control_event.v*.avsc"))
    assert len(files) >= 3
    for path in files:
        schema = SchemaVersion.from_json(json.loads(path.read_text()))
        written = AvroCodec(schema, SchemaStore([schema]))
        names = {f["name"] for f in schema.parsed["fields"]}
        for epoch, kind in ((3, cs.scale(2)), (70, ("SHEDDING", {"target": "t", "keep_probability": 0.5,
                                                                  "reason": "r"}))):  # fmt: skip
            event = {k: v for k, v in cs.make_event(epoch, *kind, issuer="old").items() if k in names}
            data = written.encode(event)
            assert (
                peek(data) == (reader.decode(data)["epoch"], reader.decode(data)["type"]) == (epoch, kind[0])
            )
