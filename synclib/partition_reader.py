"""Executor side: read exactly the offsets [start, end) of one partition as Arrow batches.

Consumers are cached per Python worker process (Spark reuses workers across tasks and
micro-batches), keyed by client configuration, so a task does not reconnect.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Iterator, Mapping, Optional

import pyarrow as pa
from kafka import KafkaConsumer, TopicPartition
from pyspark.sql.datasource import InputPartition

from synclib import kafkaconf

logger = logging.getLogger(__name__)

ARROW_BATCH_ROWS = 8192
# Read-path defaults that suit bulk reading; any of them can be overridden with kafka.*.
READ_DEFAULTS = {
    "max_poll_records": 20000,
    "fetch_max_bytes": 64 * 1024 * 1024,
    "max_partition_fetch_bytes": 16 * 1024 * 1024,
    "receive_buffer_bytes": 4 * 1024 * 1024,
}


class KafkaDataLossError(RuntimeError):
    """Offsets the query was going to read no longer exist (failOnDataLoss=true)."""


class KafkaInputPartition(InputPartition):
    """One Spark task: the offsets [start, end) of one Kafka partition."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end


_consumers: dict[tuple, KafkaConsumer] = {}
_consumers_lock = threading.Lock()


def consumer_settings(client_config: Mapping[str, Any]) -> dict[str, Any]:
    """kafka-python kwargs of the read path's consumers (also used by the benchmark's reference)."""
    return {**READ_DEFAULTS, **kafkaconf.for_consumer(client_config), "group_id": None,
            "enable_auto_commit": False, "auto_offset_reset": "earliest",
            "client_id": "synclib-reader"}


def _cached_consumer(client_config: Mapping[str, Any]) -> KafkaConsumer:
    key = tuple(sorted((k, repr(v)) for k, v in client_config.items()))
    with _consumers_lock:
        consumer = _consumers.get(key)
        if consumer is None:
            consumer = KafkaConsumer(**consumer_settings(client_config))
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
    """Yield the records with offsets in [task.start, task.end), stopping on position (offsets
    may have gaps). If the partition now ends before `task.end` (topic recreated), that is data
    loss: fail, or warn and stop at what exists."""
    consumer = _cached_consumer(client_config)
    tp = TopicPartition(task.topic, task.partition)
    consumer.assign([tp])
    consumer.seek(tp, task.start)
    builder = _BatchBuilder(schema, include_headers)
    last_progress = time.monotonic()
    position = task.start
    while position < task.end:
        records = consumer.poll(timeout_ms=poll_timeout_ms).get(tp, ())
        for record in records:
            if record.offset >= task.end:
                break
            builder.add(record)
            if builder.rows >= ARROW_BATCH_ROWS:
                yield builder.flush()
        new_position = consumer.position(tp)
        if new_position > position:
            position, last_progress = new_position, time.monotonic()
        elif time.monotonic() - last_progress > stall_timeout_s:
            hw = consumer.end_offsets([tp])[tp]
            if hw >= task.end:
                raise TimeoutError(
                    f"{task.topic}[{task.partition}]: no progress reading offsets "
                    f"[{task.start}, {task.end}) for {stall_timeout_s:.0f}s at offset {position} "
                    f"(high watermark {hw})"
                )
            message = (
                f"{task.topic}[{task.partition}]: offsets [{max(hw, task.start)}, {task.end}) are gone "
                f"(the partition now ends at {hw}; topic deleted and recreated or truncated)"
            )
            if fail_on_data_loss:
                raise KafkaDataLossError(message + "; set failOnDataLoss=false to continue")
            logger.warning("%s; continuing because failOnDataLoss=false", message)
            break
    if builder.rows:
        yield builder.flush()


class _BatchBuilder:
    """Accumulates consumer records column by column and emits Arrow record batches."""

    def __init__(self, schema: pa.Schema, include_headers: bool) -> None:
        self._schema = schema
        self._include_headers = include_headers
        self._reset()

    def _reset(self) -> None:
        self.rows = 0
        self._keys: list[Optional[bytes]] = []
        self._values: list[Optional[bytes]] = []
        self._topics: list[str] = []
        self._partitions: list[int] = []
        self._offsets: list[int] = []
        self._timestamps: list[int] = []
        self._timestamp_types: list[int] = []
        self._headers: list[list[dict[str, Any]]] = []

    def add(self, record: Any) -> None:
        self.rows += 1
        self._keys.append(record.key)
        self._values.append(record.value)
        self._topics.append(record.topic)
        self._partitions.append(record.partition)
        self._offsets.append(record.offset)
        self._timestamps.append(record.timestamp * 1000)
        self._timestamp_types.append(max(record.timestamp_type, 0))
        if self._include_headers:
            self._headers.append([{"key": k, "value": v} for k, v in (record.headers or ())])

    def flush(self) -> pa.RecordBatch:
        fields = self._schema
        columns = [
            pa.array(self._keys, fields.field("key").type),
            pa.array(self._values, fields.field("value").type),
            pa.array(self._topics, fields.field("topic").type),
            pa.array(self._partitions, fields.field("partition").type),
            pa.array(self._offsets, fields.field("offset").type),
            pa.array(self._timestamps, pa.int64()).cast(fields.field("timestamp").type),
            pa.array(self._timestamp_types, fields.field("timestampType").type),
        ]
        if self._include_headers:
            columns.append(pa.array(self._headers, fields.field("headers").type))
        batch = pa.RecordBatch.from_arrays(columns, schema=self._schema)
        self._reset()
        return batch
