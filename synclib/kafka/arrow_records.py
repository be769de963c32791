"""Kafka fetch responses decoded straight into Arrow columns.

kafka-python turns every record into two Python objects (a DefaultRecord, then a
ConsumerRecord) and decodes each varint in Python: about 5 µs a record, the ceiling of any
consumer built on it. With `arrow_partition_records()` installed on a consumer's fetcher
(`synclib.kafka.fetch_path` does that after a self-check), `poll()` returns `{tp:
[FetchedRecords]}`, one item per fetch response: its record batches, CRC-checked (crc32c) and
decompressed by kafka-python, not decoded yet. `decode_fetches` then decodes all of a poll's
responses at once, every partition together: record boundaries come from a short Python loop
(one varint per record); every other field is decoded by vectorized Arrow kernels, and keys
and values are gathered into binary arrays without Python objects per record. The
kafka-python internals this needs are in `synclib.compat.kafka_python`.

Without them, `listed_records` turns the public API's ConsumerRecords into the same columns.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from kafka.errors import CorruptRecordError
from kafka.structs import TopicPartition

from synclib.compat import kafka_python
from synclib.compat.kafka_python import BatchRecords, LegacyRecord, Piece
from synclib.schema import KAFKA_SCHEMA

_LOG_APPEND_TIME = 1
_VARINT_MAX_BYTES = 10
_PADDING = bytes(_VARINT_MAX_BYTES)
_NO_HEADERS = -1


@dataclass(frozen=True)
class DecodedRecords:
    """Decoded records: a poll's, partition by partition, each partition's offsets ascending."""

    batch: pa.RecordBatch  # KAFKA_SCHEMA
    payload: bytes  # the record bytes the headers are decoded from
    header_positions: pa.Int64Array  # per row: where its header count is in payload; -1: none

    def headers(self, start: int, stop: int, type_: pa.DataType) -> pa.Array:
        """The headers of rows [start, stop) as `type_` (Spark's `array<struct<key, value>>`);
        null for a record without headers, as Spark's Kafka source gives."""
        rows: list[list[dict[str, Any]] | None] = []
        payload = self.payload
        for position in self.header_positions.slice(start, stop - start).to_pylist():
            headers: list[dict[str, Any]] | None = None
            if position != _NO_HEADERS:
                headers = []
                count, position = _varint(payload, position)
                for _ in range(count):
                    size, position = _varint(payload, position)
                    key = payload[position:position + size].decode("utf-8")
                    size, position = _varint(payload, position + size)
                    value = None if size < 0 else payload[position:position + size]
                    position += max(size, 0)
                    headers.append({"key": key, "value": value})
            rows.append(headers)
        return pa.array(rows, type_)


def _varint(buffer: bytes, position: int) -> tuple[int, int]:
    """One zigzag varint at `position`: (value, position after it)."""
    raw = shift = 0
    while True:
        byte = buffer[position]
        position += 1
        raw |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (raw >> 1) ^ -(raw & 1), position
        shift += 7
        if shift >= 7 * _VARINT_MAX_BYTES:
            raise CorruptRecordError(f"varint longer than {_VARINT_MAX_BYTES} bytes at {position}")


# --- vectorized decoding of message format v2 records ------------------------------------------
# Arguments of Arrow kernels are typed scalars: a Python int makes pyarrow try to import numpy
# (absent here) on every call, which costs more than the kernel.

def _i64(value: int) -> pa.Int64Scalar:
    return pa.scalar(value, pa.int64())


_ZERO, _ONE, _LOW_BITS, _HIGH_BIT = _i64(0), _i64(1), _i64(0x7F), _i64(0x80)


def _arange(count: int) -> pa.Array:
    """0, 1, ..., count - 1 as int64."""
    return pc.subtract(pc.cumulative_sum(pa.repeat(_ONE, count)), _ONE)


def _varints(data: pa.Array, positions: pa.Array) -> tuple[pa.Array, pa.Array]:
    """The zigzag varints at `positions` of the uint8 array `data`: (values, positions after)."""
    first = pc.take(data, positions).cast(pa.int64())
    after = pc.add(positions, _ONE)
    if pc.max(first).as_py() < 0x80:
        raw = first
    else:
        raw, more = pc.bit_wise_and(first, _LOW_BITS), pc.greater_equal(first, _HIGH_BIT)
        for byte_index in range(1, _VARINT_MAX_BYTES):
            following = pc.take(data, pc.add(positions, _i64(byte_index))).cast(pa.int64())
            part = pc.shift_left(pc.bit_wise_and(following, _LOW_BITS), _i64(7 * byte_index))
            raw = pc.if_else(more, pc.bit_wise_or(raw, part), raw)
            after = pc.if_else(more, pc.add(after, _ONE), after)
            more = pc.and_(more, pc.greater_equal(following, _HIGH_BIT))
            if not pc.any(more).as_py():
                break
        else:
            raise CorruptRecordError(f"varint longer than {_VARINT_MAX_BYTES} bytes")
    values = pc.bit_wise_xor(pc.shift_right(raw, _ONE), pc.negate(pc.bit_wise_and(raw, _ONE)))
    return values, after


def _binary(data: pa.Buffer, starts: pa.Array, lengths: pa.Array) -> pa.Array:
    """A binary array of the byte ranges [start, start + length) of `data`; length -1 is null.

    The ranges and the gaps between them, interleaved, are a valid binary array over `data`;
    taking every other element copies the ranges out in one kernel call."""
    count = len(starts)
    valid = pc.greater_equal(lengths, _ZERO)
    if not pc.any(valid).as_py():
        return pa.nulls(count, pa.binary())
    ends = pc.add(starts, pc.max_element_wise(lengths, _ZERO))
    pair = _arange(2 * count)  # element 2i: range i; 2i + 1: the gap after it
    bounds = pc.take(pa.concat_arrays([starts, ends]),
                     pc.add(pc.shift_right(pair, _ONE), pc.multiply(pc.bit_wise_and(pair, _ONE), _i64(count))))
    offsets = pa.concat_arrays([bounds, ends.slice(count - 1)]).cast(pa.int32())
    spans = pa.Array.from_buffers(pa.binary(), 2 * count, [None, offsets.buffers()[1], data])
    values = spans.take(pc.multiply(_arange(count), _i64(2)))
    if pc.all(valid).as_py():
        return values
    return pa.Array.from_buffers(pa.binary(), count, [valid.buffers()[1], *values.buffers()[1:]])


def _record_starts(payload: bytes, segments: Sequence[BatchRecords]) -> list[int]:
    """Where each record (its length varint) starts; checks each batch ends with its last record."""
    starts: list[int] = []
    append = starts.append
    position = 0
    for segment in segments:
        for _ in range(segment.rows):
            append(position)
            byte = payload[position]
            if byte < 0x80:
                position += 1 + (byte >> 1)
            else:
                second = payload[position + 1]
                if second < 0x80:
                    position += 2 + ((((second << 7) | (byte & 0x7F))) >> 1)
                else:
                    length, after = _varint(payload, position)
                    position = after + length
    if position != len(payload) - len(_PADDING):
        raise CorruptRecordError(f"record lengths add up to {position} bytes, the batches hold "
                                 f"{len(payload) - len(_PADDING)}")
    return starts


def _per_record(run_ends: pa.Array, values: Sequence[Any], type_: pa.DataType) -> pa.Array:
    """Per record, the value of its batch (`run_ends`: where each batch's records end)."""
    return pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(run_ends, pa.array(values, type_)))


@dataclass(frozen=True)
class _Batch:
    """A v2 batch of a fetch response, with where its partition's rows start and end."""

    tp: TopicPartition
    records: BatchRecords
    fetch_offset: int
    end: int


def _decode_v2(run: Sequence[_Batch]) -> DecodedRecords | None:
    """Consecutive v2 batches, of any partitions, decoded by one pass of Arrow kernels: a
    batch's rows from its fetch offset up to its end."""
    segments = [b.records for b in run]
    payload = b"".join([*(s.payload for s in segments), _PADDING])
    starts = _record_starts(payload, segments)
    buffer = pa.py_buffer(payload)
    data = pa.Array.from_buffers(pa.uint8(), len(payload), [None, buffer])
    positions = pa.array(starts, pa.int64())
    length, position = _varints(data, positions)
    record_end = pc.add(position, length)
    timestamp_delta, position = _varints(data, pc.add(position, _ONE))  # after the attributes byte
    offset_delta, position = _varints(data, position)
    key_length, key_start = _varints(data, position)
    value_length, value_start = _varints(data, pc.add(key_start, pc.max_element_wise(key_length, _ZERO)))
    header_position = pc.add(value_start, pc.max_element_wise(value_length, _ZERO))
    header_count, headers_start = _varints(data, header_position)
    plain = pc.and_(pc.equal(header_count, _ZERO), pc.equal(headers_start, record_end))
    sane = pc.and_(pc.greater_equal(pc.min_element_wise(key_length, value_length), _i64(-1)),
                   pc.or_(plain, pc.greater(header_count, _ZERO)))
    if not pc.all(sane).as_py() or pc.min(length).as_py() < 0:
        bad = run[bisect.bisect_right(list(accumulate(s.rows for s in segments)),
                                      pc.index(pc.and_(sane, pc.greater_equal(length, _ZERO)), False).as_py())]
        raise CorruptRecordError(f"{bad.tp}: malformed record in a batch starting at offset "
                                 f"{bad.records.base_offset}")

    run_ends = pa.array(list(accumulate(s.rows for s in segments)), pa.int32())
    offsets = pc.add(_per_record(run_ends, [s.base_offset for s in segments], pa.int64()), offset_delta)
    keep = pc.and_(pc.greater_equal(offsets, _per_record(run_ends, [b.fetch_offset for b in run], pa.int64())),
                   pc.less(offsets, _per_record(run_ends, [b.end for b in run], pa.int64())))
    created = pc.add(_per_record(run_ends, [s.first_timestamp for s in segments], pa.int64()), timestamp_delta)
    timestamp_type = _per_record(run_ends, [s.timestamp_type for s in segments], pa.int32())
    millis = pc.if_else(pc.equal(timestamp_type, pa.scalar(_LOG_APPEND_TIME, pa.int32())),
                        _per_record(run_ends, [s.max_timestamp for s in segments], pa.int64()), created)
    batch = pa.RecordBatch.from_arrays([
        _binary(buffer, key_start, key_length),
        _binary(buffer, value_start, value_length),
        _per_record(run_ends, [b.tp.topic for b in run], pa.string()),
        _per_record(run_ends, [b.tp.partition for b in run], pa.int32()),
        offsets,
        pc.multiply(millis, _i64(1000)).cast(pa.timestamp("us", tz="UTC")),
        timestamp_type,
    ], schema=KAFKA_SCHEMA)
    header_positions = pc.if_else(pc.greater(header_count, _ZERO), header_position, _i64(_NO_HEADERS))
    if not pc.all(keep).as_py():
        batch, header_positions = batch.filter(keep), header_positions.filter(keep)
    return DecodedRecords(batch, payload, header_positions) if batch.num_rows else None


def _record_columns(records: Sequence[Any], topic: pa.Array, partition: pa.Array) -> pa.RecordBatch:
    """Records kafka-python parsed one by one (v0/v1 records, ConsumerRecords) as columns."""
    millis = [(r.timestamp if r.timestamp is not None else -1) * 1000 for r in records]
    return pa.RecordBatch.from_arrays([
        pa.array([r.key for r in records], pa.binary()),
        pa.array([r.value for r in records], pa.binary()),
        topic,
        partition,
        pa.array([r.offset for r in records], pa.int64()),
        pa.array(millis, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        pa.array([max(r.timestamp_type or 0, 0) for r in records], pa.int32()),
    ], schema=KAFKA_SCHEMA)


def _decode_legacy(tp: TopicPartition, records: Sequence[LegacyRecord], fetch_offset: int,
                   end: int) -> DecodedRecords:
    """Message format v0/v1 (brokers before 0.11): few and small, no headers, decoded per record."""
    kept = [r for r in records if fetch_offset <= r.offset < end]
    batch = _record_columns(kept, pa.repeat(pa.scalar(tp.topic, pa.string()), len(kept)),
                            pa.repeat(pa.scalar(tp.partition, pa.int32()), len(kept)))
    return DecodedRecords(batch, b"", pa.repeat(_i64(_NO_HEADERS), batch.num_rows))


@dataclass(frozen=True)
class FetchedRecords:
    """One fetch response of one partition, not decoded yet: what the fetcher hands a poll.

    A poll's responses are decoded together (`decode_fetches`): one decode costs about a hundred
    Arrow kernel calls whatever its size, a millisecond, so decoding each partition's response
    on its own made a poll over hundreds of partitions cost a millisecond per partition."""

    tp: TopicPartition
    pieces: tuple[Piece, ...]  # the data batches (control and aborted ones skipped), in order
    fetch_offset: int
    rows: int  # the records of its batches, those below the fetch offset included

    @property
    def offset(self) -> int:
        """The last batch's last offset: the partition's next position is past it (kafka-python's
        fetcher skips items below its fetch position by it)."""
        last = self.pieces[-1]
        return last.last_offset if isinstance(last, BatchRecords) else last[-1].offset

    def __len__(self) -> int:
        return self.rows

    @property
    def size(self) -> int:
        """The record bytes of its v2 batches (decompressed)."""
        return sum(len(p.payload) for p in self.pieces if isinstance(p, BatchRecords))


def fetched(tp: TopicPartition, pieces: Sequence[Piece], fetch_offset: int) -> FetchedRecords | None:
    """One fetch response's batches, if it has records at or after `fetch_offset` (the decoder
    of `synclib.compat.kafka_python.partition_records_class`)."""
    records = FetchedRecords(tp, tuple(pieces), fetch_offset,
                             sum(p.rows if isinstance(p, BatchRecords) else len(p) for p in pieces))
    return records if pieces and records.offset >= fetch_offset else None


def decode_fetches(fetches: Sequence[tuple[FetchedRecords, int]]) -> DecodedRecords | None:
    """The records of a poll's fetch responses, each with the offset its rows end before, as
    one item: each partition's rows at or after its fetch offset and below that end, in the
    order given (None: no such rows)."""
    decoded: list[DecodedRecords | None] = []
    run: list[_Batch] = []  # consecutive v2 batches: decoded together
    for records, end in fetches:
        for piece in records.pieces:
            if isinstance(piece, BatchRecords):
                run.append(_Batch(records.tp, piece, records.fetch_offset, end))
                continue
            if run:
                decoded.append(_decode_v2(run))
                run = []
            decoded.append(_decode_legacy(records.tp, piece, records.fetch_offset, end))
    if run:
        decoded.append(_decode_v2(run))
    found = [d for d in decoded if d is not None and d.batch.num_rows]
    if len(found) <= 1:
        return found[0] if found else None
    return DecodedRecords(pa.Table.from_batches([d.batch for d in found]).combine_chunks().to_batches()[0],
                          b"".join(d.payload for d in found), _shifted_header_positions(found))


def _shifted_header_positions(pieces: list[DecodedRecords]) -> pa.Array:
    shifted, base = [], 0
    for piece in pieces:
        positions = piece.header_positions
        shifted.append(pc.if_else(pc.equal(positions, _i64(_NO_HEADERS)), positions, pc.add(positions, _i64(base))))
        base += len(piece.payload)
    return pa.concat_arrays(shifted)


@functools.cache
def arrow_partition_records() -> type:
    """The fetcher's PartitionRecords class that yields `FetchedRecords` (call only when
    `synclib.compat.kafka_python.fast_path_problem()` is None)."""
    return kafka_python.partition_records_class(fetched)


# --- the public-API path -------------------------------------------------------------------------

@dataclass(frozen=True)
class ListedRecords:
    """Records that kafka-python's public API returned (ConsumerRecords), as Arrow columns."""

    batch: pa.RecordBatch  # KAFKA_SCHEMA
    header_rows: list[list[dict[str, Any]] | None]  # None: no headers (Spark gives null)

    def headers(self, start: int, stop: int, type_: pa.DataType) -> pa.Array:
        return pa.array(self.header_rows[start:stop], type_)


def listed_records(records: Sequence[Any]) -> ListedRecords:
    """kafka-python ConsumerRecords as Arrow columns."""
    return ListedRecords(_record_columns(records, pa.array([r.topic for r in records], pa.string()),
                                         pa.array([r.partition for r in records], pa.int32())),
                         [[{"key": key, "value": value} for key, value in r.headers] or None for r in records])


# A poll's records on either path.
Records = DecodedRecords | ListedRecords
