"""Kafka fetch responses decoded straight into Arrow columns.

kafka-python turns every record into two Python objects (a DefaultRecord, then a
ConsumerRecord) and decodes each varint in Python: about 5 µs a record, the ceiling of any
consumer built on it. `install(consumer)` makes the consumer's fetcher decode a whole fetch
response of a partition at once instead: kafka-python still checks CRCs (crc32c) and
decompresses each record batch; record boundaries come from a short Python loop (one
varint per record); every other field is decoded by vectorized Arrow kernels, and keys and
values are gathered into binary arrays without Python objects per record. `poll()` then
returns `{tp: [DecodedRecords]}`: one item per fetch response, offsets ascending, starting
at the fetch position.

This replaces `Fetcher.PartitionRecords._unpack_records`, a kafka-python internal (the
dependency is pinned to kafka-python 3.x); `install` fails loudly if it is missing.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate
from typing import Any, Iterator, Optional

import pyarrow as pa
import pyarrow.compute as pc
from kafka import KafkaConsumer
from kafka.consumer.fetcher import Fetcher
from kafka.errors import CorruptRecordError
from kafka.protocol.consumer import IsolationLevel
from kafka.structs import TopicPartition

KAFKA_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
])

_LOG_APPEND_TIME = 1
_VARINT_MAX_BYTES = 10
_PADDING = bytes(_VARINT_MAX_BYTES)
_NO_HEADERS = -1


@dataclass(frozen=True)
class DecodedRecords:
    """The records of one fetch response of one partition, offsets ascending."""

    batch: pa.RecordBatch  # KAFKA_SCHEMA
    payload: bytes  # the record bytes the headers are decoded from
    header_positions: pa.Int64Array  # per row: where its header count is in payload; -1: none

    @property
    def offset(self) -> int:
        """The last offset: kafka-python's fetcher skips items below its fetch position by it."""
        return self.batch.column(4)[-1].as_py()

    def headers(self, start: int, stop: int, type_: pa.DataType) -> pa.Array:
        """The headers of rows [start, stop) as `type_` (Spark's `array<struct<key, value>>`)."""
        rows = []
        payload = self.payload
        for position in self.header_positions.slice(start, stop - start).to_pylist():
            headers: list[dict[str, Any]] = []
            if position != _NO_HEADERS:
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


@dataclass(frozen=True)
class _Segment:
    """One record batch's records: where they are in the payload and the batch's header fields."""

    count: int
    base_offset: int
    first_timestamp: int
    max_timestamp: int
    timestamp_type: int


def _record_starts(payload: bytes, segments: list[_Segment]) -> list[int]:
    """Where each record (its length varint) starts; checks each batch ends with its last record."""
    starts: list[int] = []
    append = starts.append
    position = 0
    for segment in segments:
        for _ in range(segment.count):
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


def _per_record(segments: list[_Segment], field: str, type_: pa.DataType) -> pa.Array:
    run_ends = pa.array(list(accumulate(s.count for s in segments)), pa.int32())
    values = pa.array([getattr(s, field) for s in segments], type_)
    return pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(run_ends, values))


def _decode_v2(tp: TopicPartition, payload: bytes, segments: list[_Segment], fetch_offset: int
               ) -> Optional[DecodedRecords]:
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
        raise CorruptRecordError(f"{tp}: malformed record in a batch starting at offset {segments[0].base_offset}")

    offsets = pc.add(_per_record(segments, "base_offset", pa.int64()), offset_delta)
    first = pc.sum(pc.less(offsets, _i64(fetch_offset))).as_py() or 0
    count = len(starts) - first
    if count <= 0:
        return None
    created = pc.add(_per_record(segments, "first_timestamp", pa.int64()), timestamp_delta)
    timestamp_type = _per_record(segments, "timestamp_type", pa.int32())
    millis = pc.if_else(pc.equal(timestamp_type, pa.scalar(_LOG_APPEND_TIME, pa.int32())),
                        _per_record(segments, "max_timestamp", pa.int64()), created)

    def rows(array: pa.Array) -> pa.Array:
        return array.slice(first) if first else array

    batch = pa.RecordBatch.from_arrays([
        _binary(buffer, rows(key_start), rows(key_length)),
        _binary(buffer, rows(value_start), rows(value_length)),
        pa.repeat(pa.scalar(tp.topic, pa.string()), count),
        pa.repeat(pa.scalar(tp.partition, pa.int32()), count),
        rows(offsets),
        pc.multiply(rows(millis), _i64(1000)).cast(pa.timestamp("us", tz="UTC")),
        rows(timestamp_type),
    ], schema=KAFKA_SCHEMA)
    header_positions = pc.if_else(pc.greater(header_count, _ZERO), header_position, _i64(_NO_HEADERS))
    return DecodedRecords(batch, payload, rows(header_positions))


def _decode_legacy(tp: TopicPartition, records: list[Any]) -> DecodedRecords:
    """Message format v0/v1 (brokers before 0.11): few and small, decoded per record."""
    count = len(records)
    batch = pa.RecordBatch.from_arrays([
        pa.array([r.key for r in records], pa.binary()),
        pa.array([r.value for r in records], pa.binary()),
        pa.repeat(pa.scalar(tp.topic, pa.string()), count),
        pa.repeat(pa.scalar(tp.partition, pa.int32()), count),
        pa.array([r.offset for r in records], pa.int64()),
        pa.array([(r.timestamp if r.timestamp is not None else -1) * 1000 for r in records], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        pa.array([max(r.timestamp_type or 0, 0) for r in records], pa.int32()),
    ], schema=KAFKA_SCHEMA)
    return DecodedRecords(batch, b"", pa.repeat(pa.scalar(_NO_HEADERS, pa.int64()), count))


# --- the fetcher hook --------------------------------------------------------------------------

class ArrowPartitionRecords(Fetcher.PartitionRecords):
    """A partition's fetched records, decoded into one `DecodedRecords` per fetch response.

    Same batch-level rules as kafka-python: CRC check, control batches skipped, aborted
    transactions skipped under read_committed, records below the fetch offset dropped.
    """

    def _unpack_records(self, tp: TopicPartition, records: Any, key_deserializer: Any,
                        value_deserializer: Any) -> Iterator[DecodedRecords]:
        pieces = []
        payloads: list[memoryview] = []
        segments: list[_Segment] = []
        legacy: list[Any] = []

        def flush() -> None:
            if segments:
                pieces.append(_decode_v2(tp, b"".join(payloads + [_PADDING]), list(segments), self.fetch_offset))
                payloads.clear()
                segments.clear()
            if legacy:
                pieces.append(_decode_legacy(tp, [r for r in legacy if r.offset >= self.fetch_offset]))
                legacy.clear()

        batch = records.next_batch()
        while batch is not None:
            if self.check_crcs and not batch.validate_crc():
                raise CorruptRecordError(f"Record batch for partition {tp} at offset "
                                         f"{batch.base_offset} failed crc check")
            self.bytes_read += batch.size_in_bytes
            if batch.magic < 2:
                if segments:
                    flush()
                for record in batch:
                    if self.check_crcs and not record.validate_crc():
                        raise CorruptRecordError(f"Record for partition {tp} at offset {record.offset} "
                                                 "failed crc check")
                    legacy.append(record)
                self.next_fetch_offset = legacy[-1].offset + 1 if legacy else self.next_fetch_offset
            elif self._skip(batch):
                self.next_fetch_offset = batch.next_offset
            else:
                if legacy:
                    flush()
                iter(batch)  # decompresses
                payloads.append(memoryview(batch._buffer)[batch._pos:])
                segments.append(_Segment(batch.records_count, batch.base_offset, batch.first_timestamp,
                                         batch.max_timestamp, batch.timestamp_type))
                self.next_fetch_offset = batch.next_offset
            batch = records.next_batch()
        flush()
        decoded = [p for p in pieces if p is not None and p.batch.num_rows]
        self.records_read += sum(p.batch.num_rows for p in decoded)
        # Drained before the caller sees the data: the fetcher may fetch this partition again
        # while the caller converts and ships these records.
        self.drain()
        if len(decoded) == 1:
            yield decoded[0]
        elif decoded:
            yield DecodedRecords(pa.Table.from_batches([p.batch for p in decoded]).combine_chunks().to_batches()[0],
                                 b"".join(p.payload for p in decoded),
                                 _shifted_header_positions(decoded))

    def _skip(self, batch: Any) -> bool:
        """Control batches, and batches of aborted transactions under read_committed."""
        self.leader_epoch = batch.leader_epoch
        if self.isolation_level == IsolationLevel.READ_COMMITTED and batch.has_producer_id():
            self._consume_aborted_transactions_up_to(batch.last_offset)
            if self._contains_abort_marker(batch):
                self.aborted_producer_ids.discard(batch.producer_id)
            elif self._is_batch_aborted(batch):
                return True
        return batch.is_control_batch


def _shifted_header_positions(pieces: list[DecodedRecords]) -> pa.Array:
    shifted, base = [], 0
    for piece in pieces:
        positions = piece.header_positions
        shifted.append(pc.if_else(pc.equal(positions, _i64(_NO_HEADERS)), positions, pc.add(positions, _i64(base))))
        base += len(piece.payload)
    return pa.concat_arrays(shifted)


def install(consumer: KafkaConsumer) -> KafkaConsumer:
    """Make `consumer.poll()` return `DecodedRecords` instead of ConsumerRecords."""
    fetcher = getattr(consumer, "_fetcher", None)
    if not isinstance(fetcher, Fetcher) or not hasattr(Fetcher.PartitionRecords, "_unpack_records"):
        raise RuntimeError("this kafka-python version does not have the fetcher internals synclib's "
                           "Arrow reader replaces (Fetcher.PartitionRecords._unpack_records)")
    fetcher.PartitionRecords = ArrowPartitionRecords
    return consumer

