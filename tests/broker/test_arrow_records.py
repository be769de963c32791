"""The Arrow fast path on real producers' batches, read from the broker: librdkafka writes every
compression codec, idempotent and transactional batches (commit and abort markers), headers with
null values, null keys, tombstones and a 600 kB value. The read path's two ways of decoding (the
Arrow fast path, and kafka-python's own parser through its public API, the fallback) must give
the same columns, equal to what librdkafka reported producing; a process whose fast path is
unusable (hook missing, unknown kafka-python version) falls back with one warning.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import kafka
import kafka.codec
import pyarrow as pa
import pytest
from kafka.consumer.fetcher import Fetcher

from synclib.compat.kafka_python import MissingCodecError
from synclib.kafka import fetch_path, reader
from synclib.kafka.reader import KafkaInputPartition, read_partition
from synclib.offsets import OffsetRange
from synclib.schema import output_schema
from tests import mock_cluster
from tests.librdkafka import CODECS, Produced, Record, produce_burst, producer, transaction
from tests.support import high_watermarks

SCHEMA = output_schema(include_headers=True)
LARGE_VALUE = os.urandom(1000) * 600  # 600 kB, compressible
# topic, produced per partition, end per partition, (first, last) millisecond of producing
Written = tuple[str, dict[int, list[Produced]], dict[int, int], tuple[int, int]]


def records(tag: str, count: int) -> list[Record]:
    """Null keys, tombstones, headers with null values and empty ones, varied sizes."""
    out = []
    for i in range(count):
        key = None if i % 4 == 0 else f"{tag}-key-{i}".encode()
        value = None if i % 7 == 3 else (f"{tag}-value-{i}-".encode() * (1 + i % 50))
        headers: list[tuple[str, bytes | None]] = [] if i % 3 == 0 else [
            ("trace", f"{tag}-{i}".encode()), ("null", None), ("", b"")]
        out.append(Record(key, value, headers))
    return out


@pytest.fixture(scope="module")
def compressed(bootstrap_servers: str, admin: Any) -> Written:
    """Partition i written by librdkafka with codec CODECS[i], idempotent for every other codec.
    The burst is batched when it is flushed (a linger longer than producing takes): librdkafka
    sends a batch uncompressed where compressing would grow it, as it would a first record that
    went alone because producing was slow."""
    topic = f"librdkafka-{uuid.uuid4().hex[:8]}"
    admin.create(topic, len(CODECS))
    produced: dict[int, list[Produced]] = {}
    began = now_ms()
    for partition, codec in enumerate(CODECS):
        batch = records(codec, 300)
        batch.insert(150, Record(b"large", LARGE_VALUE, [("size", b"600k")]))
        produced[partition] = produce_burst(
            producer(bootstrap_servers, compression_type=codec, enable_idempotence=partition % 2 == 0,
                     linger_ms=5000),
            topic, partition, batch)
    return topic, produced, high_watermarks(bootstrap_servers, topic, produced), (began, now_ms())


@pytest.fixture(scope="module")
def transactional(bootstrap_servers: str, admin: Any) -> Written:
    """Written by a transactional producer (zstd): commit, abort, commit; it ends with a marker."""
    topic = f"librdkafka-txn-{uuid.uuid4().hex[:8]}"
    admin.create(topic, 1)
    kafka = producer(bootstrap_servers, transactional_id=f"synclib-test-{uuid.uuid4().hex[:8]}",
                     compression_type="zstd", enable_idempotence=True)
    kafka.init_transactions(30)
    began = now_ms()
    produced = {0: [*transaction(kafka, topic, 0, records("committed", 40), commit=True),
                    *transaction(kafka, topic, 0, records("aborted", 30), commit=False),
                    *transaction(kafka, topic, 0, records("last", 20), commit=True)]}
    return topic, produced, high_watermarks(bootstrap_servers, topic, produced), (began, now_ms())


WRITTEN = ["compressed", pytest.param("transactional", marks=mock_cluster.CONTROL_BATCHES_WITHOUT_CRC)]


def read(bootstrap_servers: str, topic: str, partition: int, start: int, end: int) -> pa.Table:
    task = KafkaInputPartition([OffsetRange(topic, partition, start, end)])
    batches = list(read_partition(task, {"bootstrap_servers": [bootstrap_servers]}, SCHEMA, include_headers=True,
                                  fail_on_data_loss=True, poll_timeout_ms=200, stall_timeout_s=20))
    return pa.Table.from_batches(batches, SCHEMA)


def now_ms() -> int:
    return int(time.time() * 1000)


def as_produced(table: pa.Table) -> list[Produced]:
    return [Produced(row["topic"], row["partition"], row["offset"], row["key"], row["value"],
                     [(h["key"], h["value"]) for h in row["headers"] or []], int(row["timestamp"].timestamp() * 1000))
            for row in table.to_pylist()]


@pytest.mark.parametrize("written", WRITTEN)
def test_librdkafka_batches_decode_to_what_librdkafka_produced(
        written: str, bootstrap_servers: str, request: pytest.FixtureRequest, fresh_process: None) -> None:
    topic, produced, ends, (began, ended) = request.getfixturevalue(written)
    assert fetch_path.fast_path_problem() is None
    for partition, expected in produced.items():
        table = read(bootstrap_servers, topic, partition, 0, ends[partition])
        got = as_produced(table)
        assert [replace(p, timestamp_ms=0) for p in got] == [replace(p, timestamp_ms=0) for p in expected]
        # Create times, set by librdkafka as it produced; its reports say so too, except the mock
        # cluster's, which carry a placeholder log-append time.
        assert table.column("timestampType").unique().to_pylist() == [0]
        assert all(began <= p.timestamp_ms <= ended for p in got), (began, ended)
        if all(began <= p.timestamp_ms <= ended for p in expected):
            assert [p.timestamp_ms for p in got] == [p.timestamp_ms for p in expected]


def remove_a_hook(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fetcher internal the fast path needs goes away (kafka-python's own parser uses it only
    under read_committed, so kafka-python itself still reads these partitions)."""
    monkeypatch.delattr(Fetcher.PartitionRecords, "_contains_abort_marker")


# A process whose fast path is unusable, as an upgrade of kafka-python could make it.
SIMULATIONS: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "hook missing": remove_a_hook,
    "unknown kafka-python version": lambda mp: mp.setattr(kafka, "__version__", "3.1.0"),
}


@pytest.mark.parametrize("written", WRITTEN)
@pytest.mark.parametrize("simulation", sorted(SIMULATIONS))
def test_the_fallback_reads_the_same_columns_and_warns_once(
        simulation: str, written: str, bootstrap_servers: str, request: pytest.FixtureRequest,
        fresh_process: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    topic, produced, ends, _ = request.getfixturevalue(written)
    fast = {p: read(bootstrap_servers, topic, p, 0, ends[p]) for p in produced}
    middle = {p: read(bootstrap_servers, topic, p, 5, ends[p] - 5) for p in produced}

    monkeypatch.setattr(reader, "_consumers", {})  # a new worker process...
    fetch_path.fast_path_problem.cache_clear()
    SIMULATIONS[simulation](monkeypatch)  # ...with a kafka-python the fast path must not hook
    with caplog.at_level(logging.WARNING, logger=fetch_path.__name__):
        for partition in produced:
            slow = read(bootstrap_servers, topic, partition, 0, ends[partition])
            for name in SCHEMA.names:
                assert slow.column(name).equals(fast[partition].column(name)), f"partition {partition}: {name}"
            assert read(bootstrap_servers, topic, partition, 5, ends[partition] - 5).equals(middle[partition])
    warnings = [r.getMessage() for r in caplog.records if r.name == fetch_path.__name__]
    assert len(warnings) == 1 and warnings[0].startswith("synclib's Arrow reader is off: "), warnings
    assert fetch_path.fast_path_problem() is not None


@pytest.mark.parametrize("fast", [True, False], ids=["fast path", "fallback"])
@pytest.mark.parametrize("codec", ["snappy", "lz4", "zstd"])  # gzip is part of Python
def test_a_codec_without_its_library_fails_naming_partition_offset_codec_and_package(
        codec: str, fast: bool, bootstrap_servers: str, compressed: Written, fresh_process: None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """kafka-python looks the codec's library up through kafka.codec; without it, the read fails
    on the batch (which proves librdkafka compressed it) with a message that says what to do."""
    topic, _, ends, _ = compressed
    partition = CODECS.index(codec)
    if not fast:
        remove_a_hook(monkeypatch)
    assert (fetch_path.fast_path_problem() is None) == fast  # the worker started with every library
    monkeypatch.setattr(kafka.codec, f"has_{codec}", lambda: False)
    with pytest.raises(MissingCodecError) as error:
        read(bootstrap_servers, topic, partition, 0, ends[partition])
    package = {"snappy": "python-snappy", "lz4": "lz4", "zstd": "zstandard"}
    assert str(error.value) == (
        f"MissingCodecError: {topic}[{partition}] offset 0: cannot decode a record batch compressed with {codec}: "
        f"install the Python package {package[codec]!r} where the job runs (synclib's package dependencies include it)")
