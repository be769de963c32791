"""The Arrow fetch decoder against kafka-python's own record parser, on the same bytes.

Record batches are built with kafka-python's MemoryRecordsBuilder (no broker needed):
keys and values null, empty, short and long (multi-byte varints), headers, offset gaps,
compression, message formats v0/v1, and fetch positions inside a batch.
"""

from __future__ import annotations

import random
from typing import Any, Optional

import pyarrow as pa
import pytest
from kafka.consumer.fetcher import Fetcher
from kafka.errors import CorruptRecordError
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder
from kafka.structs import TopicPartition

from synclib.kafka.arrow_records import KAFKA_SCHEMA, ArrowPartitionRecords, DecodedRecords

TP = TopicPartition("events", 3)
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
GZIP, NONE = 1, 0


def _blob(rng: random.Random) -> Optional[bytes]:
    size = rng.choice([-1, 0, 1, 63, 64, 200, 8191, 8192, 20000])
    return None if size < 0 else bytes(rng.getrandbits(8) for _ in range(size))


def build(seed: int, batches: int, magic: int = 2, compression: int = NONE) -> bytes:
    """Concatenated record batches with random records, offset gaps between batches."""
    rng = random.Random(seed)
    out, offset = bytearray(), 0
    for _ in range(batches):
        builder = MemoryRecordsBuilder(magic, compression, batch_size=1 << 24, offset=offset)
        if rng.random() < 0.3:
            builder.skip(rng.randint(1, 5))  # compacted away
        for _ in range(rng.choice([1, 2, 50, 300])):
            headers = [] if magic < 2 or rng.random() < 0.5 else [
                (f"h{i}", _blob(rng)) for i in range(rng.randint(1, 3))]
            timestamp = 1_700_000_000_000 + rng.randint(-10**6, 10**9)
            builder.append(timestamp, _blob(rng), _blob(rng), headers)
        builder.close()
        out += builder.records()._buffer
        offset = builder.next_offset()
    return bytes(out)


def expected(data: bytes, fetch_offset: int, with_headers: bool) -> list[dict[str, Any]]:
    records = Fetcher.PartitionRecords(fetch_offset, TP, MemoryRecords(data)).take()
    rows = []
    for r in records:
        row = {"key": r.key, "value": r.value, "topic": r.topic, "partition": r.partition,
               "offset": r.offset, "timestamp": (-1 if r.timestamp is None else r.timestamp) * 1000,
               "timestampType": max(r.timestamp_type or 0, 0)}
        if with_headers:
            row["headers"] = [{"key": k, "value": v} for k, v in r.headers]
        rows.append(row)
    return rows


def decoded(data: bytes, fetch_offset: int, with_headers: bool) -> tuple[ArrowPartitionRecords, list[dict[str, Any]]]:
    part = ArrowPartitionRecords(fetch_offset, TP, MemoryRecords(data))
    items = part.take()
    assert len(items) <= 1 and all(isinstance(i, DecodedRecords) for i in items)
    if not items:
        return part, []
    records = items[0]
    assert records.batch.schema.equals(KAFKA_SCHEMA)
    columns = records.batch.columns
    if with_headers:
        columns = columns + [records.headers(0, records.batch.num_rows, HEADERS)]
    table = pa.Table.from_arrays(columns, names=KAFKA_SCHEMA.names + (["headers"] if with_headers else []))
    table = table.set_column(5, "timestamp", table["timestamp"].cast(pa.int64()))
    return part, table.to_pylist()


@pytest.mark.parametrize("magic,compression", [(2, NONE), (2, GZIP), (1, NONE), (0, GZIP)])
@pytest.mark.parametrize("seed", [1, 2])
def test_same_records_as_kafka_python(magic: int, compression: int, seed: int) -> None:
    data = build(seed, batches=6, magic=magic, compression=compression)
    offsets = [r.offset for r in Fetcher.PartitionRecords(0, TP, MemoryRecords(data)).take()]
    for fetch_offset in sorted({0, 1, offsets[len(offsets) // 2], offsets[-1], offsets[-1] + 1}):
        for with_headers in (False, True):
            part, rows = decoded(data, fetch_offset, with_headers)
            assert rows == expected(data, fetch_offset, with_headers)
            assert part.next_fetch_offset > offsets[-1]
            assert not part  # drained: the fetcher may fetch this partition again


def test_corrupt_batch_fails_the_crc_check() -> None:
    data = bytearray(build(3, batches=1))
    data[-5] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        ArrowPartitionRecords(0, TP, MemoryRecords(bytes(data))).take()
