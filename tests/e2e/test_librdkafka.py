"""The job as users run it (spark-submit, --available-now) on a topic written by librdkafka, as
production producers write: 256 partitions (as production topics have), each with one of the
compression codecs (idempotent and not), and a transactional producer whose commit markers leave
offset gaps. The Delta table must hold exactly the records below the leader's commit of each
partition, each once, byte for byte as librdkafka produced them.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest
from confluent_kafka import Producer

from synclib.delta.table import read_arrow
from tests import mock_cluster
from tests.forwarder_runs import run_forwarder, table_offsets, write_config
from tests.librdkafka import CODECS, Produced, Record, produce_burst, producer, transaction
from tests.support import high_watermarks, publish_commit

pytestmark = pytest.mark.slow

GROUP = "snuba-consumers"
PER_PARTITION = 120
MANY_PARTITIONS = 256  # the codecs topic: each partition gated and released on its own
PER_MANY_PARTITION = 12
# What librdkafka produced per partition (its delivery reports), and where the leader commits first.
Written = tuple[dict[int, list[Produced]], dict[int, int]]


def records(tag: str, count: int) -> list[Record]:
    """Null keys, tombstones, headers with null and empty values, binary values of varied sizes,
    timestamps going back and forth (negative deltas within a batch)."""
    now_ms = int(time.time() * 1000)
    return [Record(None if i % 5 == 0 else f"{tag}-{i}".encode(),
                   None if i % 11 == 7 else bytes([i % 256]) * (i % 40) + f"{tag} value {i}".encode(),
                   [] if i % 3 == 0 else [("trace", f"{tag}-{i}".encode()), ("null", None), ("", b"")],
                   now_ms - 60_000 + (i * 7919) % 50_000)
            for i in range(count)]


def produce(kafka: Producer, topic: str, partition: int, batch: list[Record]) -> list[Produced]:
    """`produce_burst`, each record's timestamp being the CreateTime it was given: librdkafka's
    delivery reports say so too, except on librdkafka's mock, whose Produce responses carry a fake
    LogAppendTime that librdkafka reports instead."""
    produced = produce_burst(kafka, topic, partition, batch)
    reported = {p.timestamp_ms for p, r in zip(produced, batch, strict=True) if p.timestamp_ms != r.timestamp_ms}
    assert reported <= {mock_cluster.FAKE_LOG_APPEND_TIME_MS}, reported
    return [replace(p, timestamp_ms=r.timestamp_ms) for p, r in zip(produced, batch, strict=True)]


def codecs(bootstrap_servers: str, topic: str) -> Written:
    """Partition i with codec CODECS[i % 4], idempotent producers for every other codec; the leader
    first commits each partition halfway."""
    producers = [producer(bootstrap_servers, compression_type=codec, enable_idempotence=i % 2 == 0)
                 for i, codec in enumerate(CODECS)]
    produced = {partition: produce(producers[partition % len(CODECS)], topic, partition,
                                   records(f"{CODECS[partition % len(CODECS)]}-{partition}", PER_MANY_PARTITION))
                for partition in range(MANY_PARTITIONS)}
    return produced, {p: batch[len(batch) // 2].offset for p, batch in produced.items()}


def transactional(bootstrap_servers: str, topic: str) -> Written:
    """Partition 0 by a transactional producer: two committed transactions, each followed by its
    commit marker (an offset without a record); the leader first commits just past the first marker."""
    kafka = producer(bootstrap_servers, transactional_id=f"synclib-e2e-{uuid.uuid4().hex[:8]}",
                     compression_type="lz4", enable_idempotence=True)
    kafka.init_transactions(30)
    first = transaction(kafka, topic, 0, records("first", PER_PARTITION // 2), commit=True)
    second = transaction(kafka, topic, 0, records("second", PER_PARTITION // 2), commit=True)
    assert second[0].offset == first[-1].offset + 2  # the marker's offset between them
    return {0: first + second}, {0: first[-1].offset + 2}


PRODUCERS: dict[str, tuple[int, Callable[[str, str], Written]]] = {
    "codecs": (MANY_PARTITIONS, codecs), "transactional": (1, transactional)}


def table_records(table: str) -> list[Produced]:
    """The table's rows as librdkafka's delivery reports describe records, in offset order."""
    data = read_arrow(table, columns=["topic", "partition", "offset", "key", "value", "headers", "timestamp"])
    micros = data.column("timestamp").cast(pa.timestamp("us")).cast(pa.int64()).to_pylist()
    rows = [Produced(row["topic"], row["partition"], row["offset"], row["key"], row["value"],
                     [(h["key"], h["value"]) for h in row["headers"] or []], us // 1000)
            for row, us in zip(data.to_pylist(), micros, strict=True)]
    return sorted(rows, key=lambda r: (r.partition, r.offset))


def below(produced: Mapping[int, list[Produced]], commits: Mapping[int, int]) -> list[Produced]:
    return [r for p in sorted(produced) for r in produced[p] if r.offset < commits[p]]


def leader_commits(kafka: Producer, commit_log: str, topic: str, offsets: Mapping[int, int]) -> None:
    for partition, offset in offsets.items():
        publish_commit(kafka, commit_log, GROUP, topic, partition, offset)


@pytest.mark.parametrize("written_by", ["codecs", pytest.param("transactional",
                                                              marks=mock_cluster.CONTROL_BATCHES_WITHOUT_CRC)])
def test_librdkafka_topic_forwarded_byte_for_byte(written_by, bootstrap_servers, producer, new_topic,  # type: ignore[no-untyped-def]
                                                   tmp_path: Path):
    partitions, produce = PRODUCERS[written_by]
    topic = new_topic("events", partitions)
    commit_log = new_topic("commit-log")
    produced, first = produce(bootstrap_servers, topic)
    ends = high_watermarks(bootstrap_servers, topic, sorted(produced))
    # Each partition ends right after its last record, a transactional one after its commit marker.
    marker = 1 if written_by == "transactional" else 0
    assert ends == {p: batch[-1].offset + 1 + marker for p, batch in produced.items()}

    config = write_config(tmp_path, "librdkafka", bootstrap_servers,
                          {"subscribe": topic, "commit_log_topic": commit_log, "commit_groups": [GROUP],
                           "include_headers": True})
    table = str(tmp_path / "librdkafka" / "table")
    leader_commits(producer, commit_log, topic, first)
    run_forwarder(config, "--available-now")
    assert table_records(table) == below(produced, first)
    assert table_offsets(table) == {(topic, p): offset for p, offset in first.items()}

    leader_commits(producer, commit_log, topic, ends)  # the leader moves to the end
    run_forwarder(config, "--available-now")
    assert table_records(table) == below(produced, ends)
    assert table_offsets(table) == {(topic, p): offset for p, offset in ends.items()}
