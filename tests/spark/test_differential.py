"""Differential test: `synchronized_kafka` against Spark's own Kafka source (spark-sql-kafka-0-10).

One topic set per module, written by librdkafka: three topics (3 + 2 + 1 partitions), every codec
(gzip, snappy, lz4, zstd), headers with duplicate keys and null values, null keys and values,
explicit CreateTime timestamps (the third topic has LogAppendTime), committed and aborted
transactions (their markers leave offset gaps, two partitions end in a marker). The leader group
`leader` has committed every partition to its end, `partial` to offsets in the middle (some on a
transaction marker).

With the same options, both sources give equal DataFrames (chispa, ordered by topic, partition,
offset), column by column, and the same offsets per micro-batch. `synchronized_kafka` has no
batch read (it is a streaming source only: `DataSource.streamReader`), so it runs as a streaming
query with Trigger.AvailableNow into a memory sink; Spark's source runs both ways: a batch read
with `startingOffsets`/`endingOffsets`, and a streaming query run as ours is. `endingOffsets`
(batch only in Spark) corresponds to the leader's commits: ours following `partial` gives what
Spark's batch read gives with `endingOffsets` at `partial`'s offsets.
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import NewTopic
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from tests.conftest import BROKER, TANSU
from tests.librdkafka import Produced, Record, produce_burst, producer, transaction, transactional_producer
from tests.support import high_watermarks, produce_values, publish_commit

# The topic set has aborted transactions: Tansu keeps no aborted-transaction index, the mock
# cluster writes control batches without CRCs.
pytestmark = pytest.mark.requires_kafka("aborted transactions read_committed skips and CRC'd control batches")
QUERY_TIMEOUT_S = 120
ORDER = ("topic", "partition", "offset")
_names = itertools.count()


@dataclass
class Topics:
    """The module's topics, what was produced to them, and the leader's commits."""

    a: str  # 3 partitions
    b: str  # 2 partitions
    c: str  # 1 partition, LogAppendTime
    log: str
    prefix: str
    bootstrap: str
    tmp: Path
    ends: dict[tuple[str, int], int] = field(default_factory=dict)  # high watermarks
    partial: dict[tuple[str, int], int] = field(default_factory=dict)  # group `partial`'s commits
    markers: dict[tuple[str, int], list[int]] = field(default_factory=dict)  # transaction markers' offsets
    aborted: int = 0  # records of aborted transactions

    def kafka(self, **options: str) -> dict[str, str]:
        """Options both sources take: the broker, the topics, and `options`."""
        given = {"subscribe": f"{self.a},{self.b},{self.c}", **options}
        return {"kafka.bootstrap.servers": self.bootstrap, **{k: v for k, v in given.items() if v is not None}}

    def ours(self, group: str = "leader", **options: str) -> dict[str, str]:
        return {**self.kafka(**options), "commitLogTopic": self.log, "synchronizeCommitGroups": group}

    def offsets_json(self, offsets: dict[tuple[str, int], int]) -> str:
        nested: dict[str, dict[str, int]] = {}
        for (topic, partition), offset in sorted(offsets.items()):
            nested.setdefault(topic, {})[str(partition)] = offset
        return json.dumps(nested)

    def checkpoint(self) -> str:
        return str(self.tmp / f"checkpoint-{next(_names)}")


def _records(partition: int, count: int, start_ms: int) -> list[Record]:
    """Null keys and values, repeated keys, headers with duplicate keys and null values, binary
    payloads, explicit CreateTime timestamps (not monotonic)."""
    headers_cycle: list[list[tuple[str, bytes | None]]] = [
        [],
        [("trace", b"abc")],
        [("dup", b"1"), ("dup", b"2"), ("null", None)],
        [("\u043a\u043b\u044e\u0447", bytes(range(256))[partition::7]), ("empty", b"")],
    ]
    records = []
    for i in range(count):
        key = None if i % 7 == 3 else f"k{i % 5}".encode()
        value = None if i % 11 == 5 else bytes((partition * 31 + i * j) % 256 for j in range(i % 40 + 1))
        timestamp = start_ms + (i * 1_003 if i % 9 else -5_000)  # one in nine goes back in time
        records.append(Record(key, value, headers_cycle[i % len(headers_cycle)], timestamp))
    return records


def _write(topics: Topics) -> None:
    a, b = topics.a, topics.b
    plain = {codec: producer(topics.bootstrap, compression_type=codec) for codec in ("gzip", "snappy", "lz4", "zstd")}
    txn = transactional_producer(topics.bootstrap)
    # Within the broker's retention (7 days): older CreateTimes would have their segments deleted.
    base = int(time.time() * 1000) - 3_600_000 + 123

    def marker_after(produced: list[Produced]) -> None:
        last = produced[-1]
        topics.markers.setdefault((last.topic, last.partition), []).append(last.offset + 1)

    produce_burst(plain["gzip"], a, 0, _records(0, 30, base))
    produce_burst(plain["snappy"], a, 1, _records(1, 20, base + 1))
    marker_after(transaction(txn, a, 1, _records(11, 6, base + 2), commit=True))
    produce_burst(plain["snappy"], a, 1, _records(12, 8, base + 3))
    produce_burst(plain["lz4"], a, 2, _records(2, 10, base + 4))
    marker_after(transaction(txn, a, 2, _records(21, 5, base + 5), commit=True))
    marker_after(transaction(txn, a, 2, _records(22, 4, base + 6), commit=False))
    topics.aborted += 4
    marker_after(transaction(txn, a, 2, _records(23, 5, base + 7), commit=True))  # ends in a marker
    produce_burst(plain["zstd"], b, 0, _records(3, 30, base + 8))
    marker_after(transaction(txn, b, 1, _records(31, 8, base + 9), commit=True))
    produce_burst(plain["zstd"], b, 1, _records(32, 6, base + 10))
    marker_after(transaction(txn, b, 1, _records(33, 3, base + 11), commit=False))  # ends in an abort marker
    topics.aborted += 3
    produce_burst(plain["lz4"], topics.c, 0, _records(4, 12, base + 12))  # the broker's clock replaces CreateTime
    for kafka in (*plain.values(), txn):
        kafka.flush(30)


@pytest.fixture(scope="module")
def topics(admin, producer, bootstrap_servers, tmp_path_factory) -> Iterator[Topics]:
    prefix = f"diff-{uuid.uuid4().hex[:8]}"
    world = Topics(f"{prefix}-a", f"{prefix}-b", f"{prefix}-c", f"{prefix}-log", prefix, bootstrap_servers,
                   tmp_path_factory.mktemp("differential"))
    admin.create(world.a, 3)
    admin.create(world.b, 2)
    admin.create(world.log, 1)
    kafka_admin = KafkaAdminClient(bootstrap_servers=bootstrap_servers)
    try:
        kafka_admin.create_topics([NewTopic(world.c, 1, 1, topic_configs={"message.timestamp.type": "LogAppendTime"})])
    finally:
        kafka_admin.close()
    _write(world)
    for topic, count in ((world.a, 3), (world.b, 2), (world.c, 1)):
        for partition, end in high_watermarks(bootstrap_servers, topic, range(count)).items():
            world.ends[(topic, partition)] = end
    # `partial`: the middle of A[0], a commit marker of A[1], nothing of B[0], all of B[1],
    # the abort marker of A[2] (inside the partition).
    world.partial = {
        (world.a, 0): 13,
        (world.a, 1): world.markers[(world.a, 1)][0],
        (world.a, 2): world.markers[(world.a, 2)][1],
        (world.b, 0): 0,
        (world.b, 1): world.ends[(world.b, 1)],
        (world.c, 0): 4,
    }
    for (topic, partition), end in world.ends.items():
        publish_commit(producer, world.log, "leader", topic, partition, end)
        publish_commit(producer, world.log, "partial", topic, partition, world.partial[(topic, partition)])
    yield world
    if BROKER != TANSU:
        admin.delete([world.a, world.b, world.c, world.log])


# -- running the two sources ---------------------------------------------------------------


@dataclass
class Run:
    """A finished Trigger.AvailableNow query: its rows and its micro-batches' offsets."""

    rows: DataFrame
    query: StreamingQuery

    def batches(self) -> list[tuple[dict[str, Any], int]]:
        """(end offsets, input rows) of every micro-batch that moved an offset."""
        out = []
        for progress in self.query.recentProgress:
            source = progress.sources[0]
            if source.startOffset != source.endOffset:
                out.append((json.loads(source.endOffset), progress.numInputRows))
        return out


def run_stream(spark: SparkSession, topics: Topics, source: str, options: dict[str, str]) -> Run:
    name = f"diff_{source}_{next(_names)}"
    query = (spark.readStream.format(source).options(**options).load()
             .writeStream.format("memory").queryName(name)
             .option("checkpointLocation", topics.checkpoint())
             .trigger(availableNow=True).start())
    assert query.awaitTermination(QUERY_TIMEOUT_S), f"{source} query still running after {QUERY_TIMEOUT_S}s"
    return Run(spark.table(name), query)


def ours(spark: SparkSession, topics: Topics, group: str = "leader", **options: str) -> Run:
    return run_stream(spark, topics, "synchronized_kafka", topics.ours(group, **options))


def theirs_stream(spark: SparkSession, topics: Topics, **options: str) -> Run:
    return run_stream(spark, topics, "kafka", topics.kafka(**options))


def theirs_batch(spark: SparkSession, topics: Topics, **options: str) -> DataFrame:
    return spark.read.format("kafka").options(**topics.kafka(**options)).load()


def assert_same(actual: DataFrame, expected: DataFrame, rows: int | None = None) -> None:
    """Equal column by column (nullability aside: Spark's columns are not all nullable)."""
    if rows is not None:
        assert expected.count() == rows
    assert_df_equality(actual.orderBy(*ORDER), expected.orderBy(*ORDER), ignore_nullable=True)


def total(topics: Topics, read_committed: bool = False) -> int:
    """Records in the topic set (transaction markers are not records)."""
    markers = sum(len(m) for m in topics.markers.values())
    return sum(topics.ends.values()) - markers - (topics.aborted if read_committed else 0)


# -- rows ----------------------------------------------------------------------------------


def test_same_rows_as_spark_batch_read(spark, topics):
    """Without headers (the default of both); the next test has them."""
    mine = ours(spark, topics)
    assert_same(mine.rows, theirs_batch(spark, topics), total(topics))
    assert "headers" not in mine.rows.columns
    assert mine.rows.where(f"topic = '{topics.c}' and timestampType = 1").count() == 12


def test_same_rows_and_batches_as_spark_streaming_query(spark, topics):
    """With headers; Spark's streaming default is `latest` (see the next test)."""
    mine = ours(spark, topics, includeHeaders="true")
    spark_run = theirs_stream(spark, topics, includeHeaders="true", startingOffsets="earliest")
    assert_same(mine.rows, spark_run.rows, total(topics))
    assert mine.batches() == spark_run.batches()


# -- options -------------------------------------------------------------------------------


def test_latest_starts_at_the_end_and_is_sparks_streaming_default(spark, topics):
    """Spark's streaming default is `latest`; ours is `earliest` (docs/library.md: an intended difference)."""
    mine = ours(spark, topics, startingOffsets="latest")
    spark_latest = theirs_stream(spark, topics, startingOffsets="latest")
    spark_default = theirs_stream(spark, topics)
    for run in (mine, spark_latest, spark_default):
        assert run.rows.count() == 0
    ends = json.loads(topics.offsets_json(topics.ends))
    assert [json.loads(s.sources[0].endOffset) for s in mine.query.recentProgress][:1] == [ends]
    assert [json.loads(s.sources[0].endOffset) for s in spark_latest.query.recentProgress][:1] == [ends]


def test_subscribe_list_with_spaces_and_an_empty_name(spark, topics):
    value = f" {topics.b} ,{topics.a},{topics.c},"
    assert_same(ours(spark, topics, subscribe=value).rows, theirs_batch(spark, topics, subscribe=value),
                total(topics))


@pytest.mark.parametrize("pattern", ["^{p}-a$", "{short}-(a|b)"], ids=["anchored", "inside-the-name"])
def test_subscribe_pattern(spark, topics, pattern):
    """Spark finds the pattern anywhere in a topic's name (Scala's `Regex.findFirstIn`), not the
    whole name: `{short}` leaves out the names' first characters. (A pattern that also takes the
    commit-log topic would differ by the gate: the leader commits nothing of it.)"""
    regex = pattern.format(p=topics.prefix, short=topics.prefix[2:])
    options = {"subscribe": None, "subscribePattern": regex}
    expected = theirs_batch(spark, topics, **options)
    assert_same(ours(spark, topics, **options).rows, expected)
    assert expected.count() > 0


def test_assign(spark, topics):
    assign = json.dumps({topics.a: [0, 2], topics.b: [1]})
    expected = theirs_batch(spark, topics, subscribe=None, assign=assign)
    assert_same(ours(spark, topics, subscribe=None, assign=assign).rows, expected)
    assert sorted({(r.topic, r.partition) for r in expected.select("topic", "partition").collect()}) == [
        (topics.a, 0), (topics.a, 2), (topics.b, 1)]


def test_starting_offsets_json(spark, topics):
    """-2 earliest, -1 latest, explicit offsets: one on a commit marker, one inside an aborted transaction."""
    a, b = topics.a, topics.b
    starting = topics.offsets_json({(a, 0): -2, (a, 1): topics.markers[(a, 1)][0], (a, 2): 17, (b, 0): -1,
                                    (b, 1): 3, (topics.c, 0): 3})
    mine = ours(spark, topics, startingOffsets=starting)
    spark_run = theirs_stream(spark, topics, startingOffsets=starting)
    assert_same(mine.rows, spark_run.rows)
    assert mine.batches() == spark_run.batches()
    assert mine.rows.count() > 0


def test_starting_offsets_json_naming_some_partitions(spark, topics):
    """Intended difference (docs/library.md): Spark fails the query unless the JSON names every partition;
    ours starts the partitions it leaves out from earliest, as partitions discovered later."""
    named = {(topics.a, 0): 5, (topics.b, 1): -1}
    starting = topics.offsets_json(named)
    with pytest.raises(Exception, match="you must specify all TopicPartitions"):
        theirs_stream(spark, topics, startingOffsets=starting)
    every = topics.offsets_json({**{tp: -2 for tp in topics.ends}, **named, (topics.b, 1): topics.ends[(topics.b, 1)]})
    assert_same(ours(spark, topics, startingOffsets=starting).rows, theirs_batch(spark, topics, startingOffsets=every))


def test_ending_offsets_are_the_leaders_commits(spark, topics):
    """Spark's batch read up to `endingOffsets` = ours following a leader committed at those offsets."""
    starting = topics.offsets_json({tp: min(2, end) for tp, end in topics.partial.items()})
    expected = theirs_batch(spark, topics, startingOffsets=starting, endingOffsets=topics.offsets_json(topics.partial))
    assert_same(ours(spark, topics, group="partial", startingOffsets=starting).rows, expected)
    assert expected.count() > 0


def test_max_offsets_per_trigger(spark, topics):
    mine = ours(spark, topics, maxOffsetsPerTrigger="37")
    spark_run = theirs_stream(spark, topics, maxOffsetsPerTrigger="37", startingOffsets="earliest")
    assert mine.batches() == spark_run.batches()
    assert len(mine.batches()) >= 4
    assert_same(mine.rows, spark_run.rows, total(topics))


def test_read_committed_drops_aborted_transactions(spark, topics):
    """`kafka.*` options go to the Kafka clients of both (read_uncommitted, the default of both,
    is the first test: the aborted records are in both)."""
    options = {"kafka.isolation.level": "read_committed"}
    assert_same(ours(spark, topics, **options).rows, theirs_batch(spark, topics, **options),
                total(topics, read_committed=True))


def test_starting_offset_beyond_the_end_with_fail_on_data_loss(spark, topics):
    """Past a partition's end: both fail the query, naming data loss."""
    options = {"startingOffsets": _beyond_the_end(topics), "failOnDataLoss": "true"}
    with pytest.raises(Exception, match="Some data may have been lost"):
        theirs_stream(spark, topics, **options)
    with pytest.raises(Exception, match=rf"{topics.a}\[0\].*failOnDataLoss"):
        ours(spark, topics, **options)


def test_starting_offset_beyond_the_end_without_fail_on_data_loss(spark, topics):
    """Intended difference (docs/library.md): Spark continues the partition from its end, skipping what it
    holds; ours restarts it from earliest (as after its topic was recreated), losing nothing."""
    options = {"startingOffsets": _beyond_the_end(topics), "failOnDataLoss": "false"}
    spark_run = theirs_stream(spark, topics, **options)
    mine = ours(spark, topics, **options)
    everything = theirs_batch(spark, topics)
    assert_same(spark_run.rows, everything.where(f"not (topic = '{topics.a}' and partition = 0)"))
    assert_same(mine.rows, everything, total(topics))


def _beyond_the_end(topics: Topics) -> str:
    starting = {tp: -2 for tp in topics.ends}
    starting[(topics.a, 0)] = topics.ends[(topics.a, 0)] + 5
    return topics.offsets_json(starting)


def test_offsets_deleted_before_they_were_read(spark, topics, producer, new_topic):
    """DeleteRecords moved the log start past the starting offset: with failOnDataLoss both fail,
    without it both continue from the log start. (A topic of its own: the others stay whole.)"""
    topic = new_topic("diff-deleted", 1)
    produce_values(producer, topic, 0, 12)
    admin = KafkaAdminClient(bootstrap_servers=topics.bootstrap)
    try:
        admin.delete_records({TopicPartition(topic, 0): 5})
    finally:
        admin.close()
    publish_commit(producer, topics.log, "leader", topic, 0, 12)
    options = {"subscribe": topic, "startingOffsets": json.dumps({topic: {"0": 2}})}
    with pytest.raises(Exception, match="Some data may have been lost"):
        theirs_stream(spark, topics, failOnDataLoss="true", **options)
    with pytest.raises(Exception, match=rf"{topic}\[0\]: offsets \[2, 5\) were deleted before they were read"):
        ours(spark, topics, failOnDataLoss="true", **options)
    spark_run = theirs_stream(spark, topics, failOnDataLoss="false", **options)
    mine = ours(spark, topics, failOnDataLoss="false", **options)
    assert_same(mine.rows, spark_run.rows, 7)
    assert mine.batches() == spark_run.batches()
