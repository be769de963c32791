"""A simulated world for the embedded run and the harnesses: events and a leader group.

`EventProducer` produces Sentry-like JSON events at a target rate; `produce_backlog`
fills a topic fast for benchmarks; `SimulatedLeader` is a real consumer group member
(think Snuba) that commits what it consumed at least `lag` seconds ago and publishes
each commit to the commit-log topic. Every produce burst ends each partition with a
single-record batch: the embedded broker reports the exact high watermark only then.

Clients take kafka-python kwargs (as from `synclib.kafka.client_config.kafka_client_config`). Threads are
daemons; `check()` raises `SimulationError` carrying the cause once a thread has died.
"""

from __future__ import annotations

import json
import logging
import math
import queue
import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, TypeVar

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.partitioner import murmur2
from kafka.structs import OffsetAndMetadata

from synclib.kafka.client_config import for_consumer, for_producer
from synclib.leader.commitlog import LEGACY_TIMESTAMP_FORMAT, LEGACY_TIMESTAMP_HEADER, Commit, encode_commit

logger = logging.getLogger(__name__)

Headers = list[tuple[str, bytes]]
Record = tuple[bytes | None, bytes, Headers]

PLATFORMS = ("python", "javascript", "node", "java", "go", "cocoa")
MESSAGES = (
    "ZeroDivisionError: division by zero",
    "TypeError: Cannot read properties of undefined (reading 'id')",
    "java.lang.NullPointerException at com.example.OrderService.handle",
    "ConnectionResetError: [Errno 104] Connection reset by peer",
    "KeyError: 'user_id'",
)
DEFAULT_PROJECT_IDS = (1, 2, 3, 4, 5)
SEND_TIMEOUT_S = 60.0

W = TypeVar("W", bound="_Worker")


class SimulationError(RuntimeError):
    """A simulator thread died, or did not do what was asked in time."""


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


def send_ending_single(
    producer: KafkaProducer, topic: str, records: Mapping[int, Sequence[Record]], timeout_s: float = SEND_TIMEOUT_S
) -> dict[int, int]:
    """Send records per partition and wait for all of them, the last of each partition alone
    in its own batch. Returns the next offset of each partition, as acknowledged."""
    failures: list[BaseException] = []
    for partition, items in records.items():
        for key, value, headers in items[:-1]:
            producer.send(topic, key=key, value=value, partition=partition, headers=headers).add_errback(
                failures.append
            )
    producer.flush(timeout_s)
    if failures:
        raise failures[0]
    futures = [
        producer.send(topic, key=items[-1][0], value=items[-1][1], partition=partition, headers=items[-1][2])
        for partition, items in records.items()
        if items
    ]
    producer.flush(timeout_s)
    ends: dict[int, int] = {}
    for future in futures:
        metadata = future.get(0)
        ends[metadata.partition] = metadata.offset + 1
    return ends


class _Worker:
    """A daemon thread running `_work`; a failure is kept and raised by `check()`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None

    def start(self: W) -> W:
        if self._thread is not None:
            raise RuntimeError(f"{self.name} already started")
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask the thread to stop and wait for it; raise `SimulationError` if it does not."""
        self._stopping.set()
        if self._thread is not None and not self.join(timeout_s):
            raise SimulationError(f"{self.name} did not stop within {timeout_s}s")

    def join(self, timeout_s: float | None = None) -> bool:
        """Wait for the thread to end; True if it has."""
        if self._thread is None:
            raise RuntimeError(f"{self.name} not started")
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    @property
    def error(self) -> BaseException | None:
        return self._failure

    def check(self) -> None:
        """Raise `SimulationError` if the thread has died."""
        failure = self._failure
        if failure is not None:
            raise SimulationError(f"{self.name} died: {type(failure).__name__}: {failure}") from failure

    def __enter__(self: W) -> W:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            self._work()
        except BaseException as exc:  # noqa: BLE001 - any death must surface to callers
            logger.error("%s died: %r", self.name, exc)
            self._failure = exc

    def _work(self) -> None:
        raise NotImplementedError


class EventProducer(_Worker):
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
                if due > sent:
                    self._burst(producer, partitions, sent, due - sent)
                    sent = due
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


@dataclass
class LeaderStats:
    consumed: int = 0
    rounds: int = 0
    published: int = 0
    resets: int = 0


@dataclass
class _Consumed:
    """One poll's records of a partition: when they arrived, the next offset, their timestamps (ms)."""

    received: float
    next_offset: int
    timestamps_ms: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class _Reset:
    partition: int
    offset: int
    done: threading.Event = field(default_factory=threading.Event)


class SimulatedLeader(_Worker):
    """A leader consumer group member on every partition of `topic` (explicit assignment).

    Resumes from the group's committed offsets (else earliest). Every `commit_interval`
    seconds it commits, for each partition whose position moved, the records it received
    at least `lag` seconds ago: first to Kafka, then to `commit_log_topic` in the current
    format, or with `legacy_format` as an ASCII offset plus an `orig_message_ts` header.
    """

    def __init__(
        self,
        topic: str,
        commit_log_topic: str,
        client_config: Mapping[str, Any],
        *,
        group: str = "snuba-consumers",
        lag: float = 1.0,
        commit_interval: float = 0.5,
        legacy_format: bool = False,
        partition_timeout_s: float = 30.0,
    ) -> None:
        super().__init__(f"simulated-leader-{group}-{topic}")
        self.topic = topic
        self.commit_log_topic = commit_log_topic
        self.group = group
        self.lag = lag
        self.commit_interval = commit_interval
        self.legacy_format = legacy_format
        self._client_config = dict(client_config)
        self._partition_timeout_s = partition_timeout_s
        # Held for a whole commit round, so pause() returns only once no round is in flight.
        self._lock = threading.Lock()
        self._paused = False
        self._committed: dict[int, int] = {}
        self._stats = LeaderStats()
        self._resets: queue.Queue[_Reset] = queue.Queue()
        self._pending: dict[int, deque[_Consumed]] = {}

    def committed(self) -> dict[int, int]:
        """The last offset published to the commit log, per partition."""
        with self._lock:
            return dict(self._committed)

    def stats(self) -> LeaderStats:
        with self._lock:
            return LeaderStats(self._stats.consumed, self._stats.rounds, self._stats.published, self._stats.resets)

    def pause(self) -> None:
        """Stop committing (a stalled leader); consuming goes on."""
        with self._lock:
            self._paused = True

    def resume(self) -> None:
        with self._lock:
            self._paused = False

    def commit_to(self, partition: int, offset: int, timeout_s: float = 30.0) -> None:
        """Reset `partition` to `offset`: commit and publish it, then consume again from there.

        Works while paused. Returns once published; raises `SimulationError` if the thread
        dies or `timeout_s` passes first.
        """
        if self._thread is None or not self._thread.is_alive():
            self.check()
            raise SimulationError(f"{self.name} is not running")
        reset = _Reset(partition, offset)
        self._resets.put(reset)
        deadline = time.monotonic() + timeout_s
        while not reset.done.wait(0.05):
            self.check()
            if time.monotonic() > deadline:
                raise SimulationError(f"{self.name}: reset of partition {partition} not done in {timeout_s}s")

    def _work(self) -> None:
        consumer = KafkaConsumer(**{
            **for_consumer(self._client_config),
            "group_id": self.group,
            "enable_auto_commit": False,
            "auto_offset_reset": "earliest",
        })
        producer: KafkaProducer | None = None
        try:
            producer = KafkaProducer(**{**for_producer(self._client_config), "linger_ms": 0})
            log_partitions = sorted(producer.partitions_for(self.commit_log_topic))
            consumer.assign([TopicPartition(self.topic, p) for p in self._wait_for_partitions(consumer)])
            self._consume(consumer, producer, log_partitions)
        finally:
            consumer.close(autocommit=False)
            if producer is not None:
                producer.close(timeout=5)

    def _wait_for_partitions(self, consumer: KafkaConsumer) -> list[int]:
        deadline = time.monotonic() + self._partition_timeout_s
        while not (partitions := consumer.partitions_for_topic(self.topic)):
            if time.monotonic() > deadline:
                raise SimulationError(f"topic {self.topic!r} has no partitions after {self._partition_timeout_s}s")
            self._stopping.wait(0.1)
        return sorted(partitions)

    def _consume(self, consumer: KafkaConsumer, producer: KafkaProducer, log_partitions: list[int]) -> None:
        next_round = time.monotonic() + self.commit_interval
        while not self._stopping.is_set():
            while not self._resets.empty():
                self._reset(consumer, producer, log_partitions, self._resets.get())
            wait_ms = max(0, min(100, int((next_round - time.monotonic()) * 1000)))
            batches = consumer.poll(timeout_ms=wait_ms)
            received = time.monotonic()
            for tp, records in batches.items():
                self._pending.setdefault(tp.partition, deque()).append(
                    _Consumed(received, records[-1].offset + 1, [r.timestamp for r in records])
                )
                with self._lock:
                    self._stats.consumed += len(records)
            if time.monotonic() >= next_round:
                next_round = time.monotonic() + self.commit_interval
                self._commit_round(consumer, producer, log_partitions)

    def _commit_round(self, consumer: KafkaConsumer, producer: KafkaProducer, log_partitions: list[int]) -> None:
        with self._lock:
            self._stats.rounds += 1
            if self._paused:
                return
            cutoff = time.monotonic() - self.lag
            due: dict[int, Commit] = {}
            for partition, pending in self._pending.items():
                stamps: list[int] = []
                last: _Consumed | None = None
                while pending and pending[0].received <= cutoff:
                    last = pending.popleft()
                    stamps.extend(last.timestamps_ms)
                if last is not None and last.next_offset != self._committed.get(partition):
                    due[partition] = Commit(
                        self.group, self.topic, partition, last.next_offset,
                        orig_message_ts=last.timestamps_ms[-1] / 1000, received_p99=_p99(stamps) / 1000,
                    )
            if due:
                self._commit(consumer, producer, log_partitions, due)

    def _reset(self, consumer: KafkaConsumer, producer: KafkaProducer, log_partitions: list[int],
               reset: _Reset) -> None:
        consumer.seek(TopicPartition(self.topic, reset.partition), reset.offset)
        self._pending.pop(reset.partition, None)
        commit = Commit(self.group, self.topic, reset.partition, reset.offset, orig_message_ts=time.time())
        with self._lock:
            self._commit(consumer, producer, log_partitions, {reset.partition: commit})
            self._stats.resets += 1
        reset.done.set()

    def _commit(
        self, consumer: KafkaConsumer, producer: KafkaProducer, log_partitions: list[int], due: Mapping[int, Commit]
    ) -> None:
        """Commit to Kafka, then publish to the commit log; the caller holds the lock."""
        consumer.commit({TopicPartition(self.topic, p): OffsetAndMetadata(c.offset, "", -1) for p, c in due.items()})
        records: dict[int, list[Record]] = {}
        for commit in due.values():
            key, value, headers = self._encode(commit)
            partition = log_partitions[(murmur2(key) & 0x7FFFFFFF) % len(log_partitions)]
            records.setdefault(partition, []).append((key, value, headers))
        send_ending_single(producer, self.commit_log_topic, records)
        for partition, commit in due.items():
            self._committed[partition] = commit.offset
        self._stats.published += len(due)

    def _encode(self, commit: Commit) -> Record:
        key, value = encode_commit(commit)
        if not self.legacy_format:
            return key, value, []
        headers: Headers = []
        if commit.orig_message_ts is not None:
            stamp = datetime.fromtimestamp(commit.orig_message_ts, timezone.utc).strftime(LEGACY_TIMESTAMP_FORMAT)
            headers.append((LEGACY_TIMESTAMP_HEADER, stamp.encode("ascii")))
        return key, str(commit.offset).encode("ascii"), headers


def _p99(timestamps_ms: Sequence[int]) -> float:
    """Nearest-rank 99th percentile."""
    ordered = sorted(timestamps_ms)
    return float(ordered[max(0, math.ceil(0.99 * len(ordered)) - 1)])


def _client_kwargs(client_config: str | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(client_config, str):
        return {"bootstrap_servers": [s.strip() for s in client_config.split(",") if s.strip()]}
    return client_config


class EmbeddedWorld:
    """The embedded default's world: a local broker, the events and commit-log topics, a
    producer at `events_per_second` and a leader group committing with `leader_lag`."""

    def __init__(
        self,
        *,
        events_topic: str,
        commit_log_topic: str,
        leader_group: str,
        partitions: int,
        events_per_second: float,
        event_bytes: int,
        leader_lag: float,
        leader_commit_interval: float,
    ) -> None:
        from synclib.embedded.broker import EmbeddedBroker

        self.broker = EmbeddedBroker()
        self.events_topic = events_topic
        self.commit_log_topic = commit_log_topic
        self.partitions = partitions
        self.events_per_second, self.event_bytes = events_per_second, event_bytes
        self.leader_group, self.leader_lag = leader_group, leader_lag
        self.leader_commit_interval = leader_commit_interval
        self.producer: EventProducer | None = None
        self.leader: SimulatedLeader | None = None

    @property
    def bootstrap_servers(self) -> str:
        return self.broker.bootstrap_servers

    def start(self) -> EmbeddedWorld:
        from synclib.embedded.broker import TopicAdmin

        self.broker.start()
        admin = TopicAdmin(self.bootstrap_servers)
        try:
            admin.create(self.events_topic, self.partitions)
            admin.create(self.commit_log_topic, 1)
        finally:
            admin.close()
        client = {"bootstrap_servers": [self.bootstrap_servers]}
        self.producer = EventProducer(self.events_topic, client, rate=self.events_per_second,
                                      event_bytes=self.event_bytes).start()
        self.leader = SimulatedLeader(self.events_topic, self.commit_log_topic, client, group=self.leader_group,
                                      lag=self.leader_lag, commit_interval=self.leader_commit_interval).start()
        return self

    def stop(self) -> None:
        for worker in (self.producer, self.leader):
            if worker is not None:
                worker.stop()
        self.broker.stop()

    def __enter__(self) -> EmbeddedWorld:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
