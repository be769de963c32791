"""Producing with librdkafka (confluent-kafka), as most production producers do.

Every record is returned as librdkafka reported it in its delivery report (offset, key, value,
headers, timestamp), so tests can compare what the forwarder wrote with what was produced,
byte for byte. A burst ends with a one-record batch: the embedded broker (Tansu) reports a
partition's end as its last batch's base offset + 1.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

CODECS = ("gzip", "snappy", "lz4", "zstd")
DELIVERY_TIMEOUT_S = 30.0

Headers = list[tuple[str, bytes | None]]


@dataclass(frozen=True)
class Record:
    """What to produce."""

    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp_ms: int | None = None  # CreateTime; None: librdkafka's clock at produce()


@dataclass(frozen=True)
class Produced:
    """One record as librdkafka's delivery report described it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp_ms: int


class ProduceError(AssertionError):
    """librdkafka reported a failed delivery."""


def producer(bootstrap_servers: str, **config: Any) -> Producer:
    """A librdkafka producer; `config` takes librdkafka's dotted names with '_' for '.'."""
    settings = {"bootstrap.servers": bootstrap_servers, "linger.ms": 5, "acks": "all",
                "enable.idempotence": False}
    settings.update({name.replace("_", "."): value for name, value in config.items()})
    return Producer(settings)


def produce_burst(kafka: Producer, topic: str, partition: int, records: Sequence[Record]) -> list[Produced]:
    """Produce `records` to one partition and wait for every delivery report; the last record
    goes alone in its own batch. Inside a transaction the reports arrive as they are delivered
    (before the commit)."""
    delivered: list[Produced] = []
    failures: list[str] = []

    def report(record: Record, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            failures.append(f"{topic}[{partition}]: {error}")
            return
        _, timestamp_ms = message.timestamp()
        delivered.append(Produced(message.topic(), message.partition(), message.offset(), message.key(),
                                  message.value(), list(record.headers), timestamp_ms))  # reports lack headers

    for chunk in (records[:-1], records[-1:]):
        for record in chunk:
            kafka.produce(topic, key=record.key, value=record.value, partition=partition,
                          headers=record.headers, timestamp=record.timestamp_ms or 0,
                          on_delivery=functools.partial(report, record))
        remaining = kafka.flush(DELIVERY_TIMEOUT_S)
        if remaining:
            raise ProduceError(f"{remaining} records to {topic}[{partition}] undelivered after "
                               f"{DELIVERY_TIMEOUT_S:g}s")
    if failures:
        raise ProduceError("; ".join(failures))
    return sorted(delivered, key=lambda p: p.offset)


def transactional_producer(bootstrap_servers: str) -> Producer:
    """An idempotent lz4 producer with a fresh transactional id, its transactions initialised."""
    kafka = producer(bootstrap_servers, transactional_id=f"synclib-test-{uuid.uuid4().hex[:8]}",
                     enable_idempotence=True, compression_type="lz4")
    kafka.init_transactions(DELIVERY_TIMEOUT_S)
    return kafka


def transaction(kafka: Producer, topic: str, partition: int, records: Sequence[Record], *,
                commit: bool) -> list[Produced]:
    """One transaction of `kafka` (init_transactions done), committed or aborted after its records
    reached the log (an abort drops records still queued in librdkafka); its commit or abort
    marker takes the offset after them."""
    kafka.begin_transaction()
    produced = produce_burst(kafka, topic, partition, records)
    if commit:
        kafka.commit_transaction(DELIVERY_TIMEOUT_S)
    else:
        kafka.abort_transaction(DELIVERY_TIMEOUT_S)
    return produced
