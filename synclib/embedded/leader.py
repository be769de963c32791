"""A simulated leader group (think Snuba): consumes, commits with a lag, publishes its commit log."""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError
from kafka.partitioner import murmur2
from kafka.structs import OffsetAndMetadata

from synclib.embedded.simulation import Headers, Record, SimulationError, Worker, send_ending_single
from synclib.kafka.client_config import for_consumer, for_producer
from synclib.leader.commitlog import LEGACY_TIMESTAMP_FORMAT, LEGACY_TIMESTAMP_HEADER, Commit, encode_commit

logger = logging.getLogger(__name__)

COMMIT_TIMEOUT_MS = 10_000  # a commit to a lost coordinator gives up and is retried the next round
# Polls that returned records, at most this many per commit round. A broker answers a fetch as soon
# as any partition has a record, so an unpaced leader fetches once per producer burst; each fetch names
# every partition, and the embedded broker's cost per fetch grows with them (at 1,024 partitions and
# 2,000 events/s: 1.11 cores unpaced, 0.52 at four polls a second, 0.34 with no consumer).
POLLS_PER_ROUND = 4


@dataclass
class LeaderStats:
    consumed: int = 0
    polls: int = 0  # polls that returned records
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


class SimulatedLeader(Worker):
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
        self._unpublished: dict[int, Commit] = {}  # a round whose commit failed, retried with the next

    def committed(self) -> dict[int, int]:
        """The last offset published to the commit log, per partition."""
        with self._lock:
            return dict(self._committed)

    def stats(self) -> LeaderStats:
        with self._lock:
            return replace(self._stats)

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
            if batches:
                with self._lock:
                    self._stats.polls += 1
            if time.monotonic() >= next_round:
                next_round = time.monotonic() + self.commit_interval
                self._commit_round(consumer, producer, log_partitions)
            elif batches:  # paced: the next fetch is answered as soon as any partition has a record
                self._stopping.wait(min(self.commit_interval / POLLS_PER_ROUND, next_round - time.monotonic()))

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
            due = {**self._unpublished, **due}  # a later commit of a partition covers an earlier one
            if not due:
                return
            try:
                self._commit(consumer, producer, log_partitions, due)
            except KafkaError as exc:  # a broker or the group coordinator lost: retried next round
                logger.warning("%s: commit round failed (%r); retrying it in the next round", self.name, exc)
                self._unpublished = due
            else:
                self._unpublished = {}

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
        consumer.commit({TopicPartition(self.topic, p): OffsetAndMetadata(c.offset, "", -1) for p, c in due.items()},
                        timeout_ms=COMMIT_TIMEOUT_MS)
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
