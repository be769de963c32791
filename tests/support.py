"""Helpers shared by the tests: bounded waits, producing, committing as the leader."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

from kafka import KafkaProducer

from benchmarks.job_world import wait_for
from synclib.kafka.admin import KafkaMetadata
from synclib.kafka.subscription import Subscription
from synclib.leader.commitlog import Commit, encode_commit

T = TypeVar("T")

Record = tuple[bytes | None, bytes | None]


def wait_until(
    condition: Callable[[], T], timeout_s: float = 30.0, what: str = "condition", interval_s: float = 0.05
) -> T:
    """Poll `condition` until it returns something truthy; fail with `what` at the deadline
    (`benchmarks.job_world.wait_for` without a job)."""
    return wait_for(condition, timeout_s, what, interval_s=interval_s)


def produce(
    producer: KafkaProducer,
    topic: str,
    partition: int,
    records: Iterable[Record],
    headers: Sequence[tuple[str, bytes]] = (),
) -> None:
    """Send records to one partition and flush; the last one goes alone in its own batch
    so that even the embedded broker reports the exact high watermark."""
    items = list(records)
    for key, value in items[:-1]:
        producer.send(topic, key=key, value=value, partition=partition, headers=list(headers))
    producer.flush()
    if items:
        key, value = items[-1]
        producer.send(topic, key=key, value=value, partition=partition, headers=list(headers)).get(30)


def produce_values(producer: KafkaProducer, topic: str, partition: int, count: int, prefix: str = "v") -> None:
    """Produce `count` records with keys/values that name their partition and sequence."""
    produce(
        producer, topic, partition,
        [(f"{partition}-{i}".encode(), f"{prefix}-{partition}-{i}".encode()) for i in range(count)],
    )


def publish_commit(
    producer: KafkaProducer, commit_log_topic: str, group: str, topic: str, partition: int, offset: int
) -> None:
    """Publish one leader commit in the current format and wait until the broker has it."""
    key, value = encode_commit(Commit(group, topic, partition, offset, orig_message_ts=time.time()))
    producer.send(commit_log_topic, key=key, value=value, partition=0).get(30)


def publish_raw(producer: KafkaProducer, topic: str, key: bytes | None, value: bytes | None,
                headers: Sequence[tuple[str, bytes]] = ()) -> None:
    producer.send(topic, key=key, value=value, partition=0, headers=list(headers)).get(30)


def high_watermarks(bootstrap_servers: str, topic: str, partitions: Iterable[int],
                    isolation_level: str = "read_uncommitted") -> dict[int, int]:
    """Each partition's end (next offset), as the planner reads it (read_committed: the last stable offset)."""
    metadata = KafkaMetadata({"bootstrap_servers": [bootstrap_servers], "isolation_level": isolation_level},
                             Subscription(topics=(topic,)))
    try:
        return {p: end for (_, p), end in metadata.high_watermarks([(topic, p) for p in partitions]).items()}
    finally:
        metadata.close()
