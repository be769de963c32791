"""What the leader groups have committed, kept up to date by a background thread.

`RemoteOffsetsTracker` holds the latest `Commit` per (group, topic, partition) (last write
wins, so a leader reset moves an offset backwards) and answers the remote offset of a
partition as the minimum over the followed groups, unknown while any group has not
reported it. Subclasses feed it: `CommitLogFollower` (the leader's commit-log topic) and
`GroupOffsetsPoller` (the groups' committed offsets in Kafka). Each time that minimum moves
forward it keeps a `Release` (the offset and when the leader committed it), and after each batch
of commits it wakes whoever waits in `wait_for_release`: the source plans a micro-batch then,
and measures its gate latency from the releases it takes. If the thread dies, or makes
no progress for longer than `unreachable_timeout_s`, every later query raises
`RemoteOffsetsError` carrying the cause.
"""

from __future__ import annotations

import abc
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from synclib.background import BackgroundThread
from synclib.leader.commitlog import Commit
from synclib.offsets import TopicPartitionKey

RELEASES_KEPT = 256  # per partition: releases not yet taken by a planned batch


class Release(NamedTuple):
    """The leader's offset of a partition moved forward to `offset` (the minimum over the followed
    groups) by a commit made at `committed_at` (time.time(): the commit-log record's timestamp, or when
    it was seen when that is unknown)."""

    offset: int
    committed_at: float


class RemoteOffsetsError(RuntimeError):
    """The thread tracking the leader's offsets died or stopped making progress."""


@dataclass
class RemoteStats:
    applied: int = 0
    skipped_malformed: int = 0
    skipped_unfollowed_group: int = 0
    last_commit_time: dict[str, float] = field(default_factory=dict)
    last_error: str | None = None


class RemoteOffsetsTracker(BackgroundThread, abc.ABC):
    """The commit store and the queries on a `BackgroundThread`; subclasses implement `_work`."""

    stop_timeout_s = 10.0

    def __init__(self, description: str, groups: Sequence[str], unreachable_timeout_s: float | None) -> None:
        if not groups:
            raise ValueError("at least one leader group to follow is required")
        super().__init__(description)
        self.description = description
        self.groups = tuple(groups)
        self._unreachable_timeout_s = unreachable_timeout_s
        self._lock = threading.Condition()
        self._commits: dict[str, dict[TopicPartitionKey, Commit]] = {g: {} for g in self.groups}
        self._stats = RemoteStats()
        self._caught_up = False
        self._heartbeat = time.monotonic()
        self._releases: dict[TopicPartitionKey, deque[Release]] = {}
        self._release_generation = 0  # bumped by `_announce_releases` when there are new releases
        self._unannounced = False

    # -- queries ---------------------------------------------------------------------

    def check(self) -> None:
        """Raise `RemoteOffsetsError` if the thread died or made no progress past its deadline."""
        with self._lock:
            failure = self.failure
            last_error = self._stats.last_error
        if failure is not None:
            raise RemoteOffsetsError(
                f"{self.description} died: {type(failure).__name__}: {failure}"
            ) from failure
        stuck_for = time.monotonic() - self._heartbeat
        if (self._unreachable_timeout_s is not None and self._thread is not None
                and not self._stopping.is_set() and stuck_for > self._unreachable_timeout_s):
            raise RemoteOffsetsError(
                f"{self.description} is stuck: no progress for {stuck_for:.0f}s "
                f"(limit {self._unreachable_timeout_s:.0f}s); last error: {last_error}"
            )

    def remote_offsets(self, partitions: Sequence[TopicPartitionKey]) -> dict[TopicPartitionKey, int | None]:
        """Per partition, the minimum committed offset over the followed groups; None while any group
        has not reported it."""
        self.check()
        with self._lock:
            return {tp: self._min_over_groups(tp) for tp in partitions}

    def commits(self) -> dict[str, dict[TopicPartitionKey, Commit]]:
        """Latest commit per followed group and partition (a copy)."""
        self.check()
        with self._lock:
            return {g: dict(per_tp) for g, per_tp in self._commits.items()}

    def stats(self) -> RemoteStats:
        with self._lock:
            return RemoteStats(self._stats.applied, self._stats.skipped_malformed,
                               self._stats.skipped_unfollowed_group, dict(self._stats.last_commit_time),
                               self._stats.last_error)

    def release_generation(self) -> int:
        """A number that grows each time new releases are announced (see `wait_for_release`)."""
        with self._lock:
            return self._release_generation

    def wait_for_release(self, seen: int, timeout_s: float) -> int:
        """Wait until releases newer than generation `seen` are announced, the thread fails, or
        `timeout_s` passes; return the generation then."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self._release_generation == seen and self.failure is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._lock.wait(remaining)
            return self._release_generation

    def releases(self) -> dict[TopicPartitionKey, list[Release]]:
        """The releases kept per partition, oldest first (a copy; the last `RELEASES_KEPT` not taken)."""
        with self._lock:
            return {tp: list(kept) for tp, kept in self._releases.items()}

    def take_releases(self, start: Mapping[TopicPartitionKey, int],
                      end: Mapping[TopicPartitionKey, int]) -> list[Release]:
        """The releases a micro-batch from `start` to `end` forwards (offset in `(start, end]`), removed
        from the store with any at or below `start` (forwarded before)."""
        taken = []
        with self._lock:
            for tp, stop in end.items():
                kept = self._releases.get(tp)
                while kept and kept[0].offset <= stop:
                    release = kept.popleft()
                    if release.offset > start.get(tp, stop):
                        taken.append(release)
        return taken

    def wait_until_caught_up(self, timeout_s: float) -> bool:
        """Wait until what the leader had committed when the thread started is known."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while not self._caught_up and self.failure is None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._lock.wait(remaining)
        self.check()
        return self._caught_up

    def _min_over_groups(self, tp: TopicPartitionKey) -> int | None:
        offsets = []
        for per_tp in self._commits.values():
            commit = per_tp.get(tp)
            if commit is None:
                return None
            offsets.append(commit.offset)
        return min(offsets)

    # -- for subclasses ----------------------------------------------------------------

    @abc.abstractmethod
    def _work(self) -> None:
        """The thread's body: feed `_record` until `_stopping` is set."""

    def _beat(self) -> None:
        """The thread made progress (resets the stuck-thread deadline)."""
        self._heartbeat = time.monotonic()

    def _latest_offset(self, group: str, tp: TopicPartitionKey) -> int | None:
        with self._lock:
            commit = self._commits.get(group, {}).get(tp)
            return None if commit is None else commit.offset

    def _record(self, commit: Commit) -> bool:
        """Store a commit (last write wins); False when its group is not followed."""
        with self._lock:
            per_tp = self._commits.get(commit.group)
            if per_tp is None:
                self._stats.skipped_unfollowed_group += 1
                return False
            tp = (commit.topic, commit.partition)
            before = self._min_over_groups(tp)
            per_tp[tp] = commit
            self._stats.applied += 1
            now = time.time()
            self._stats.last_commit_time[commit.group] = now
            after = self._min_over_groups(tp)
            if after is not None and (before is None or after > before):
                kept = self._releases.setdefault(tp, deque(maxlen=RELEASES_KEPT))
                while kept and kept[-1].offset >= after:  # the leader was reset and is committing again
                    kept.pop()
                kept.append(Release(after, commit.committed_at if commit.committed_at is not None else now))
                self._unannounced = True
            return True

    def _announce_releases(self) -> None:
        """Wake `wait_for_release` if commits recorded since the last call released offsets (called by
        the thread after each batch of commits, so one leader commit of many partitions is one wake-up)."""
        with self._lock:
            if self._unannounced:
                self._unannounced = False
                self._release_generation += 1
                self._lock.notify_all()

    def _count_malformed(self) -> None:
        with self._lock:
            self._stats.skipped_malformed += 1

    def _note_error(self, error: Exception) -> None:
        with self._lock:
            self._stats.last_error = f"{type(error).__name__}: {error}"

    def _mark_caught_up(self) -> None:
        with self._lock:
            self._caught_up = True
            self._lock.notify_all()

    def _died(self, failure: BaseException) -> None:
        with self._lock:
            super()._died(failure)
            self._lock.notify_all()
