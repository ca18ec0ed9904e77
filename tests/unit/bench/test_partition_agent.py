"""The producer agent's fence and producer keeping, with a recording producer (no broker: the
transactions themselves are tested against Kafka in tests/integration/bench)."""

from __future__ import annotations

from typing import ClassVar

import pytest

from bench.reduce.partition_agent import Fenced, ProducerAgent

CONFIG = {"transactional.id": "job-stage-0", "bootstrap.servers": "unused:9092"}


class Recording:
    """A transactional producer that records what it is asked; ``fail_commit`` makes commits fail."""

    made: ClassVar[list[Recording]] = []

    def __init__(self, config: dict) -> None:
        self.config, self.calls, self.offset, self.fail_commit = config, [], 0, False
        Recording.made.append(self)

    def init_transactions(self, _timeout: float) -> None:
        self.calls.append("init")

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def produce(self, topic, value, key, partition=None, on_delivery=None) -> None:
        self.calls.append(("produce", topic, partition, key))
        msg = type("Msg", (), {"topic": lambda _s: topic, "offset": lambda _s, o=self.offset: o})()
        self.offset += 1
        on_delivery(None, msg)

    def poll(self, _timeout: float) -> None:
        pass

    def flush(self, _timeout: float) -> int:
        return 0

    def commit_transaction(self, _timeout: float) -> None:
        if self.fail_commit:
            raise RuntimeError("fenced by a newer producer")
        self.calls.append("commit")


@pytest.fixture
def agent() -> ProducerAgent:
    Recording.made.clear()
    return ProducerAgent(Recording)


def test_a_partitions_producer_is_opened_once_and_keeps_its_token(agent) -> None:
    token, first, init_ms = agent.open(CONFIG)
    again, second, held_ms = agent.open(CONFIG)
    assert len(Recording.made) == 1 and Recording.made[0].calls == ["init"]
    assert again == token and second == first + 1 and held_ms == 0.0 < init_ms + 1


def test_a_commit_writes_every_record_in_one_transaction_and_gives_the_changelogs_last_offset(agent) -> None:
    _token, gen, _ms = agent.open(CONFIG)
    last = agent.commit(
        "job-stage-0", gen, [("changelog", 0, [(b"a", b"1"), (b"b", None)]), ("out", None, [(b"w", b"v")])]
    )
    calls = Recording.made[0].calls
    assert calls == ["init", "begin", ("produce", "changelog", 0, b"a"), ("produce", "changelog", 0, b"b"),
                     ("produce", "out", None, b"w"), "commit"]  # fmt: skip
    assert last == 1, "the last offset must be the changelog's, not the output's"


def test_an_older_generation_is_refused_and_writes_nothing(agent) -> None:
    _t, zombie, _ms = agent.open(CONFIG)
    _t, newest, _ms = agent.open(CONFIG)
    with pytest.raises(Fenced):
        agent.commit("job-stage-0", zombie, [("changelog", 0, [(b"a", b"1")])])
    assert Recording.made[0].calls == ["init"]
    agent.commit("job-stage-0", newest, [("changelog", 0, [(b"a", b"1")])])


def test_a_failed_commit_drops_the_producer_and_the_next_open_makes_a_new_one(agent) -> None:
    token, gen, _ms = agent.open(CONFIG)
    Recording.made[0].fail_commit = True
    with pytest.raises(RuntimeError, match="fenced"):
        agent.commit("job-stage-0", gen, [("changelog", 0, [(b"a", b"1")])])
    with pytest.raises(Fenced):  # the same session cannot commit with the dropped producer
        agent.commit("job-stage-0", gen, [("changelog", 0, [(b"a", b"1")])])
    new_token, _gen, init_ms = agent.open(CONFIG)
    assert len(Recording.made) == 2 and new_token != token and init_ms > 0


def test_an_agent_folder_others_can_read_is_refused(tmp_path, monkeypatch) -> None:
    from bench.reduce.partition_agent_client import agent_paths

    folder = tmp_path / "agents"
    monkeypatch.setenv("BALLAST_STAGE_AGENT_DIR", str(folder))
    paths = agent_paths("broker:9092", "job")
    assert folder.stat().st_mode & 0o777 == 0o700 and paths.socket.parent == folder
    assert agent_paths("broker:9092", "other").socket != paths.socket, "one agent per job"
    folder.chmod(0o755)
    with pytest.raises(PermissionError, match="0700"):
        agent_paths("broker:9092", "job")
