"""The benchmark's Kafka side: the cluster under test with its topics, backlogs of distinct
events, a live producer, and the leader's commits to its commit-log topic."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kafka import KafkaProducer

from synclib.background import BackgroundThread
from synclib.kafka.client_config import for_admin, for_producer
from synclib.leader.commitlog import Commit, encode_commit

logger = logging.getLogger(__name__)

LEADER_GROUP = "benchmark-leader"
WAIT_TIMEOUT_S = 600.0  # the longest any phase waits for the records it expects

PartitionEnds = dict[int, int]


def event_values(value_bytes: int) -> Callable[[int, int], bytes]:
    """(partition, sequence) -> a Sentry-like JSON event of `value_bytes` bytes with a unique
    event id: distinct values, so Parquet encoding costs what it costs on real events."""
    from synclib.embedded.world import make_event

    template = make_event(1, value_bytes, random.Random(0))
    at = template.index(b'"event_id": "') + len(b'"event_id": "')
    head, tail = template[:at], template[at + 32:]
    return lambda partition, sequence: b"%s%08x%024x%s" % (head, partition, sequence, tail)


class LiveProducer(BackgroundThread):
    """Writes `rate` events/s round-robin over the partitions in bursts every 50 ms (cheap
    formatted values, not to steal the forwarder's CPU), each burst ending with a single-record
    batch per partition, as the embedded broker needs for exact high watermarks."""

    def __init__(self, cluster: Cluster, topic: str, rate: float, value_bytes: int) -> None:
        super().__init__("live-producer")
        self._cluster, self._topic, self._rate = cluster, topic, rate
        self._event = event_values(value_bytes)
        self._produced: PartitionEnds = {}
        self._lock = threading.Lock()

    def produced(self) -> PartitionEnds:
        """Next offset per partition, as acknowledged; raises if the producer thread died."""
        if self.failure is not None:
            raise RuntimeError(f"the live producer died: {self.failure!r}") from self.failure
        with self._lock:
            return dict(self._produced)

    def _work(self) -> None:
        from synclib.embedded.simulation import send_ending_single

        partitions = self._cluster.partitions
        producer = self._cluster.producer(linger_ms=5)
        try:
            started, sent = time.monotonic(), 0
            while not self._stopping.wait(0.05):
                due = int(self._rate * (time.monotonic() - started))
                records: dict[int, list[Any]] = {}
                for sequence in range(sent, due):
                    partition = sequence % partitions
                    records.setdefault(partition, []).append((None, self._event(partition, sequence), []))
                sent = due
                ends = send_ending_single(producer, self._topic, records)
                with self._lock:
                    self._produced.update(ends)
        finally:
            producer.close(timeout=5)


class Cluster:
    """The broker under test, with the benchmark's clients."""

    def __init__(self, client_config: Mapping[str, Any], partitions: int) -> None:
        from synclib.embedded.broker import TopicAdmin

        self.client_config = dict(client_config)
        self.partitions = partitions
        self._admin = TopicAdmin(**for_admin(self.client_config))
        self._producer = KafkaProducer(**{**for_producer(self.client_config), "linger_ms": 0})
        self._prefix = f"bench-{int(time.time())}-{random.randrange(1 << 16):04x}"
        self.created: list[str] = []

    def topic(self, name: str, partitions: int) -> str:
        full = f"{self._prefix}-{name}"
        self._admin.create(full, partitions)
        self.created.append(full)
        return full

    def backlog(self, name: str, per_partition: int, value_bytes: int) -> tuple[str, PartitionEnds]:
        """A topic holding `per_partition` distinct events of `value_bytes` per partition."""
        from synclib.embedded.simulation import send_ending_single

        topic = self.topic(name, self.partitions)
        started = time.monotonic()
        event = event_values(value_bytes)
        producer = self.producer(batch_size=1 << 20, linger_ms=50)
        try:
            for partition in range(self.partitions):
                for sequence in range(per_partition - 1):
                    producer.send(topic, value=event(partition, sequence), partition=partition)
            ends = send_ending_single(producer, topic, {
                p: [(None, event(p, per_partition - 1), [])] for p in range(self.partitions)})
        finally:
            producer.close(timeout=10)
        logger.warning("backlog %s: %d records in %.1fs", topic, sum(ends.values()), time.monotonic() - started)
        return topic, ends

    def producer(self, **settings: Any) -> KafkaProducer:
        return KafkaProducer(**{**settings, **for_producer(self.client_config)})

    def commit(self, log_topic: str, topic: str, offsets: PartitionEnds) -> float:
        """Publish the leader's commit of `offsets` and wait for the broker's acknowledgement;
        returns when the last of its messages was sent (time.time()), the earliest the follower can
        have it all. Not the acknowledgement's time: with hundreds of partitions, in this process
        busy producing the events, that came seconds after the forwarder had released the commit."""
        futures = []
        for partition, offset in sorted(offsets.items()):
            key, value = encode_commit(Commit(LEADER_GROUP, topic, partition, offset, orig_message_ts=time.time()))
            futures.append(self._producer.send(log_topic, key=key, value=value, partition=0))
        sent = time.time()
        self._producer.flush(30)
        for future in futures:
            future.get(0)
        return sent

    def close(self) -> None:
        self._producer.close(timeout=10)
        if self.created:
            try:
                self._admin.delete(self.created)
            except Exception as exc:  # noqa: BLE001 - cleanup must not hide the results
                logger.warning("could not delete the benchmark topics: %s", exc)
        self._admin.close()

