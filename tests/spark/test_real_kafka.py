"""What only a real Apache Kafka shows, end to end through Spark with the synchronized_kafka
source (a leader's commit log gating every partition, as in tests/spark/test_source.py):
transactions aborted between committed ones under read_committed, partitions added to a live
topic, records deleted under the query (DeleteRecords) and a compacted topic whose cleaner has
left offset gaps. The data comes from librdkafka (confluent-kafka), compressed and batched, as
production producers send it.

The other test brokers lack what these tests exercise (each test's marker names the gap).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from confluent_kafka import Producer
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewPartitions, NewTopic

from synclib.kafka.admin import describe_topics
from tests.librdkafka import Produced, Record, produce_burst, producer, transactional_producer
from tests.spark.test_source import QUERY_TIMEOUT_S, World, offsets
from tests.support import high_watermarks, wait_until

NO_TRANSACTIONS = ("no read_committed isolation: Tansu 0.6 keeps no aborted-transaction index and answers "
                   "ListOffsets(read_committed) with 0 while a transaction is open; librdkafka's mock cluster "
                   "writes control batches with CRC 0 and returns aborted and open transactions' records")
NO_CREATE_PARTITIONS = ("no CreatePartitions: Tansu 0.6 does not advertise the API (kafka-python: "
                        "IncompatibleBrokerVersion), nor does librdkafka's mock cluster")
NO_DELETE_RECORDS = ("no DeleteRecords: Tansu 0.6 closes the connection on the request, librdkafka's mock "
                     "cluster does not implement it")
NO_COMPACTION = ("no log compaction: Tansu 0.6 accepts cleanup.policy=compact but runs no log cleaner, "
                 "librdkafka's mock cluster has no topic configs")
COMPACTION_TIMEOUT_S = 90.0


@pytest.fixture
def kafka_admin(bootstrap_servers: str) -> Iterator[KafkaAdminClient]:
    client = KafkaAdminClient(bootstrap_servers=bootstrap_servers, client_id="synclib-test-real-kafka")
    yield client
    client.close()


@pytest.fixture
def world(spark, producer, bootstrap_servers, new_topic, tmp_path) -> Iterator[World]:
    w = World(spark, producer, bootstrap_servers, new_topic("events", 2), new_topic("commit-log"), tmp_path)
    yield w
    if w.query is not None:
        w.query.stop()


def values(tag: str, count: int) -> list[Record]:
    return [Record(f"{tag}-{i}".encode(), f"{tag}-{i}".encode(), [("tag", tag.encode())]) for i in range(count)]


def compressed_producer(bootstrap: str, **config: Any) -> Producer:
    """As production producers send: batched (linger) and compressed. It never creates a topic:
    its metadata refreshes would bring back a topic the test deletes (Kafka's auto.create.topics.enable)."""
    return producer(bootstrap, compression_type="zstd", linger_ms=20, batch_num_messages=500,
                    allow_auto_create_topics=False, **config)


def rows(world: World, where: str = "true") -> list[tuple[int, int, str]]:
    world.drain()
    found = world.spark.sql(f"select partition, offset, cast(value as string) as value from {world.name} "
                            f"where {where}").collect()
    return sorted((r.partition, r.offset, r.value) for r in found)


def end_offsets(world: World) -> dict[int, int]:
    """The end offsets of the query's last micro-batch."""
    assert world.query is not None
    progress = world.query.lastProgress
    if progress is None:
        return {}
    return {int(p): o for p, o in json.loads(progress.sources[0].endOffset).get(world.events, {}).items()}


def failure_of(world: World) -> str:
    """The message the query failed with (it must fail within QUERY_TIMEOUT_S)."""
    assert world.query is not None
    with pytest.raises(Exception) as failure:
        world.query.awaitTermination(QUERY_TIMEOUT_S)
        raise AssertionError("the query did not fail")
    return str(failure.value)


# --- transactions -----------------------------------------------------------------------------

def transaction(kafka: Producer, topic: str, per_partition: dict[int, Sequence[Record]], *,
                commit: bool | None) -> dict[int, list[Produced]]:
    """One transaction over several partitions, committed, aborted, or left open (None)."""
    kafka.begin_transaction()
    produced = {partition: produce_burst(kafka, topic, partition, records)
                for partition, records in per_partition.items()}
    if commit is True:
        kafka.commit_transaction(30)
    elif commit is False:
        kafka.abort_transaction(30)
    return produced


@pytest.mark.requires_kafka(NO_TRANSACTIONS)
def test_read_committed_outputs_no_aborted_record_and_waits_for_open_transactions(world, tmp_path):
    kafka = transactional_producer(world.bootstrap)
    committed: list[tuple[int, int, str]] = []
    for round_ in range(3):  # committed and aborted transactions interleaved on both partitions
        for commit in (True, False):
            tag = f"{'committed' if commit else 'aborted'}-{round_}"
            produced = transaction(kafka, world.events, {0: values(f"{tag}-p0", 40), 1: values(f"{tag}-p1", 25)},
                                   commit=commit)
            if commit:
                committed += [(p, r.offset, (r.value or b"").decode()) for p, rs in produced.items() for r in rs]
    open_ = transaction(kafka, world.events, {0: values("open-p0", 10), 1: values("open-p1", 5)}, commit=None)
    log_end = high_watermarks(world.bootstrap, world.events, [0, 1])
    for partition, end in log_end.items():  # the leader has committed everything, past the open transaction
        world.commit(partition, end)

    world.start(**{"kafka.isolation.level": "read_committed"})
    wait_until(lambda: rows(world) == sorted(committed), QUERY_TIMEOUT_S, "the committed transactions' records")
    stable = {p: records[0].offset for p, records in open_.items()}  # the last stable offsets
    for partition in (0, 1):
        assert world.partition_status(partition)["high_watermark"] == stable[partition]
    assert end_offsets(world) == stable  # bounded by the open transaction, not the leader's commit

    kafka.abort_transaction(30)  # its marker takes the offset after its records
    aborted_end = high_watermarks(world.bootstrap, world.events, [0, 1])
    assert aborted_end == {p: records[-1].offset + 2 for p, records in open_.items()}
    for partition, end in aborted_end.items():
        world.commit(partition, end)
    # The batch over records that are all aborted, ending in the abort marker, completes.
    wait_until(lambda: (world.drain(), end_offsets(world))[1] == aborted_end, QUERY_TIMEOUT_S,
               "the batch over the aborted transaction")
    assert world.query is not None and world.query.exception() is None

    last = transaction(kafka, world.events, {0: values("last-p0", 7), 1: values("last-p1", 3)}, commit=None)
    world.drain()
    assert rows(world) == sorted(committed)
    kafka.commit_transaction(30)
    committed += [(p, r.offset, (r.value or b"").decode()) for p, rs in last.items() for r in rs]
    final_end = high_watermarks(world.bootstrap, world.events, [0, 1], "read_committed")
    for partition, end in final_end.items():
        world.commit(partition, end)
    wait_until(lambda: rows(world) == sorted(committed), QUERY_TIMEOUT_S, "the last committed transaction")
    assert not rows(world, "cast(value as string) like 'aborted%' or cast(value as string) like 'open%'")
    world.query.stop()

    # The whole log again, with Trigger.AvailableNow from a fresh checkpoint: it completes at the
    # log's end (ranges ending in commit and abort markers) with exactly the committed records.
    again = World(world.spark, world.producer, world.bootstrap, world.events, world.log, tmp_path / "again")
    (tmp_path / "again").mkdir()
    query = again.start(trigger={"availableNow": True}, **{"kafka.isolation.level": "read_committed"})
    assert query.awaitTermination(QUERY_TIMEOUT_S)
    assert rows(again) == sorted(committed)
    assert end_offsets(again) == final_end


# --- partitions added to a live topic ---------------------------------------------------------

@pytest.mark.requires_kafka(NO_CREATE_PARTITIONS)
def test_partitions_added_to_a_live_topic_are_forwarded_from_their_first_offset(world, kafka_admin):
    first = compressed_producer(world.bootstrap)
    for partition in (0, 1):
        produce_burst(first, world.events, partition, values(f"p{partition}", 6))
        world.commit(partition, 6)
    world.start()
    world.wait_released(offsets(0, 0, 6) + offsets(1, 0, 6))

    kafka_admin.create_partitions({world.events: NewPartitions(4)})
    wait_until(lambda: describe_topics(kafka_admin, [world.events])[world.events][1] == (0, 1, 2, 3),
               what="the new partitions")
    kafka = compressed_producer(world.bootstrap)  # fresh metadata: it knows the new partitions
    produce_burst(kafka, world.events, 2, values("p2", 9))
    produce_burst(kafka, world.events, 3, values("p3", 4))

    def planned() -> set[int]:
        world.drain()
        return {p["partition"] for p in world.status()["partitions"] if p["topic"] == world.events}

    wait_until(lambda: planned() == {0, 1, 2, 3}, QUERY_TIMEOUT_S, "the planner to see partitions 2 and 3")
    assert world.released() == offsets(0, 0, 6) + offsets(1, 0, 6)  # gated: the leader has not committed them
    assert world.partition_status(2)["state"] == "UNKNOWN"
    assert world.partition_status(2)["follower_offset"] == 0

    world.commit(2, 5)
    world.wait_released(offsets(0, 0, 6) + offsets(1, 0, 6) + offsets(2, 0, 5))
    world.commit(2, 9)
    world.commit(3, 4)
    world.wait_released(offsets(0, 0, 6) + offsets(1, 0, 6) + offsets(2, 0, 9) + offsets(3, 0, 4))
    assert [v for _, _, v in rows(world, "partition = 3")] == [f"p3-{i}" for i in range(4)]


# --- records deleted under the query ----------------------------------------------------------

@pytest.mark.requires_kafka(NO_DELETE_RECORDS)
@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_records_deleted_before_they_were_read(world, kafka_admin, fail_on_data_loss):
    kafka = compressed_producer(world.bootstrap)
    produce_burst(kafka, world.events, 0, values("p0", 20))
    produce_burst(kafka, world.events, 1, values("p1", 4))
    world.commit(0, 5)
    world.commit(1, 4)
    world.start(failOnDataLoss=str(fail_on_data_loss).lower())
    world.wait_released(offsets(0, 0, 5) + offsets(1, 0, 4))

    tp = TopicPartition(world.events, 0)
    kafka_admin.delete_records({tp: 3})  # below the query's position (5): nothing it still needs
    world.commit(0, 7)
    world.wait_released(offsets(0, 0, 7) + offsets(1, 0, 4))
    assert world.query is not None and world.query.exception() is None

    kafka_admin.delete_records({tp: 12})  # offsets 7-11 go before the query has read them
    world.commit(0, 20)
    if fail_on_data_loss:
        message = failure_of(world)
        assert f"{world.events}[0]: offsets [7, 12) were deleted before they were read" in message
        assert world.released() == offsets(0, 0, 7) + offsets(1, 0, 4)
        return
    world.wait_released(offsets(0, 0, 7) + offsets(0, 12, 20) + offsets(1, 0, 4))  # each row once
    assert [v for _, _, v in rows(world, "partition = 0")] == [f"p0-{i}" for i in [*range(7), *range(12, 20)]]


# --- a compacted topic --------------------------------------------------------------------------

def log_records(bootstrap: str, topic: str, end: int) -> list[tuple[int, str]]:
    """(offset, value) of every record left in partition 0 below `end`, as a plain consumer reads them."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", allow_auto_create_topics=False)
    tp = TopicPartition(topic, 0)
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        found: list[tuple[int, str]] = []
        wait_until(lambda: (found.extend((r.offset, r.value.decode()) for r in
                                         consumer.poll(200).get(tp, [])), consumer.position(tp) >= end)[1],
                   QUERY_TIMEOUT_S, f"reading {topic} to {end}")
        return [(o, v) for o, v in found if o < end]
    finally:
        consumer.close()


def gaps_after_records(present: set[int], end: int) -> list[int]:
    """Offsets below `end` the cleaner removed right after a record it kept."""
    return [o for o in range(1, end) if o not in present and o - 1 in present]


@pytest.mark.requires_kafka(NO_COMPACTION)
def test_compacted_topic_offset_gaps_are_not_data_loss(spark, producer, bootstrap_servers, new_topic, admin,
                                                       kafka_admin, tmp_path):
    events = f"compacted-{uuid.uuid4().hex[:8]}"
    kafka_admin.create_topics([NewTopic(events, 1, 1, topic_configs={
        "cleanup.policy": "compact", "segment.ms": "100", "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0", "delete.retention.ms": "100"})])
    world = World(spark, producer, bootstrap_servers, events, new_topic("commit-log"), tmp_path)
    try:
        kafka = compressed_producer(bootstrap_servers)
        keys = 8
        produced = 0

        def compacted() -> bool:
            """Another round of updates to the same keys and one key of its own, which stays
            (after segment.ms, so the log rolls a segment the cleaner may compact); True once
            the cleaner has removed records."""
            nonlocal produced
            burst = produce_burst(kafka, events, 0, [
                *(Record(f"k{i}".encode(), f"r{produced}-k{i}".encode(), []) for i in range(keys)),
                Record(f"own-{produced}".encode(), f"r{produced}-own".encode(), [])])
            produced = burst[-1].offset + 1
            return bool(gaps_after_records({o for o, _ in log_records(bootstrap_servers, events, produced)}, produced))

        wait_until(compacted, COMPACTION_TIMEOUT_S, "the log cleaner to leave a gap after a record", interval_s=0.3)
        end = high_watermarks(bootstrap_servers, events, [0])[0]
        remaining = log_records(bootstrap_servers, events, end)
        present = {o for o, _ in remaining}
        gap = gaps_after_records(present, end)[0]

        def forwarded_up_to(stop: int) -> None:
            """The query completed the range ending at `stop` with the records the cleaner left:
            each once, none it had removed before we looked, all it still keeps (it goes on
            cleaning meanwhile)."""
            wait_until(lambda: (world.drain(), end_offsets(world))[1] == {0: stop}, QUERY_TIMEOUT_S,
                       f"the batch ending at {stop}")
            output = [(o, v) for _, o, v in rows(world)]
            assert len(output) == len(set(output))
            kept_now = {(o, v) for o, v in log_records(bootstrap_servers, events, end) if o < stop}
            assert kept_now <= set(output) <= {(o, v) for o, v in remaining if o < stop}

        world.commit(0, gap + 1)  # a range whose end is a gap
        world.start()
        forwarded_up_to(gap + 1)
        world.commit(0, end)
        forwarded_up_to(end)
        assert world.query is not None and world.query.exception() is None
        assert world.partition_status(0)["state"] == "SYNCHRONIZED"
    finally:
        if world.query is not None:
            world.query.stop()
        admin.delete([events])
