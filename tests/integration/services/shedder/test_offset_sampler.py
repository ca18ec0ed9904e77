"""What the sampler reads, against what the test wrote and against the AdminClient (the API it
replaced for committed offsets), on the session's broker.

The routers commit their offsets inside transactions. While such a commit is pending, the sampler
must answer at once with the last committed offset, as the AdminClient's ListConsumerGroupOffsets
(and kafka-lag-exporter) do by default; a consumer asking for stable offsets (``read_committed``)
would instead retry until its timeout and the sample would have no committed offsets at all. The log
end is the last stable offset: an open transaction's records are not counted until it commits.
"""

from __future__ import annotations

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

from ballast.kafka.clients import make_consumer, make_producer
from ballast.waiting import wait_until
from services.shedder.sampling import OffsetSampler

PARTITIONS = 2
RECORDS = 10  # per partition, before the transaction


def admin_committed(admin, group: str, topic: str) -> dict[tuple[str, int], int]:
    request = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(PARTITIONS)])]
    found = admin.list_consumer_group_offsets(request, request_timeout=30)[group].result(30)
    return {(tp.topic, tp.partition): tp.offset for tp in found.topic_partitions}


def test_committed_offsets_and_ends_around_an_open_router_transaction(
    kafka_config, admin, topic_factory, unique
):
    topic, group = topic_factory("sampled", partitions=PARTITIONS), unique("routers")
    plain = make_producer(kafka_config.with_client_id("sampler-test-plain"))
    for p in range(PARTITIONS):
        for _ in range(RECORDS):
            plain.produce(topic, value=b"x", partition=p)
    assert plain.flush(30) == 0
    member = make_consumer(kafka_config.with_client_id("sampler-test-member"), group)
    member.commit(offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 4)], asynchronous=False)
    sampler = OffsetSampler(kafka_config.with_client_id("sampler-test"), [topic], group)
    txn = make_producer(
        kafka_config.with_client_id("sampler-test-txn"), **{"transactional.id": unique("txn")}
    )
    try:
        first = sampler.sample()
        assert first.errors == ()
        assert first.committed == {(topic, 0): 3, (topic, 1): 4} == admin_committed(admin, group, topic)
        assert first.ends == {(topic, p): RECORDS for p in range(PARTITIONS)}
        assert first.log_starts == {(topic, p): 0 for p in range(PARTITIONS)}

        txn.init_transactions(30)
        txn.begin_transaction()
        for _ in range(5):
            txn.produce(topic, value=b"y", partition=0)
        txn.flush(30)
        pending = [TopicPartition(topic, 0, 7)]
        txn.send_offsets_to_transaction(pending, member.consumer_group_metadata(), 30)
        open_ = sampler.sample()  # the transaction holds records and an offset commit, not yet committed
        assert open_.errors == ()
        assert open_.committed == {(topic, 0): 3, (topic, 1): 4} == admin_committed(admin, group, topic)
        assert open_.ends == {(topic, p): RECORDS for p in range(PARTITIONS)}

        txn.commit_transaction(30)
        # the markers that make the commit visible are written after commit_transaction returns
        committed = {(topic, 0): 7, (topic, 1): 4}
        wait_until(lambda: admin_committed(admin, group, topic) == committed, 30, "the commit visible")
        ends = {(topic, 0): RECORDS + 6, (topic, 1): RECORDS}  # five records and the commit marker
        samples = []
        wait_until(lambda: samples.append(sampler.sample()) or samples[-1].ends == ends, 30,
                   f"log ends {ends}", describe=lambda: f"{samples[-1]}")  # fmt: skip
        assert samples[-1].errors == ()
        assert samples[-1].committed == committed
    finally:
        sampler.close()
        member.close()
