"""The benchmark's Kafka side: the cluster under test with its topics, backlogs of distinct
events, a live producer, and the leader's commits to its commit-log topic."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import confluent_kafka
from kafka import KafkaProducer

from synclib.background import BackgroundThread
from synclib.kafka.client_config import for_admin, for_producer
from synclib.leader.commitlog import Commit, encode_commit

logger = logging.getLogger(__name__)

LEADER_GROUP = "benchmark-leader"
WAIT_TIMEOUT_S = 600.0  # the longest any phase waits for the records it expects

PartitionEnds = dict[int, int]
# kafka-python client settings -> librdkafka's, for librdkafka's clients on secured clusters.
LIBRDKAFKA_NAMES = {
    "security_protocol": "security.protocol", "sasl_mechanism": "sasl.mechanisms",
    "sasl_plain_username": "sasl.username", "sasl_plain_password": "sasl.password",
    "ssl_cafile": "ssl.ca.location", "ssl_certfile": "ssl.certificate.location",
    "ssl_keyfile": "ssl.key.location", "ssl_password": "ssl.key.password",
}


def librdkafka_settings(client_config: Mapping[str, Any]) -> dict[str, Any]:
    """A librdkafka (confluent-kafka) client's settings for the cluster `client_config` names."""
    servers = client_config["bootstrap_servers"]
    return {"bootstrap.servers": servers if isinstance(servers, str) else ",".join(servers),
            **{librdkafka: client_config[name] for name, librdkafka in LIBRDKAFKA_NAMES.items()
               if client_config.get(name) is not None}}


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
    batch per partition, as the embedded broker needs for exact high watermarks; librdkafka, as
    production producers write. A new topic of 1,024 partitions on Apache Kafka took about 25 s to
    take writes at their rate (its first burst 6 s, the 28,000 records then due 20 s): `steady`
    says when the producer is back at its rate."""

    def __init__(self, cluster: Cluster, topic: str, rate: float, value_bytes: int) -> None:
        super().__init__("live-producer")
        self._cluster, self._topic, self._rate = cluster, topic, rate
        self._event = event_values(value_bytes)
        self._produced: PartitionEnds = {}
        self._last_burst = rate  # records in the last burst sent
        self._lock = threading.Lock()

    def steady(self) -> bool:
        """Every partition written, and the last burst no more than half a second of the rate
        (the producer is not catching up)."""
        with self._lock:
            return len(self._produced) == self._cluster.partitions and self._last_burst <= self._rate / 2

    def produced(self) -> PartitionEnds:
        """Next offset per partition, as acknowledged; raises if the producer thread died."""
        if self.failure is not None:
            raise RuntimeError(f"the live producer died: {self.failure!r}") from self.failure
        with self._lock:
            return dict(self._produced)

    def _work(self) -> None:
        partitions = self._cluster.partitions
        producer = confluent_kafka.Producer({**librdkafka_settings(self._cluster.client_config), "linger.ms": 5})
        started, sent = time.monotonic(), 0
        while not self._stopping.wait(0.05):
            due = int(self._rate * (time.monotonic() - started))
            records: dict[int, list[bytes]] = {}
            for sequence in range(sent, due):
                records.setdefault(sequence % partitions, []).append(self._event(sequence % partitions, sequence))
            sent = due
            ends = self._send(producer, records)
            with self._lock:
                self._produced.update(ends)
                self._last_burst = sum(len(values) for values in records.values())
        producer.flush(5)

    def _send(self, producer: confluent_kafka.Producer, records: Mapping[int, list[bytes]]) -> PartitionEnds:
        """Every record delivered, each partition's last alone after the others; the next offsets."""
        ends: PartitionEnds = {}
        errors: list[Any] = []

        def delivered(error: Any, message: Any) -> None:
            if error is not None:
                errors.append(error)
            else:
                ends[message.partition()] = max(ends.get(message.partition(), 0), message.offset() + 1)

        for part in (slice(None, -1), slice(-1, None)):
            for partition, values in records.items():
                for value in values[part]:
                    producer.produce(self._topic, value=value, partition=partition, on_delivery=delivered)
                producer.poll(0)
            if producer.flush(WAIT_TIMEOUT_S):
                raise TimeoutError(f"the live producer's records not delivered in {WAIT_TIMEOUT_S:.0f}s")
        if errors:
            raise RuntimeError(f"the live producer: {errors[0]}")
        return ends


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

