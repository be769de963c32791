"""The synchronized_kafka source: local-mode Spark against a real Kafka-protocol broker."""

from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from synclib.settings.source import LEADER_WAIT_S
from synclib.source.datasource import SynchronizedKafkaDataSource
from tests import mock_cluster
from tests.forwarder_runs import commit_group
from tests.librdkafka import Record, produce_burst, transactional_producer
from tests.support import produce, produce_values, publish_commit, publish_raw, wait_until

QUERY_TIMEOUT_S = 60


@dataclass
class World:
    """An events topic, a commit-log topic, and a running query over them, by default as the job
    runs it (`trigger.mode: leader`: the source waits for the leader, Spark's trigger is 0)."""

    spark: Any
    producer: Any
    bootstrap: str
    events: str
    log: str
    tmp_path: Any
    query: StreamingQuery | None = None

    @property
    def name(self) -> str:
        assert self.query is not None
        return self.query.name

    def options(self, **overrides: str) -> dict[str, str]:
        return {
            "kafka.bootstrap.servers": self.bootstrap,
            "subscribe": self.events,
            "commitLogTopic": self.log,
            "synchronizeCommitGroups": "snuba",
            "statusFile": str(self.tmp_path / "status.json"),
            "awaitLeaderCommits": "true",
            **overrides,
        }

    def start(self, trigger: dict | None = None, **overrides: str) -> StreamingQuery:
        reader = self.spark.readStream.format("synchronized_kafka").options(**self.options(**overrides))
        writer = (reader.load().writeStream.format("memory")
                  .queryName(f"q_{uuid.uuid4().hex[:10]}")
                  .option("checkpointLocation", str(self.tmp_path / "checkpoint")))
        if trigger:
            writer = writer.trigger(**trigger)
        self.query = writer.start()
        return self.query

    def commit(self, partition: int, offset: int, group: str = "snuba", topic: str | None = None) -> None:
        publish_commit(self.producer, self.log, group, topic or self.events, partition, offset)

    def drain(self) -> None:
        assert self.query is not None
        self.query.processAllAvailable()

    def released(self) -> list[tuple[int, int]]:
        """(partition, offset) of every row the query has output, sorted."""
        rows = self.spark.sql(f"select partition, offset from {self.name}").collect()
        return sorted((r.partition, r.offset) for r in rows)

    def status(self) -> dict:
        """What the source last wrote to its status file (empty before the first planning)."""
        path = self.tmp_path / "status.json"
        if not path.exists():
            return {"partitions": [], "commit_log": {"applied": 0, "skipped_malformed": 0}}
        return json.loads(path.read_text())

    def partition_status(self, partition: int, topic: str | None = None) -> dict:
        for entry in self.status()["partitions"]:
            if entry["topic"] == (topic or self.events) and entry["partition"] == partition:
                return entry
        raise AssertionError(f"partition {partition} not in status {self.status()}")

    def wait_released(self, expected: list[tuple[int, int]]) -> None:
        def done() -> bool:
            self.drain()
            return self.released() == expected
        wait_until(done, QUERY_TIMEOUT_S, f"released rows to become {expected[:3]}... ({len(expected)} rows)")


@pytest.fixture
def world(spark, producer, bootstrap_servers, new_topic, tmp_path):
    w = World(spark, producer, bootstrap_servers, new_topic("events", 2), new_topic("commit-log"), tmp_path)
    yield w
    if w.query is not None:
        w.query.stop()


def offsets(partition: int, start: int, stop: int) -> list[tuple[int, int]]:
    return [(partition, o) for o in range(start, stop)]


def test_nothing_released_before_any_commit(world):
    produce_values(world.producer, world.events, 0, 5)
    world.start()
    world.drain()
    assert world.released() == []
    assert world.partition_status(0)["state"] == "UNKNOWN"
    assert world.partition_status(0)["high_watermark"] == 5


def test_a_batch_starts_in_the_trigger_waiting_when_the_leader_commits(world):
    """No timer between a leader commit and its batch: the batch's trigger started before the
    follower had the commit, or less than one idle wait after it (a trigger that finds nothing
    waits `LEADER_WAIT_S`, so none came and went in between)."""
    produce_values(world.producer, world.events, 0, 5)
    world.start()
    wait_until(lambda: world.status()["partitions"], what="the first planning call")
    world.drain()
    world.commit(0, 3)
    world.wait_released(offsets(0, 0, 3))

    applied_at = world.status()["commit_log"]["last_commit_time"]["snuba"]
    [batch] = [p for p in world.query.recentProgress if p.numInputRows > 0]
    started = datetime.fromisoformat(batch.timestamp.replace("Z", "+00:00")).timestamp()
    assert started <= applied_at + LEADER_WAIT_S, (started, applied_at)
    [planned] = world.status()["batches"]
    assert planned["end"] == {world.events: {"0": 3, "1": 0}} and [n for _, n in planned["leader_commits"]] == [1]


def test_an_idle_query_stops_within_a_leader_wait(world):
    """A trigger waiting for the leader holds the query's stop for at most `LEADER_WAIT_S`."""
    query = world.start()
    wait_until(lambda: world.status()["partitions"], what="the first planning call")
    world.drain()
    stopped = threading.Event()
    threading.Thread(target=lambda: (query.stop(), stopped.set()), daemon=True).start()
    assert stopped.wait(LEADER_WAIT_S + 10.0), "an idle query did not stop"
    assert not query.isActive


def test_two_groups_release_up_to_the_smaller_commit(world):
    produce_values(world.producer, world.events, 0, 10)
    world.start(synchronizeCommitGroups="snuba,search")
    world.commit(0, 8, group="snuba")
    wait_until(lambda: world.status()["commit_log"]["applied"] >= 1, what="snuba's commit")
    world.drain()
    assert world.released() == []
    world.commit(0, 6, group="search")
    world.wait_released(offsets(0, 0, 6))
    assert world.partition_status(0)["leader_offsets"] == {"snuba": 8, "search": 6}


def test_each_partition_released_exactly_below_its_commit(world, spark):
    produce_values(world.producer, world.events, 0, 20)
    produce_values(world.producer, world.events, 1, 20)
    world.start()
    world.commit(0, 7)
    world.commit(1, 13)
    world.wait_released(offsets(0, 0, 7) + offsets(1, 0, 13))
    produce_values(world.producer, world.events, 0, 5, prefix="more")
    world.drain()
    assert world.released() == offsets(0, 0, 7) + offsets(1, 0, 13)
    assert world.partition_status(0)["state"] == "SYNCHRONIZED"
    actual = spark.sql(f"select partition, offset, cast(value as string) as value from {world.name}")
    expected = spark.createDataFrame(
        [(p, o, f"v-{p}-{o}") for p, o in offsets(0, 0, 7) + offsets(1, 0, 13)],
        "partition int, offset long, value string",
    )
    assert_df_equality(actual, expected, ignore_row_order=True, ignore_nullable=True)


def test_batch_read_between_offsets_is_not_gated(world, spark):
    """`spark.read`: what a dead-letter sink reads a micro-batch again with; the leader has
    committed nothing here, and the range is read all the same."""
    produce_values(world.producer, world.events, 0, 20)
    produce_values(world.producer, world.events, 1, 12)

    def read(**overrides: str) -> Any:
        return (spark.read.format("synchronized_kafka").options(**world.options(**overrides)).load()
                .selectExpr("partition", "offset", "cast(value as string) as value"))

    def rows(ranges: list[tuple[int, int, int]]) -> Any:
        return spark.createDataFrame([(p, o, f"v-{p}-{o}") for p, start, stop in ranges for o in range(start, stop)],
                                     "partition int, offset long, value string")

    between = read(startingOffsets=json.dumps({world.events: {"0": 5}}),  # partition 1 left out: earliest
                   endingOffsets=json.dumps({world.events: {"0": 15, "1": 12}}))
    assert_df_equality(between, rows([(0, 5, 15), (1, 0, 12)]), ignore_row_order=True, ignore_nullable=True)
    assert_df_equality(read(), rows([(0, 0, 20), (1, 0, 12)]), ignore_row_order=True, ignore_nullable=True)
    spark_sentinels = read(startingOffsets=json.dumps({world.events: {"0": -2, "1": 10}}),  # -2 earliest,
                           endingOffsets=json.dumps({world.events: {"0": 3, "1": -1}}))  # -1 latest
    assert_df_equality(spark_sentinels, rows([(0, 0, 3), (1, 10, 12)]), ignore_row_order=True, ignore_nullable=True)
    with pytest.raises(Exception, match="endingOffsets"):
        read(endingOffsets="{not json").collect()


def test_leader_moving_backwards_releases_nothing_new_until_it_passes(world):
    produce_values(world.producer, world.events, 0, 30)
    world.start()
    world.commit(0, 10)
    world.wait_released(offsets(0, 0, 10))
    world.commit(0, 4)
    wait_until(lambda: world.partition_status(0)["leader_offset"] == 4 or world.drain(),
               what="leader reset to 4 seen by the planner")
    assert world.partition_status(0)["state"] == "REMOTE_BEHIND"
    world.commit(0, 9)
    world.drain()
    assert world.released() == offsets(0, 0, 10)
    world.commit(0, 16)
    world.wait_released(offsets(0, 0, 16))


def test_leader_ahead_of_the_high_watermark_stops_at_the_data(world):
    produce_values(world.producer, world.events, 0, 12)
    world.start()
    world.commit(0, 100)
    world.wait_released(offsets(0, 0, 12))
    assert world.partition_status(0)["state"] == "LOCAL_BEHIND"
    produce_values(world.producer, world.events, 0, 3, prefix="late")
    world.wait_released(offsets(0, 0, 15))


def test_max_offsets_per_trigger_is_split_across_partitions(world):
    produce_values(world.producer, world.events, 0, 30)
    produce_values(world.producer, world.events, 1, 10)
    world.commit(0, 30)
    world.commit(1, 10)
    query = world.start(trigger={"availableNow": True}, maxOffsetsPerTrigger="8")
    assert query.awaitTermination(QUERY_TIMEOUT_S)
    assert world.released() == offsets(0, 0, 30) + offsets(1, 0, 10)
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    assert [p["numInputRows"] for p in batches][:4] == [8, 8, 8, 8]
    first = json.loads(batches[0].sources[0].endOffset)[world.events]
    assert first == {"0": 6, "1": 2}  # 8 * 30/40 and 8 * 10/40


def test_available_now_stops_at_the_target_while_data_keeps_arriving(world):
    produce_values(world.producer, world.events, 0, 40)
    world.commit(0, 40)
    query = world.start(trigger={"availableNow": True}, maxOffsetsPerTrigger="4")
    wait_until(lambda: query.recentProgress, what="first micro-batch")
    produce_values(world.producer, world.events, 0, 20, prefix="after")
    world.commit(0, 60)
    assert query.awaitTermination(QUERY_TIMEOUT_S)
    assert world.released() == offsets(0, 0, 40)


@pytest.mark.parametrize(
    ("mode", "expected_start"),
    [
        ({"startingOffsets": "earliest"}, {0: 0, 1: 0}),
        ({"startingOffsets": "latest"}, {0: 10, 1: 10}),
        ({"startingOffsets": '{"EVENTS": {"0": 3, "1": -2}}'}, {0: 3, 1: 0}),
        ({"startingOffsets": '{"EVENTS": {"0": -1}}'}, {0: 10, 1: 0}),
        pytest.param({"startingOffsets": "committed", "consumerGroup": "GROUP"}, {0: 4, 1: 7},
                     marks=mock_cluster.NO_GROUP_OFFSET_LISTING),
        pytest.param({"startingOffsets": "committed", "consumerGroup": "GROUP", "initialOffsetReset": "latest",
                      "_commit_only": "0"}, {0: 4, 1: 10}, marks=mock_cluster.NO_GROUP_OFFSET_LISTING),
        pytest.param({"startingOffsets": "committed", "consumerGroup": "GROUP", "_commit_only": "none"},
                     {0: 0, 1: 0}, marks=mock_cluster.NO_GROUP_OFFSET_LISTING),
    ],
    ids=["earliest", "latest", "json", "json-latest-and-missing", "committed",
         "committed-partial-reset-latest", "committed-none-reset-earliest"],
)
def test_starting_offsets(world, mode, expected_start):
    for partition in (0, 1):
        produce_values(world.producer, world.events, partition, 10)
        world.commit(partition, 10)
    options = {k: v.replace("EVENTS", world.events) for k, v in mode.items() if not k.startswith("_")}
    if options.get("consumerGroup"):
        group = f"follower-{uuid.uuid4().hex[:8]}"
        options["consumerGroup"] = group
        committed = {0: 4, 1: 7}
        only = mode.get("_commit_only")
        if only != "none":
            commit_group(world.bootstrap, group, world.events,
                                  {int(only): committed[int(only)]} if only else committed)
    query = world.start(trigger={"availableNow": True}, **options)
    assert query.awaitTermination(QUERY_TIMEOUT_S)
    assert world.released() == offsets(0, expected_start[0], 10) + offsets(1, expected_start[1], 10)


def test_initial_offsets_are_kept_for_a_restart_before_the_first_batch_commits(world):
    """Spark asks a Python source for its initial offsets again when it restarts before batch 0
    commits; with `latest` the answer would have moved (and an end below the start reads from
    earliest), so the reader keeps its first answer in `initialOffsetsFile`."""
    kept = world.tmp_path / "checkpoint" / "synclib" / "initial-offsets.json"

    def initial_offsets() -> dict:
        source = SynchronizedKafkaDataSource(world.options(startingOffsets="latest", initialOffsetsFile=str(kept)))
        reader = source.streamReader(source.schema())
        try:
            return reader.initialOffset()
        finally:
            reader.stop()

    for partition in (0, 1):
        produce_values(world.producer, world.events, partition, 10)
    first = initial_offsets()
    assert first == {world.events: {"0": 10, "1": 10}}
    assert json.loads(kept.read_text()) == first
    for partition in (0, 1):
        produce_values(world.producer, world.events, partition, 5, prefix="later")
    assert initial_offsets() == first  # the restart starts batch 0 where the first start did
    kept.unlink()
    assert initial_offsets() == {world.events: {"0": 15, "1": 15}}  # a new checkpoint: afresh
    kept.write_text('{"events": ')
    with pytest.raises(ValueError, match=f"initialOffsetsFile {kept}"):
        initial_offsets()


def test_topic_created_while_running_is_read_from_earliest(world, admin):
    prefix = f"pattern-{uuid.uuid4().hex[:8]}"
    first, second = f"{prefix}-a", f"{prefix}-b"
    admin.create(first, 1)
    produce_values(world.producer, first, 0, 3)
    world.start(subscribe="", subscribePattern=f"{prefix}-.*")
    world.commit(0, 3, topic=first)
    wait_until(lambda: (world.drain(), len(world.released()) == 3)[1], QUERY_TIMEOUT_S, "first topic")
    admin.create(second, 1)
    produce_values(world.producer, second, 0, 5)
    world.commit(0, 5, topic=second)

    def topics_released():
        world.drain()
        rows = world.spark.sql(f"select topic, offset from {world.name}").collect()
        return sorted((r.topic, r.offset) for r in rows)

    expected = [(first, o) for o in range(3)] + [(second, o) for o in range(5)]
    wait_until(lambda: topics_released() == expected, QUERY_TIMEOUT_S, "rows of the new topic")


def test_legacy_commit_log_format(world):
    produce_values(world.producer, world.events, 0, 10)
    world.start()
    publish_raw(world.producer, world.log, f"{world.events}:0:snuba".encode(), b"6",
                headers=[("orig_message_ts", b"2024-05-06T07:08:09.500000Z")])
    world.wait_released(offsets(0, 0, 6))


def test_malformed_commit_log_message_is_skipped_and_counted(world):
    produce_values(world.producer, world.events, 0, 10)
    world.start()
    world.commit(0, 3)
    publish_raw(world.producer, world.log, f"{world.events}:0:snuba".encode(), b'{"offset": "seven"}')
    world.commit(0, 8)
    world.wait_released(offsets(0, 0, 8))
    assert world.status()["commit_log"]["skipped_malformed"] == 1
    assert world.status()["commit_log"]["applied"] == 2


def test_include_headers_and_exact_schema(world, spark):
    produce(world.producer, world.events, 0, [(b"k", b"v")], headers=[("trace", b"abc"), ("n", b"1")])
    world.commit(0, 1)
    query = world.start(trigger={"availableNow": True}, includeHeaders="true")
    assert query.awaitTermination(QUERY_TIMEOUT_S)
    table = spark.table(world.name)
    assert table.schema == StructType([
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
        StructField("headers", ArrayType(StructType([
            StructField("key", StringType()), StructField("value", BinaryType())]))),
    ])
    row = table.collect()[0]
    assert (row.key, row.value, row.topic, row.partition, row.offset) == (b"k", b"v", world.events, 0, 0)
    assert [(h.key, h.value) for h in row.headers] == [("trace", b"abc"), ("n", b"1")]
    assert row.timestampType == 0 and row.timestamp is not None


def test_schema_without_headers(spark, world):
    df = spark.readStream.format("synchronized_kafka").options(**world.options()).load()
    assert df.schema.fieldNames() == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kafka.bootstrap.servers": ""}, "kafka.bootstrap.servers"),
        ({"subscribePattern": "x.*"}, "exactly one of"),
        ({"subscribe": ""}, "exactly one of"),
        ({"commitLogTopic": ""}, "commitLogTopic"),
        ({"synchronizeCommitGroups": " , "}, "synchronizeCommitGroups"),
        ({"startingOffsets": "{not json"}, "startingOffsets"),
        ({"startingOffsets": "committed"}, "consumerGroup"),
        ({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
        ({"failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"kafka.no.such.thing": "1"}, "kafka.no.such.thing"),
    ],
)
def test_invalid_options_fail_when_the_query_starts(world, change, message):
    with pytest.raises(Exception, match=message):
        world.start(**change)
        world.drain()


def test_follower_death_fails_the_query_with_its_cause(world, admin):
    """Deleting the commit-log topic under the follower kills it (the topic is reported gone,
    or Tansu has recreated it on the follower's next fetch: another topic id), or leaves it
    without progress: the query fails naming the follower."""
    produce_values(world.producer, world.events, 0, 5)
    query = world.start(commitLogTimeout="3")
    world.commit(0, 2)
    world.wait_released(offsets(0, 0, 2))
    admin.delete([world.log])
    with pytest.raises(Exception) as failure:
        query.awaitTermination(QUERY_TIMEOUT_S)
        raise AssertionError("the query did not fail")
    message = str(failure.value)
    assert f"commit-log follower for topic {world.log!r}" in message
    assert f"commit-log topic {world.log!r} was deleted" in message or "no progress for" in message


@pytest.mark.parametrize("fail_on_data_loss", [True, False])
def test_topic_deleted_and_recreated(world, admin, fail_on_data_loss):
    produce_values(world.producer, world.events, 0, 10)
    produce_values(world.producer, world.events, 1, 10)
    query = world.start(failOnDataLoss=str(fail_on_data_loss).lower())
    world.commit(0, 10)
    world.commit(1, 10)
    world.wait_released(offsets(0, 0, 10) + offsets(1, 0, 10))
    admin.delete([world.events])
    admin.create(world.events, 2)
    produce_values(world.producer, world.events, 0, 4, prefix="new")
    world.commit(0, 4)  # the leader restarts on the new topic too
    if fail_on_data_loss:
        with pytest.raises(Exception, match=rf"{world.events}\[0\].*recreated.*failOnDataLoss"):
            query.awaitTermination(QUERY_TIMEOUT_S)
            raise AssertionError("the query did not fail")
        return

    def new_rows():
        world.drain()
        rows = world.spark.sql(
            f"select partition, offset from {world.name} where cast(value as string) like 'new-%'").collect()
        return sorted((r.partition, r.offset) for r in rows)

    wait_until(lambda: new_rows() == offsets(0, 0, 4), QUERY_TIMEOUT_S, "rows of the recreated topic")


@mock_cluster.NO_GROUP_OFFSET_LISTING
def test_commit_to_consumer_group_after_each_batch(world, admin):
    from synclib.kafka.admin import KafkaMetadata
    from synclib.settings import SourceOptions

    group = f"follower-{uuid.uuid4().hex[:8]}"
    produce_values(world.producer, world.events, 0, 10)
    world.start(consumerGroup=group, commitToConsumerGroup="true")
    world.commit(0, 6)
    world.wait_released(offsets(0, 0, 6))
    options = SourceOptions.from_spark(world.options())
    metadata = KafkaMetadata(options.client_config, options.subscription)
    try:
        wait_until(lambda: metadata.group_offsets(group).get((world.events, 0)) == 6, what="group offset 6")
    finally:
        metadata.close()


def test_published_commit_log_can_be_followed(world, new_topic):
    from synclib.leader.follower import CommitLogFollower

    own_log = new_topic("own-commit-log")
    produce_values(world.producer, world.events, 0, 10)
    world.start(consumerGroup="forwarder", publishCommitLog=own_log)
    world.commit(0, 7)
    world.wait_released(offsets(0, 0, 7))
    with CommitLogFollower(own_log, ["forwarder"], {"bootstrap_servers": [world.bootstrap]}) as follower:
        wait_until(lambda: follower.remote_offsets([(world.events, 0)]) == {(world.events, 0): 7},
                   what="our own published commit")


@mock_cluster.NO_GROUP_OFFSET_LISTING
def test_remote_offsets_from_leader_group_without_commit_log(world):
    group = f"leader-{uuid.uuid4().hex[:8]}"
    produce_values(world.producer, world.events, 0, 10)
    produce_values(world.producer, world.events, 1, 10)
    world.start(remoteOffsets="group", commitLogTopic="", synchronizeCommitGroups=group,
                remotePollInterval="0.2")
    world.drain()
    assert world.released() == []
    commit_group(world.bootstrap, group, world.events, {0: 4, 1: 9})
    world.wait_released(offsets(0, 0, 4) + offsets(1, 0, 9))
    commit_group(world.bootstrap, group, world.events, {0: 2})
    wait_until(lambda: (world.drain(), world.partition_status(0)["state"])[1] == "REMOTE_BEHIND",
               what="leader group moved back")
    assert world.released() == offsets(0, 0, 4) + offsets(1, 0, 9)


@mock_cluster.CONTROL_BATCHES_WITHOUT_CRC
def test_read_committed_position_past_an_open_transaction_is_not_data_loss(world):
    """Under read_committed the planner's end is the last stable offset, which stays below a
    position inside an open transaction (Tansu even answers 0): the query waits, it does not
    report the partition as truncated, and reads the transaction's records once committed."""
    produce_values(world.producer, world.events, 0, 10)
    kafka = transactional_producer(world.bootstrap)
    kafka.begin_transaction()
    produce_burst(kafka, world.events, 0, [Record(b"k", f"open-{i}".encode(), []) for i in range(3)])  # offsets 10-12
    world.commit(0, 13)
    world.start(startingOffsets=json.dumps({world.events: {"0": 11, "1": -2}}),
                **{"kafka.isolation.level": "read_committed"})
    world.drain()
    assert world.query is not None and world.query.exception() is None
    assert world.released() == []

    kafka.commit_transaction(30)  # its marker takes offset 13
    world.commit(0, 14)
    world.wait_released(offsets(0, 11, 13))
