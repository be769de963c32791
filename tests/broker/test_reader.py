"""The read path (synclib/kafka/reader.py) on transactional topics: control markers take offsets, so
a partition has gaps and may end in a marker; the read path must still reach the planner's end. With
`kafka.isolation.level` read_committed, aborted records are skipped and the planner stops at the last
stable offset. A task of a few rows per partition fetches about those rows (the fetch sizing).

Tansu 0.6 (the embedded broker) keeps no aborted-transaction index: its fetch responses carry an
empty aborted-transactions list under read_committed, so aborted records come back, and its
ListOffsets(read_committed) answers 0 while a transaction is open. librdkafka's mock cluster
writes control batches that fail kafka-python's CRC check, answers ListOffsets(read_committed)
with the high watermark and returns aborted and open transactions' records under read_committed.
The read_committed test runs on Apache Kafka (the default test broker, 4.4, and 3.9).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pyarrow as pa
import pytest
from kafka import KafkaConsumer, TopicPartition

from synclib.compat import kafka_python
from synclib.kafka import reader
from synclib.kafka.reader import KafkaInputPartition, read_partition
from synclib.offsets import OffsetRange
from synclib.schema import output_schema
from tests import mock_cluster
from tests.librdkafka import Record, produce_burst, producer, transaction, transactional_producer
from tests.support import high_watermarks

SCHEMA = output_schema(include_headers=True)
STALL_TIMEOUT_S = 10.0
NO_ABORTED_INDEX = ("Tansu 0.6 keeps no aborted-transaction index (fetch responses under read_committed list no "
                    "aborted transactions, so aborted records come back) and answers ListOffsets(read_committed) "
                    "with 0 while a transaction is open")
MOCK_NO_TRANSACTIONS = (f"{mock_cluster.NAME}: control batches with CRC 0, no last stable offset and no "
                        "aborted-transaction index (read_committed returns aborted and open transactions' records)")


def records(tag: str, count: int) -> list[Record]:
    return [Record(f"{tag}-{i}".encode(), f"{tag}-value-{i}".encode(), [("tag", tag.encode())]) for i in range(count)]


def ends(bootstrap_servers: str, topic: str, isolation_level: str) -> int:
    """The planner's end of partition 0 (high watermark, or last stable offset)."""
    return high_watermarks(bootstrap_servers, topic, [0], isolation_level)[0]


def read(bootstrap_servers: str, topic: str, start: int, end: int, isolation_level: str = "read_uncommitted"
         ) -> tuple[list[int], float]:
    """The offsets read in [start, end) and how long reading took."""
    task = KafkaInputPartition([OffsetRange(topic, 0, start, end)])
    began = time.monotonic()
    batches = list(read_partition(task, {"bootstrap_servers": [bootstrap_servers], "isolation_level": isolation_level},
                                  SCHEMA, include_headers=True, fail_on_data_loss=True, poll_timeout_ms=200,
                                  stall_timeout_s=STALL_TIMEOUT_S))
    return pa.Table.from_batches(batches, SCHEMA).column("offset").to_pylist(), time.monotonic() - began


@mock_cluster.CONTROL_BATCHES_WITHOUT_CRC
def test_ranges_ending_in_control_markers_reach_their_end(bootstrap_servers: str, new_topic: Any) -> None:
    topic = new_topic("txn")
    kafka = transactional_producer(bootstrap_servers)
    committed = transaction(kafka, topic, 0, records("committed", 30), commit=True)
    aborted = transaction(kafka, topic, 0, records("aborted", 20), commit=False)
    last = transaction(kafka, topic, 0, records("last", 10), commit=True)
    data = [p.offset for p in committed + aborted + last]
    end = ends(bootstrap_servers, topic, "read_uncommitted")
    markers = sorted(set(range(end)) - set(data))
    # One marker after each transaction; the partition ends with one.
    assert markers == [committed[-1].offset + 1, aborted[-1].offset + 1, end - 1], (markers, end)

    offsets, took = read(bootstrap_servers, topic, 0, end)
    assert offsets == data  # read_uncommitted: the aborted records too, the markers' offsets are gaps
    assert took < STALL_TIMEOUT_S / 2
    for start, stop in [(markers[0], markers[0] + 1), (markers[1] - 3, markers[1] + 1), (end - 1, end),
                        (last[-1].offset, end)]:
        offsets, took = read(bootstrap_servers, topic, start, stop)
        assert offsets == [o for o in data if start <= o < stop], (start, stop)
        assert took < STALL_TIMEOUT_S / 2, f"[{start}, {stop}) took {took:.1f}s: it stalled on a marker"


@pytest.mark.unsupported_on("tansu", NO_ABORTED_INDEX)
@pytest.mark.unsupported_on(mock_cluster.NAME, MOCK_NO_TRANSACTIONS)
def test_read_committed_skips_aborted_records_and_stops_at_the_last_stable_offset(
        bootstrap_servers: str, new_topic: Any) -> None:
    topic = new_topic("txn-committed")
    kafka = transactional_producer(bootstrap_servers)
    committed = transaction(kafka, topic, 0, records("committed", 30), commit=True)
    aborted = transaction(kafka, topic, 0, records("aborted", 20), commit=False)
    kafka.begin_transaction()
    open_transaction = produce_burst(kafka, topic, 0, records("open", 10))

    stable = ends(bootstrap_servers, topic, "read_committed")
    assert stable == open_transaction[0].offset  # no further than the open transaction's first record
    assert ends(bootstrap_servers, topic, "read_uncommitted") == open_transaction[-1].offset + 1
    offsets, _ = read(bootstrap_servers, topic, 0, stable, "read_committed")
    assert offsets == [p.offset for p in committed]
    assert not {p.offset for p in aborted} & set(offsets)

    kafka.commit_transaction(30)
    end = ends(bootstrap_servers, topic, "read_committed")
    assert end == open_transaction[-1].offset + 2  # its records and its marker
    offsets, _ = read(bootstrap_servers, topic, stable, end, "read_committed")
    assert offsets == [p.offset for p in open_transaction]


@pytest.mark.requires_kafka("the fetch sizes per partition: Tansu returned 736 of the 800 rows past the ranges "
                            "whatever the sizes, librdkafka's mock cluster a batch per partition and fetch")
def test_a_task_of_a_few_rows_per_partition_fetches_about_those_rows_not_the_partitions_to_their_ends(
        bootstrap_servers: str, admin: Any, fresh_process: None) -> None:
    """As a micro-batch behind a leader reads: each partition holds far more than its range, in
    single-record batches (a live producer spread over many partitions writes so). Once a worker
    knows the bytes per row, each fetch asks for the rows the task has left, not 4 MiB."""
    topic, partitions, rows, few = f"sized-{uuid.uuid4().hex[:8]}", 8, 200, 5
    admin.create(topic, partitions)
    kafka = producer(bootstrap_servers, batch_num_messages=1)
    produced = {p: produce_burst(kafka, topic, p, [Record(f"k{i}".encode(), b"v" * 500, []) for i in range(rows)])
                for p in range(partitions)}
    config = {"bootstrap_servers": [bootstrap_servers]}

    def task(start: int, end: int) -> tuple[pa.Table, int]:
        """The rows of [start, end) of every partition, and how many rows the task decoded."""
        before = reader.cached_consumer(config).fetched_rows
        ranges = [OffsetRange(topic, p, produced[p][start].offset, produced[p][end].offset) for p in produced]
        batches = list(read_partition(KafkaInputPartition(ranges), config, SCHEMA, include_headers=True,
                                      fail_on_data_loss=True, poll_timeout_ms=200, stall_timeout_s=20))
        return pa.Table.from_batches(batches, SCHEMA), reader.cached_consumer(config).fetched_rows - before

    _, first = task(0, few)  # a new worker: the configured limits, each partition read to its end
    table, decoded = task(100, 100 + few)

    assert first == partitions * rows
    got = zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True)
    assert sorted(got) == sorted((p, record.offset) for p in produced for record in produced[p][100:100 + few])
    assert decoded <= partitions * few * 4, f"decoded {decoded} rows for {partitions * few}"  # unsized: 800


def test_a_task_seeks_every_partition_at_once_and_refuses_an_unassigned_one(bootstrap_servers: str,
                                                                           new_topic: Any) -> None:
    """`kafka_python.seek`: KafkaConsumer.seek's effect for hundreds of partitions (the public call
    checks each against a set of the assignment built anew)."""
    topic, partitions = new_topic("seek", 300), 300
    kafka = producer(bootstrap_servers)
    for p in range(partitions):
        kafka.produce(topic, value=b"v", partition=p)
    assert kafka.flush(30) == 0
    consumer = KafkaConsumer(bootstrap_servers=[bootstrap_servers], enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps[:-1])
        consumer.seek_to_end(*tps[:-1])

        kafka_python.seek(consumer, {tp: tp.partition % 2 for tp in tps[:-1]})

        assert {tp: consumer.position(tp) for tp in tps[:-1]} == {tp: tp.partition % 2 for tp in tps[:-1]}
        with pytest.raises(ValueError, match="Unassigned partition"):
            kafka_python.seek(consumer, {tps[0]: 0, tps[-1]: 0})
    finally:
        consumer.close()
