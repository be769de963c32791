"""Executor side: read exactly the offsets [start, end) of Kafka partitions as Arrow batches.

Consumers are cached per Python worker process (Spark reuses workers across tasks and
micro-batches), keyed by client configuration, so a task does not reconnect.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from kafka import KafkaConsumer, TopicPartition
from pyspark.sql.datasource import InputPartition

from synclib.compat import kafka_python
from synclib.kafka.arrow_records import Records
from synclib.kafka.client_config import for_consumer
from synclib.kafka.fetch_path import RecordsConsumer
from synclib.offsets import OffsetRange

logger = logging.getLogger(__name__)

ARROW_BATCH_ROWS = 8192
# Task sizing (see plan_tasks): small ranges are packed into tasks of about TASK_MIN_ROWS rows,
# ranges over TASK_MAX_ROWS are split.
TASK_MIN_ROWS = 50_000
TASK_MAX_ROWS = 500_000
# Read-path defaults that suit bulk reading; any of them can be overridden with kafka.*.
# A task reads a range known to exist, so the broker need not hold a fetch open waiting for
# data: a long-polling fetch left in flight at the end of a task would delay the next task
# on this consumer (one fetch in flight per broker) by up to fetch_max_wait_ms. Fetches of
# 1, 4 or 16 MiB cost the same CPU per record; 4 MiB keeps a worker's buffers small.
# A read task asks each fetch for the rows it still has to read, not the configured maxima: a
# fetch returns a partition's data up to its log end (within the limits), so a range of a few rows
# in a partition the leader is seconds behind decoded seconds of data to keep a few rows. Sizes:
# the rows left times the bytes per row this worker has decoded, times FETCH_SLACK, plus
# FETCH_MIN_BYTES per partition; times FETCH_GROWTH each time a poll leaves a partition without
# records while others got some (a record batch larger than the limit comes only for the first
# partition of a response: from 2 KiB, a 1 MiB batch needs three more round trips).
FETCH_SLACK = 1.5
FETCH_MIN_BYTES = 2 * 1024
FETCH_GROWTH = 8
READ_DEFAULTS = {
    "fetch_max_wait_ms": 50,
    "max_poll_records": 20000,
    "fetch_max_bytes": 16 * 1024 * 1024,
    "max_partition_fetch_bytes": 4 * 1024 * 1024,
    "receive_buffer_bytes": 4 * 1024 * 1024,
}


class KafkaDataLossError(RuntimeError):
    """Offsets the query was going to read no longer exist (failOnDataLoss=true)."""


class KafkaInputPartition(InputPartition):
    """One Spark task: offset ranges, the ranges of different partitions read together."""

    def __init__(self, ranges: Sequence[OffsetRange]) -> None:
        super().__init__(tuple(ranges))
        self.ranges = tuple(ranges)


def plan_tasks(ranges: Sequence[OffsetRange], min_rows: int = TASK_MIN_ROWS,
               max_rows: int = TASK_MAX_ROWS) -> list[KafkaInputPartition]:
    """Spark tasks for a micro-batch's ranges. Ranges over `max_rows` are split evenly (a hot
    partition keeps several cores busy); pieces of at least `min_rows` are a task each; smaller
    ones are bundled into tasks of about `min_rows` (each task costs two Python worker round
    trips and a Parquet file, so a small batch is one task), a last short bundle joining the
    least loaded task."""
    pieces = []
    for offsets in ranges:
        count = -(-offsets.size // max_rows)
        for index in range(count):
            start = offsets.start + offsets.size * index // count
            end = offsets.start + offsets.size * (index + 1) // count
            pieces.append(OffsetRange(offsets.topic, offsets.partition, start, end))
    tasks: list[list[OffsetRange]] = []
    bundle: list[OffsetRange] = []
    bundled = 0  # rows in `bundle` (summing it again for every piece is quadratic in partitions)
    for piece in sorted(pieces, key=lambda piece: -piece.size):
        if piece.size >= min_rows:
            tasks.append([piece])
            continue
        bundle.append(piece)
        bundled += piece.size
        if bundled >= min_rows:
            tasks.append(bundle)
            bundle, bundled = [], 0
    if bundle and tasks:
        min(tasks, key=lambda task: sum(p.size for p in task)).extend(bundle)
    elif bundle:
        tasks.append(bundle)
    return [KafkaInputPartition(sorted(task, key=lambda r: (r.topic, r.partition, r.start))) for task in tasks]


_consumers: dict[tuple[tuple[str, str], ...], RecordsConsumer] = {}
_consumers_lock = threading.Lock()


def consumer_settings(client_config: Mapping[str, Any]) -> dict[str, Any]:
    """kafka-python kwargs of the read path's consumers (also used by the benchmark's reference).
    Their metadata requests never create a topic: a worker's cached consumer stays assigned to
    the partitions it last read, and on a broker with auto.create.topics.enable (Kafka's
    default) its next metadata refresh would recreate a topic just deleted."""
    return {**READ_DEFAULTS, **for_consumer(client_config), "group_id": None,
            "enable_auto_commit": False, "auto_offset_reset": "earliest",
            "allow_auto_create_topics": False, "client_id": "synclib-reader"}


def cached_consumer(client_config: Mapping[str, Any]) -> RecordsConsumer:
    key = tuple(sorted((k, repr(v)) for k, v in client_config.items()))
    with _consumers_lock:
        consumer = _consumers.get(key)
        if consumer is None:
            consumer = RecordsConsumer(consumer_settings(client_config))
            _consumers[key] = consumer
        return consumer


def read_partition(
    task: KafkaInputPartition,
    client_config: Mapping[str, Any],
    schema: pa.Schema,
    *,
    include_headers: bool,
    fail_on_data_loss: bool,
    poll_timeout_ms: int,
    stall_timeout_s: float,
) -> Iterator[pa.RecordBatch]:
    """Yield the records of the task's offset ranges: offsets in [start, end), stopping on
    position (offsets may have gaps). The ranges of different partitions are read together, one
    fetch for all of them (a range per partition each round trip would make a batch of hundreds
    of small ranges cost hundreds of round trips). If a partition now ends before its range's
    end (topic recreated), that is data loss: fail, or warn and stop at what exists."""
    records_consumer = cached_consumer(client_config)
    for together in _rounds(task.ranges):
        yield from _read_together(records_consumer, together, schema, include_headers=include_headers,
                                  fail_on_data_loss=fail_on_data_loss, poll_timeout_ms=poll_timeout_ms,
                                  stall_timeout_s=stall_timeout_s)


def _rounds(ranges: Sequence[OffsetRange]) -> Iterator[dict[TopicPartition, OffsetRange]]:
    """The ranges in rounds of at most one range per partition, in order."""
    left = list(ranges)
    while left:
        together: dict[TopicPartition, OffsetRange] = {}
        later = []
        for offsets in left:
            tp = TopicPartition(offsets.topic, offsets.partition)
            if tp in together:
                later.append(offsets)
            else:
                together[tp] = offsets
        yield together
        left = later


def _read_together(records_consumer: RecordsConsumer, ranges: Mapping[TopicPartition, OffsetRange],
                   schema: pa.Schema, *, include_headers: bool, fail_on_data_loss: bool, poll_timeout_ms: int,
                   stall_timeout_s: float) -> Iterator[pa.RecordBatch]:
    consumer = records_consumer.kafka
    consumer.assign(list(ranges))
    consumer.resume(*ranges)  # paused when a previous task finished them
    kafka_python.seek(consumer, {tp: offsets.start for tp, offsets in ranges.items()})
    positions = {tp: offsets.start for tp, offsets in ranges.items()}
    last_progress = dict.fromkeys(ranges, time.monotonic())
    pending = {tp for tp, offsets in ranges.items() if offsets.start < offsets.end}
    growth = 1
    while pending:
        _size_fetches(records_consumer, [ranges[tp].end - positions[tp] for tp in pending], growth)
        polled = records_consumer.poll(poll_timeout_ms)
        now = time.monotonic()
        if any(polled.values()) and any(not polled.get(tp) for tp in pending):
            growth *= FETCH_GROWTH
        taken = {tp: items for tp, items in polled.items() if tp in pending and items}
        records = records_consumer.records(taken, {tp: ranges[tp].end for tp in taken})
        if records is not None:
            yield from _arrow_batches(records, schema, include_headers)
        for tp, items in taken.items():
            positions[tp], last_progress[tp] = max(positions[tp], items[-1].offset + 1), now
        if not any(polled.values()):
            # Nothing came: a range may end in control markers, aborted records or a gap (the
            # position moved past them), or be stalled. Asked only then.
            for tp, new_position in kafka_python.positions(consumer, sorted(pending)).items():
                if new_position is not None and new_position > positions[tp]:
                    positions[tp], last_progress[tp] = new_position, now
                elif now - last_progress[tp] > stall_timeout_s:
                    _stalled(consumer, tp, ranges[tp], positions[tp], stall_timeout_s, fail_on_data_loss)
                    positions[tp] = ranges[tp].end
        done = {tp for tp in pending if positions[tp] >= ranges[tp].end}
        if done:
            pending -= done
            consumer.pause(*done)  # no more fetches for them: the others may still need some


def _size_fetches(records_consumer: RecordsConsumer, rows_left: Sequence[int], growth: int) -> None:
    """Size the next fetches to the rows left (see FETCH_SLACK); before this worker has decoded
    anything, the configured limits stay."""
    bytes_per_row = records_consumer.bytes_per_row
    if bytes_per_row is None:
        return
    sizes = [int((rows * bytes_per_row * FETCH_SLACK + FETCH_MIN_BYTES) * growth) for rows in rows_left]
    records_consumer.size_fetches(max(sizes), sum(sizes))


def _stalled(consumer: KafkaConsumer, tp: TopicPartition, offsets: OffsetRange, position: int,
             stall_timeout_s: float, fail_on_data_loss: bool) -> None:
    """A range made no progress for `stall_timeout_s`: a stall (raise), or lost data (raise, or
    warn when failOnDataLoss=false and let the caller stop at what exists)."""
    hw = consumer.end_offsets([tp])[tp]
    if hw >= offsets.end:
        raise TimeoutError(f"no progress reading {offsets} for {stall_timeout_s:.0f}s at offset {position} "
                           f"(high watermark {hw})")
    message = (
        f"{offsets.topic}[{offsets.partition}]: offsets [{max(hw, offsets.start)}, {offsets.end}) are gone "
        f"(the partition now ends at {hw}; topic deleted and recreated or truncated)"
    )
    if fail_on_data_loss:
        raise KafkaDataLossError(message + "; set failOnDataLoss=false to continue")
    logger.warning("%s; continuing because failOnDataLoss=false", message)


def _arrow_batches(records: Records, schema: pa.Schema, include_headers: bool) -> Iterator[pa.RecordBatch]:
    """`records` in `schema`, at most ARROW_BATCH_ROWS rows per batch."""
    rows = records.batch
    for start in range(0, rows.num_rows, ARROW_BATCH_ROWS):
        length = min(ARROW_BATCH_ROWS, rows.num_rows - start)
        columns = rows.slice(start, length).columns
        if include_headers:
            columns.append(records.headers(start, start + length, schema.field("headers").type))
        yield pa.RecordBatch.from_arrays(columns, schema=schema)
