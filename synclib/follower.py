"""Background thread that follows the leader's commit-log topic.

Reads every partition of the commit-log topic from the earliest offset (no consumer
group), keeps the latest commit per (group, topic, partition) for the followed groups
(last write wins, so a leader reset moves the offset backwards), and answers the remote
offset of a partition as the minimum over the groups, unknown while any group has not
reported it. A malformed message is logged, counted and skipped. If the thread dies,
every later query raises `CommitLogFollowerError` carrying the cause.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

from synclib import kafkaconf
from synclib.commitlog import Commit, CommitLogDecodeError, decode_commit
from synclib.metadata import describe_topics

logger = logging.getLogger(__name__)

TopicPartitionKey = tuple[str, int]
CommitListener = Callable[[Commit], None]


class CommitLogFollowerError(RuntimeError):
    """The follower thread died or lost the broker for longer than its deadline."""


@dataclass
class FollowerStats:
    applied: int = 0
    skipped_malformed: int = 0
    skipped_unfollowed_group: int = 0
    last_commit_time: dict[str, float] = field(default_factory=dict)
    last_error: Optional[str] = None


class CommitLogFollower:
    """Follows `topic` for `groups`; start() spawns a daemon thread, stop() joins it.

    `client_config` holds kafka-python kwargs (from `kafkaconf.kafka_client_config`).
    `listener`, if given, is called on the follower thread for each applied commit.
    `unreachable_timeout_s`: the follower fails when the broker has not answered, or a
    client call has not returned, for this long (None: wait forever).
    """

    def __init__(
        self,
        topic: str,
        groups: Sequence[str],
        client_config: Mapping[str, Any],
        *,
        listener: Optional[CommitListener] = None,
        unreachable_timeout_s: Optional[float] = 120.0,
        partition_refresh_s: float = 5.0,
        poll_timeout_ms: int = 100,
    ) -> None:
        if not groups:
            raise ValueError("at least one commit group to follow is required")
        self.topic = topic
        self.groups = tuple(groups)
        self._client_config = dict(client_config)
        self._listener = listener
        self._unreachable_timeout_s = unreachable_timeout_s
        self._partition_refresh_s = partition_refresh_s
        self._poll_timeout_ms = poll_timeout_ms
        self._lock = threading.Condition()
        self._commits: dict[str, dict[TopicPartitionKey, Commit]] = {g: {} for g in self.groups}
        self._stats = FollowerStats()
        self._caught_up = False
        self._failure: Optional[BaseException] = None
        self._stopping = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._heartbeat = time.monotonic()  # the follower loop's last turn

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> "CommitLogFollower":
        if self._thread is not None:
            raise RuntimeError("follower already started")
        self._thread = threading.Thread(
            target=self._run, name=f"commit-log-follower-{self.topic}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def __enter__(self) -> "CommitLogFollower":
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- queries ---------------------------------------------------------------------

    def check(self) -> None:
        """Raise `CommitLogFollowerError` if the thread has died, or is stuck in a client
        call for longer than the unreachable deadline."""
        with self._lock:
            failure = self._failure
            last_error = self._stats.last_error
        if failure is not None:
            raise CommitLogFollowerError(
                f"commit-log follower for topic {self.topic!r} died: "
                f"{type(failure).__name__}: {failure}"
            ) from failure
        stuck_for = time.monotonic() - self._heartbeat
        if (self._unreachable_timeout_s is not None and self._thread is not None
                and not self._stopping.is_set() and stuck_for > self._unreachable_timeout_s):
            raise CommitLogFollowerError(
                f"commit-log follower for topic {self.topic!r} is stuck: no progress for "
                f"{stuck_for:.0f}s (limit {self._unreachable_timeout_s:.0f}s); last error: {last_error}"
            )

    def remote_offset(self, topic: str, partition: int) -> Optional[int]:
        """Minimum committed offset over the followed groups; None while any has not reported."""
        self.check()
        with self._lock:
            return self._min_over_groups((topic, partition))

    def remote_offsets(self, partitions: Sequence[TopicPartitionKey]) -> dict[TopicPartitionKey, Optional[int]]:
        """`remote_offset` for many partitions under one lock."""
        self.check()
        with self._lock:
            return {tp: self._min_over_groups(tp) for tp in partitions}

    def commits(self) -> dict[str, dict[TopicPartitionKey, Commit]]:
        """Latest commit per followed group and partition (a copy)."""
        self.check()
        with self._lock:
            return {g: dict(per_tp) for g, per_tp in self._commits.items()}

    def stats(self) -> FollowerStats:
        with self._lock:
            return FollowerStats(
                self._stats.applied,
                self._stats.skipped_malformed,
                self._stats.skipped_unfollowed_group,
                dict(self._stats.last_commit_time),
                self._stats.last_error,
            )

    def wait_until_caught_up(self, timeout_s: float) -> bool:
        """Wait until everything in the topic as of the thread's start has been applied."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while not self._caught_up and self._failure is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._lock.wait(remaining)
        self.check()
        return self._caught_up

    def _min_over_groups(self, tp: TopicPartitionKey) -> Optional[int]:
        offsets = []
        for per_tp in self._commits.values():
            commit = per_tp.get(tp)
            if commit is None:
                return None
            offsets.append(commit.offset)
        return min(offsets)

    # -- thread ----------------------------------------------------------------------

    def _run(self) -> None:
        consumer: Optional[KafkaConsumer] = None
        admin: Optional[KafkaAdminClient] = None
        try:
            client_id = f"synclib-commit-log-follower-{self.topic}"
            admin = KafkaAdminClient(**kafkaconf.for_admin(self._client_config), client_id=client_id)
            consumer = KafkaConsumer(
                **kafkaconf.for_consumer(self._client_config),
                group_id=None,
                enable_auto_commit=False,
                client_id=client_id,
                allow_auto_create_topics=False,
            )
            self._follow(consumer, admin)
        except BaseException as exc:  # noqa: BLE001 - any death must surface to callers
            logger.error("commit-log follower for %r died: %r", self.topic, exc)
            with self._lock:
                self._failure = exc
                self._lock.notify_all()
        finally:
            for client in (consumer, admin):
                if client is not None:
                    client.close()

    def _follow(self, consumer: KafkaConsumer, admin: KafkaAdminClient) -> None:
        assigned: set[TopicPartition] = set()
        targets: Optional[dict[TopicPartition, int]] = None
        last_refresh = float("-inf")
        last_contact = time.monotonic()
        while not self._stopping.is_set():
            self._heartbeat = time.monotonic()
            if time.monotonic() - last_refresh >= self._partition_refresh_s:
                last_refresh = time.monotonic()
                try:
                    ends = self._refresh_partitions(consumer, admin, assigned)
                    last_contact = time.monotonic()
                except KafkaError as exc:
                    self._note_unreachable(exc, last_contact)
                    continue
                if targets is None:
                    targets = ends
            if targets is not None and not self._caught_up:
                self._check_caught_up(consumer, targets)
            if not assigned:
                self._stopping.wait(min(0.2, self._partition_refresh_s))
                continue
            for batch in consumer.poll(timeout_ms=self._poll_timeout_ms).values():
                for record in batch:
                    self._apply(record)

    def _refresh_partitions(
        self, consumer: KafkaConsumer, admin: KafkaAdminClient, assigned: set[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """Assign new commit-log partitions from earliest; return the end offsets. Both are
        broker round trips, so a broker that does not answer raises here."""
        timeout_ms = int(1000 * min(self._unreachable_timeout_s or 30.0, 30.0))
        described = describe_topics(admin, [self.topic])
        if self.topic not in described:
            if assigned:
                raise CommitLogFollowerError(f"commit-log topic {self.topic!r} was deleted")
            return {}
        _, partitions = described[self.topic]
        new = {TopicPartition(self.topic, p) for p in partitions} - assigned
        if new:
            assigned |= new
            consumer.assign(sorted(assigned))
            consumer.seek_to_beginning(*new)
        return consumer.end_offsets(sorted(assigned), timeout_ms=timeout_ms) if assigned else {}

    def _check_caught_up(self, consumer: KafkaConsumer, targets: Mapping[TopicPartition, int]) -> None:
        if all(consumer.position(tp) >= end for tp, end in targets.items()):
            with self._lock:
                self._caught_up = True
                self._lock.notify_all()

    def _note_unreachable(self, exc: KafkaError, last_contact: float) -> None:
        with self._lock:
            self._stats.last_error = f"{type(exc).__name__}: {exc}"
        silent_for = time.monotonic() - last_contact
        if self._unreachable_timeout_s is not None and silent_for > self._unreachable_timeout_s:
            raise CommitLogFollowerError(
                f"broker unreachable for {silent_for:.0f}s (limit {self._unreachable_timeout_s:.0f}s); "
                f"last error: {exc}"
            ) from exc
        logger.warning("commit-log follower for %r: %s; retrying", self.topic, exc)
        self._stopping.wait(0.5)

    def _apply(self, record: Any) -> None:
        try:
            commit = decode_commit(record.key, record.value, record.headers or ())
        except CommitLogDecodeError as exc:
            logger.warning(
                "skipping malformed commit-log message %s[%d]@%d: %s",
                record.topic, record.partition, record.offset, exc,
            )
            with self._lock:
                self._stats.skipped_malformed += 1
            return
        with self._lock:
            per_tp = self._commits.get(commit.group)
            if per_tp is None:
                self._stats.skipped_unfollowed_group += 1
                return
            per_tp[(commit.topic, commit.partition)] = commit
            self._stats.applied += 1
            self._stats.last_commit_time[commit.group] = time.time()
        if self._listener is not None:
            self._listener(commit)
