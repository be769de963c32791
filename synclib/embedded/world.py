"""A simulated world for the embedded run and the harnesses: events and a leader group.

`EventProducer` produces Sentry-like JSON events at a target rate; `produce_backlog`
fills a topic fast for benchmarks; `SimulatedLeader` (`synclib.embedded.leader`) is a real
consumer group member (think Snuba) that commits what it consumed at least `lag` seconds ago
and publishes each commit to the commit-log topic. `simulate` starts both on a running broker
(the embedded default runs it in a process of its own: `synclib.embedded.default_world`).
Every produce burst ends each partition with a single-record batch: the embedded broker
reports the exact high watermark only then (`send_ending_single`).

Clients take kafka-python kwargs (as from `synclib.settings.kafka.kafka_client_config`).
Threads are daemons; `check()` raises `SimulationError` carrying the cause once a thread has died.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from kafka import KafkaProducer

from synclib.embedded.broker import TopicAdmin
from synclib.embedded.leader import SimulatedLeader
from synclib.embedded.simulation import Record, Worker, send_ending_single
from synclib.kafka.client_config import for_producer

PLATFORMS = ("python", "javascript", "node", "java", "go", "cocoa")
MESSAGES = (
    "ZeroDivisionError: division by zero",
    "TypeError: Cannot read properties of undefined (reading 'id')",
    "java.lang.NullPointerException at com.example.OrderService.handle",
    "ConnectionResetError: [Errno 104] Connection reset by peer",
    "KeyError: 'user_id'",
)
DEFAULT_PROJECT_IDS = (1, 2, 3, 4, 5)
MAX_BURST_S = 0.5  # the most events one produce burst sends, in seconds of the producer's rate


def make_event(project_id: int, event_bytes: int, rng: random.Random) -> bytes:
    """A Sentry-like JSON event, padded to `event_bytes` bytes when it is shorter."""
    event = {
        "event_id": uuid.UUID(int=rng.getrandbits(128), version=4).hex,
        "project_id": project_id,
        "timestamp": time.time(),
        "platform": rng.choice(PLATFORMS),
        "message": rng.choice(MESSAGES),
        "padding": "",
    }
    size = len(json.dumps(event))
    event["padding"] = "x" * max(0, event_bytes - size)
    return json.dumps(event).encode("ascii")


def produce_backlog(
    client_config: str | Mapping[str, Any],
    topic: str,
    partitions: int,
    count_per_partition: int,
    value_bytes: int,
) -> dict[int, int]:
    """Append `count_per_partition` events of `value_bytes` bytes to partitions 0..n-1, fast.

    `client_config` is kafka-python kwargs or a bootstrap-servers string. Every record
    carries the same event payload. Returns the end offset of each partition.
    """
    value = make_event(DEFAULT_PROJECT_IDS[0], value_bytes, random.Random(0))
    record: Record = (None, value, [])
    producer = KafkaProducer(**{
        "batch_size": 1 << 20, "linger_ms": 50, "compression_type": None,
        **for_producer(_client_kwargs(client_config)),
    })
    try:
        return send_ending_single(producer, topic, {p: [record] * count_per_partition for p in range(partitions)})
    finally:
        producer.close(timeout=10)


class EventProducer(Worker):
    """Produces events to every partition of `topic`, round-robin, at `rate` events/s.

    Stops by itself after `total` events when given. The key is the project id.
    """

    def __init__(
        self,
        topic: str,
        client_config: Mapping[str, Any],
        *,
        rate: float = 100.0,
        total: int | None = None,
        event_bytes: int = 512,
        project_ids: Sequence[int] = DEFAULT_PROJECT_IDS,
        tick_s: float = 0.05,
        seed: int | None = None,
    ) -> None:
        if rate <= 0:
            raise ValueError(f"rate must be positive, got {rate}")
        super().__init__(f"event-producer-{topic}")
        self.topic = topic
        self.rate = rate
        self.total = total
        self.event_bytes = event_bytes
        self._client_config = dict(client_config)
        self._project_ids = tuple(project_ids)
        self._tick_s = tick_s
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._produced: dict[int, int] = {}

    def produced(self) -> dict[int, int]:
        """Next offset per partition, as acknowledged by the broker."""
        with self._lock:
            return dict(self._produced)

    def _work(self) -> None:
        producer = KafkaProducer(**{"linger_ms": 5, **for_producer(self._client_config)})
        try:
            partitions = sorted(producer.partitions_for(self.topic))
            started = time.monotonic()
            sent = 0
            while not self._stopping.is_set() and (self.total is None or sent < self.total):
                due = int(self.rate * (time.monotonic() - started))
                if self.total is not None:
                    due = min(due, self.total)
                if due > sent:  # a producer that fell behind catches up in bursts: stop() waits for one
                    count = min(due - sent, max(1, int(self.rate * MAX_BURST_S)))
                    self._burst(producer, partitions, sent, count)
                    sent += count
                self._stopping.wait(self._tick_s)
        finally:
            producer.close(timeout=5)

    def _burst(self, producer: KafkaProducer, partitions: Sequence[int], first: int, count: int) -> None:
        records: dict[int, list[Record]] = {}
        for seq in range(first, first + count):
            project_id = self._rng.choice(self._project_ids)
            value = make_event(project_id, self.event_bytes, self._rng)
            records.setdefault(partitions[seq % len(partitions)], []).append((str(project_id).encode(), value, []))
        ends = send_ending_single(producer, self.topic, records)
        with self._lock:
            self._produced.update(ends)


def _client_kwargs(client_config: str | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(client_config, str):
        return {"bootstrap_servers": [s.strip() for s in client_config.split(",") if s.strip()]}
    return client_config


def simulate(bootstrap_servers: str, events_topic: str, commit_log_topic: str, partitions: int, *,
             rate: float, event_bytes: int, group: str, lag: float,
             commit_interval: float) -> tuple[EventProducer, SimulatedLeader]:
    """Create the events and commit-log topics on a running broker and start a producer at
    `rate` events/s and a leader `group` committing `lag` seconds behind it."""
    admin = TopicAdmin(bootstrap_servers)
    try:
        admin.create(events_topic, partitions)
        admin.create(commit_log_topic, 1)
    finally:
        admin.close()
    client = {"bootstrap_servers": [bootstrap_servers]}
    producer = EventProducer(events_topic, client, rate=rate, event_bytes=event_bytes).start()
    leader = SimulatedLeader(events_topic, commit_log_topic, client, group=group, lag=lag,
                             commit_interval=commit_interval).start()
    return producer, leader

