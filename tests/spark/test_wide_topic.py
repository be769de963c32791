"""The forwarder on a 1,024-partition topic of the session's broker (Apache Kafka by default), end to
end in the session's Spark: every partition released exactly up to its leader's commit, one
partition whose leader stops committing held back while the other 1,023 move, then released; the
Delta table read back by Spark's Delta reader, delta-rs and DuckDB (issue 45)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path

import duckdb
import pytest
from confluent_kafka import Producer
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from synclib.app.forwarder import Forwarder
from synclib.delta import spark_maintenance
from synclib.delta.table import read_arrow, read_table_offsets
from synclib.leader.commitlog import Commit, encode_commit
from synclib.settings import ForwarderConfig
from tests import librdkafka
from tests.support import wait_until

PARTITIONS = 1024
HELD = 517  # the partition whose leader stops committing
GROUP = "snuba"
TIMEOUT_S = 240.0


def produce_rounds(producer: Producer, topic: str, first: int, count: int) -> None:
    """`count` records into every partition (values name partition and offset), batched and
    compressed by librdkafka, all delivered."""
    for partition in range(PARTITIONS):
        for offset in range(first, first + count):
            producer.produce(topic, value=f"{partition}-{offset}".encode(), key=str(partition).encode(),
                             partition=partition)
        producer.poll(0)
    assert producer.flush(librdkafka.DELIVERY_TIMEOUT_S) == 0


def commit(producer: Producer, log: str, topic: str, offsets: Mapping[int, int]) -> None:
    """The leader's commit of each partition to `offset`, published to the commit log."""
    for partition, offset in offsets.items():
        key, value = encode_commit(Commit(GROUP, topic, partition, offset, orig_message_ts=0.0))
        producer.produce(log, key=key, value=value, partition=0)
    assert producer.flush(librdkafka.DELIVERY_TIMEOUT_S) == 0


def wanted(ends: Mapping[int, int]) -> list[tuple[int, int, str]]:
    return sorted((p, o, f"{p}-{o}") for p, end in ends.items() for o in range(end))


@pytest.fixture
def forwarder(spark: SparkSession, bootstrap_servers: str, new_topic, tmp_path: Path) -> Iterator[
        tuple[Forwarder, str, str]]:
    events, log = new_topic("events", PARTITIONS), new_topic("commit-log")
    config = ForwarderConfig.model_validate({
        "kafka": {"bootstrap_servers": bootstrap_servers},
        "source": {"subscribe": events, "commit_log_topic": log, "commit_groups": [GROUP]},
        "sink": {"path": str(tmp_path / "table"), "partition_by_date": False},
        "checkpoint": {"location": str(tmp_path / "checkpoint")},
        "logging": {"progress": False}})
    yield Forwarder(config, None), events, log


def released(spark: SparkSession, table: str) -> list[tuple[int, int, str]]:
    return sorted((r.partition, r.offset, r.value) for r in spark.read.format("delta").load(table)
                  .selectExpr("partition", "offset", "cast(value as string) as value").collect())


def test_a_wide_topic_is_released_exactly_to_each_leader_commit_and_a_stopped_leader_holds_only_its_partition(
        spark: SparkSession, producer: Producer, forwarder: tuple[Forwarder, str, str], tmp_path: Path) -> None:
    job, events, log = forwarder
    table, status = job.config.sink.path, tmp_path / "status.json"
    assert table is not None
    produce_rounds(producer, events, 0, 3)
    commit(producer, log, events, {p: 1 if p == HELD else 3 for p in range(PARTITIONS)})
    query: StreamingQuery = job.start(spark, job.config.kafka.bootstrap_servers, str(status))
    try:
        first = {p: 1 if p == HELD else 3 for p in range(PARTITIONS)}
        wait_until(lambda: read_table_offsets(table) == {(events, p): end for p, end in first.items()},
                   TIMEOUT_S, "every partition released to its leader's commit", interval_s=0.5)

        produce_rounds(producer, events, 3, 2)  # the held partition's leader commits no more
        commit(producer, log, events, {p: 5 for p in range(PARTITIONS) if p != HELD})
        second = {**{p: 5 for p in range(PARTITIONS)}, HELD: 1}
        wait_until(lambda: read_table_offsets(table) == {(events, p): end for p, end in second.items()},
                   TIMEOUT_S, "the other partitions released past the held one", interval_s=0.5)
        assert released(spark, table) == wanted(second)
        held = wait_until(lambda: next((e for e in json.loads(status.read_text())["partitions"]
                                        if (e["partition"], e["follower_offset"], e["high_watermark"]) == (HELD, 1, 5)),
                                       None),
                          TIMEOUT_S, "the held partition's follower at its leader's commit, its data beyond")
        assert (held["state"], held["leader_offset"], held["held_back"]) == ("SYNCHRONIZED", 1, 4)

        commit(producer, log, events, {HELD: 5})
        wait_until(lambda: read_table_offsets(table) == {(events, p): 5 for p in range(PARTITIONS)},
                   TIMEOUT_S, "the held partition released", interval_s=0.5)
    finally:
        query.stop()

    every = wanted(dict.fromkeys(range(PARTITIONS), 5))
    assert released(spark, table) == every  # exactly once: no row twice, none missing
    arrow = read_arrow(table, columns=["partition", "offset", "value"])  # delta-rs's snapshot, pyarrow's reads
    assert arrow is not None
    assert sorted((r["partition"], r["offset"], r["value"].decode()) for r in arrow.to_pylist()) == every
    rows = duckdb.connect().execute("SELECT partition, \"offset\", value FROM read_parquet(?)",
                                    [DeltaTable(table).file_uris()]).fetchall()
    assert sorted((int(p), int(o), bytes(v).decode()) for p, o, v in rows) == every
    # the table delta-spark's direct path created has maintenance's properties from its first version
    assert DeltaTable(table, version=0).metadata().configuration == spark_maintenance.table_properties(
        job.config.sink.maintenance)
