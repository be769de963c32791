"""The reference consumers the forwarder is measured against, each reading a whole backlog in
this process: one kafka-python consumer (the read path's client settings) and one librdkafka
consumer (confluent-kafka)."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

import confluent_kafka
from kafka import KafkaConsumer, TopicPartition

from benchmarks.cluster import WAIT_TIMEOUT_S, PartitionEnds, librdkafka_settings
from synclib.kafka import reader as partition_reader

LIBRDKAFKA_BATCH = 10_000  # messages per consume() call


def reference_rate(client_config: Mapping[str, Any], topic: str, ends: PartitionEnds) -> float:
    """msg/s of one plain kafka-python consumer reading the whole backlog."""
    consumer = KafkaConsumer(**partition_reader.consumer_settings(client_config))
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(ends)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        total, count = sum(ends.values()), 0
        started = time.monotonic()
        while count < total:
            for records in consumer.poll(timeout_ms=1000).values():
                count += len(records)
            if time.monotonic() - started > WAIT_TIMEOUT_S:
                raise TimeoutError(f"reference consumer read {count} of {total} records")
        return count / (time.monotonic() - started)
    finally:
        consumer.close()


def librdkafka_rate(client_config: Mapping[str, Any], topic: str, ends: PartitionEnds) -> float:
    """msg/s of one librdkafka consumer (confluent-kafka) reading the whole backlog with batch
    `consume` calls; it checks CRCs, as kafka-python and the forwarder do (librdkafka's default
    does not), and fetches without backing off: by default, once 100,000 messages are queued
    locally, librdkafka postpones the next fetch by fetch.queue.backoff.ms (1 s), which held it
    at 160-190k msg/s here against 480-690k without (same CPU per message)."""
    consumer = confluent_kafka.Consumer({
        **librdkafka_settings(client_config),
        "group.id": f"synclib-benchmark-{os.getpid()}", "enable.auto.commit": False,
        "enable.auto.offset.store": False, "check.crcs": True, "fetch.queue.backoff.ms": 0,
    })
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in sorted(ends)])
        total, count = sum(ends.values()), 0
        started = time.monotonic()
        while count < total:
            for message in consumer.consume(num_messages=LIBRDKAFKA_BATCH, timeout=1.0):
                error = message.error()
                if error is not None:
                    raise RuntimeError(f"librdkafka reference consumer: {error}")
                count += 1
            if time.monotonic() - started > WAIT_TIMEOUT_S:
                raise TimeoutError(f"librdkafka reference consumer read {count} of {total} records")
        return count / (time.monotonic() - started)
    finally:
        consumer.close()

