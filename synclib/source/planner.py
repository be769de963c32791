"""The driver side of the `synchronized_kafka` source: what a micro-batch may release.

`Planner` keeps, for a running query, the broker metadata client, the leader's committed offsets
(a commit-log follower thread, `synclib.leader`), the per-partition state machine and the
stale-leader tracker; each planning call returns the effective start and the releasable end per
partition (`min(locally available, remote committed)`, `synclib.source.planning`). It lives in the
Python process Spark starts beside the driver and is never pickled.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections import Counter, deque
from collections.abc import Mapping, Sequence

from synclib.kafka.admin import KafkaMetadata
from synclib.kafka.reader import KafkaDataLossError
from synclib.leader.publisher import ProgressPublisher
from synclib.leader.tracker import Release
from synclib.leader.trackers import remote_offsets_tracker
from synclib.offsets import PartitionOffsets, TopicPartitionKey, to_offsets_json
from synclib.settings.source import SourceOptions
from synclib.source.events import EventLog
from synclib.source.planning import plan_end_offsets, watermarks_to_ask
from synclib.source.state import (
    FLOWING,
    SYNCHRONIZED,
    StateAndOffsets,
    SynchronizedPartitionState,
    SynchronizedPartitionStateManager,
    get_state_from_offsets,
)
from synclib.source.status import (
    CommitLogStatus,
    PartitionStatus,
    PlannedBatch,
    PlannerStatus,
    group_offsets,
    leader_commit_age,
)

logger = logging.getLogger(__name__)

FOLLOWER_CATCH_UP_TIMEOUT_S = 30.0
BATCHES_KEPT = 32  # planned batches in the status file: the job reads it every second
PARTITIONS_NAMED = 8  # a log line about partitions names at most this many
# Planning asks the high watermarks of the partitions the leader committed past the follower; those of
# every partition (what the status and staleness show of the others) at most this often.
WATERMARKS_REFRESH_S = 5.0


class Planner:
    """Driver-side state of a running query: broker metadata, the leader's offsets, the
    per-partition state machine and the stale-leader tracker."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        _ignore_terminal_interrupts()
        self.event_log = EventLog.install() if options.status_file else None
        self.metadata = KafkaMetadata(options.client_config, options.subscription,
                                      retry_timeout_s=options.broker_timeout)
        self._changes: list[tuple[TopicPartitionKey, SynchronizedPartitionState, SynchronizedPartitionState]] = []
        self._synchronized_once: set[TopicPartitionKey] = set()
        self.states = SynchronizedPartitionStateManager(self._note_state_change)
        self.remote = remote_offsets_tracker(options).start()
        if not self.remote.wait_until_caught_up(FOLLOWER_CATCH_UP_TIMEOUT_S):
            logger.warning("%s not caught up after %.0fs; planning with what it has",
                           self.remote.description, FOLLOWER_CATCH_UP_TIMEOUT_S)
        self.publisher = ProgressPublisher(
            options.client_config, options.consumer_group or "", commit_to_group=options.commit_to_consumer_group,
            commit_log_topic=options.publish_commit_log,
        ) if (options.commit_to_consumer_group or options.publish_commit_log) else None
        self.high_watermarks: dict[TopicPartitionKey, int] = {}
        self._watermarks_at = float("-inf")  # time.monotonic() when every partition's was last asked
        self._topic_ids: dict[str, str | None] = {}
        self._remote_changed_at: dict[TopicPartitionKey, tuple[int | None, float]] = {}
        self.stale: set[TopicPartitionKey] = set()
        self.batches: deque[PlannedBatch] = deque(maxlen=BATCHES_KEPT)

    def releasable(self, start: PartitionOffsets) -> tuple[PartitionOffsets, PartitionOffsets]:
        """Discover partitions, refresh watermarks and the leader's offsets; return the
        effective start (new partitions from earliest) and the releasable end per partition."""
        start = dict(start)
        partitions = self.metadata.partitions()
        new = [tp for tp in partitions if tp not in start]
        if new:
            logger.info("new partitions %s: reading them from earliest", _named(new))
            start.update(self.metadata.earliest_offsets(new))
        remote = self.remote.remote_offsets(list(start))
        recreated = {t for t, topic_id in self.metadata.topic_ids.items()
                     if self._topic_ids.get(t, topic_id) != topic_id}
        self._topic_ids.update(self.metadata.topic_ids)
        fetched = self._refresh_watermarks(start, set(partitions), remote, recreated)
        restarted = self._restart_recreated_partitions(start, fetched, recreated)
        start.update(restarted)
        for (topic, partition), offset in start.items():
            self.states.set_local_offset(topic, partition, offset)
            if remote.get((topic, partition)) is not None:
                self.states.set_remote_offset(topic, partition, remote[(topic, partition)])
        self._track_staleness(start, remote)
        self._log_state_changes()
        # A restarted partition first moves back to earliest in a batch of its own.
        return start, {**plan_end_offsets(start, self.high_watermarks, remote), **restarted}

    def _refresh_watermarks(self, start: PartitionOffsets, existing: set[TopicPartitionKey],
                            remote: Mapping[TopicPartitionKey, int | None], recreated: set[str]) -> PartitionOffsets:
        """Ask the high watermarks of the partitions the leader committed past the follower (the only
        ones a batch can move), of those never asked or of a `recreated` topic, and every
        `WATERMARKS_REFRESH_S` of all (for the status, staleness and data loss of the others); partitions
        of a deleted topic keep their offsets and lose their watermark. Return what was asked."""
        now = time.monotonic()
        every = now - self._watermarks_at >= WATERMARKS_REFRESH_S
        if every:
            self._watermarks_at = now
        self.high_watermarks = {tp: hw for tp, hw in self.high_watermarks.items()
                                if tp in existing and tp[0] not in recreated}
        fetched = self.metadata.high_watermarks(watermarks_to_ask(
            {tp: offset for tp, offset in start.items() if tp in existing}, remote, self.high_watermarks, every))
        self.high_watermarks.update(fetched)
        return fetched

    def planned(self, start: PartitionOffsets, end: PartitionOffsets) -> None:
        """A micro-batch from `start` to `end` will run: keep the leader commits it releases."""
        self.batches.append(PlannedBatch(to_offsets_json(end), _commit_times(self.remote.take_releases(start, end))))

    def _note_state_change(self, topic: str, partition: int, old: StateAndOffsets, new: StateAndOffsets) -> None:
        self._changes.append(((topic, partition), old[0], new[0]))

    def _log_state_changes(self) -> None:
        """The planning call's state changes, one line per kind of change: at INFO, but a flowing
        partition's alternation between LOCAL_BEHIND and SYNCHRONIZED after it first caught up (at
        every leader commit and batch) at DEBUG."""
        changes, self._changes = self._changes, []
        by_change: dict[tuple[SynchronizedPartitionState, SynchronizedPartitionState], list[TopicPartitionKey]] = {}
        for tp, old, new in changes:
            by_change.setdefault((old, new), []).append(tp)
        offsets = self.states.snapshot()
        for (old, new), tps in by_change.items():
            flowing = old in FLOWING and new in FLOWING and all(tp in self._synchronized_once for tp in tps)
            if new == SYNCHRONIZED:
                self._synchronized_once.update(tps)
            detail = "" if len(tps) > 1 else (f" (follower {offsets[tps[0]].local}, "
                                              f"leader {offsets[tps[0]].remote})")
            logger.log(logging.DEBUG if flowing else logging.INFO, "%s: %s -> %s%s", _named(tps),
                       old.value, new.value, detail)

    def _restart_recreated_partitions(self, start: PartitionOffsets, fetched: PartitionOffsets,
                                      recreated: set[str]) -> PartitionOffsets:
        """A partition whose topic was `recreated` (new topic id), or whose watermark just `fetched` is
        below the query's position, lost data: fail, or return its earliest offset to restart from."""
        moved = {tp: hw for tp, hw in fetched.items()
                 if hw < start[tp] or (tp[0] in recreated and start[tp] > 0)}
        if self.metadata.reads_committed:
            # Under read_committed a position above the last stable offset (a transaction still
            # open) is not lost data while the log itself reaches past it.
            log_ends = self.metadata.log_end_offsets([tp for tp in moved if tp[0] not in recreated])
            moved = {tp: end for tp, end in moved.items() if tp[0] in recreated or log_ends[tp] < start[tp]}
        if not moved:
            return {}
        for (topic, partition), hw in sorted(moved.items()):
            message = (f"{topic}[{partition}]: topic deleted and recreated or truncated: the query is "
                       f"at offset {start[(topic, partition)]}, the partition now ends at {hw}")
            if self.options.fail_on_data_loss:
                raise KafkaDataLossError(message + "; set failOnDataLoss=false to restart it from earliest")
            logger.warning("%s; restarting the partition from earliest (failOnDataLoss=false)", message)
        return self.metadata.earliest_offsets(moved)

    def _track_staleness(self, start: PartitionOffsets, remote: dict[TopicPartitionKey, int | None]) -> None:
        now = time.monotonic()
        for tp, local in start.items():
            offset = remote.get(tp)
            seen = self._remote_changed_at.get(tp)
            if seen is None or seen[0] != offset:
                self._remote_changed_at[tp] = (offset, now)
                self.stale.discard(tp)
                continue
            waiting = self.high_watermarks.get(tp, local) > max(local, offset or 0)
            if waiting and now - seen[1] >= self.options.stale_after and tp not in self.stale:
                self.stale.add(tp)
                logger.warning(
                    "%s[%d]: leader has committed nothing for %.0fs while data is waiting "
                    "(follower %d, leader %s, high watermark %d)",
                    tp[0], tp[1], now - seen[1], local, offset, self.high_watermarks[tp],
                )
            elif not waiting:
                self.stale.discard(tp)

    def status(self) -> PlannerStatus:
        """Every partition as last planned, and the leader tracker's counters."""
        stats = self.remote.stats()
        commits = self.remote.commits()
        now = time.time()
        return PlannerStatus(
            updated_at=now,
            partitions=tuple(
                PartitionStatus(
                    topic=tp[0], partition=tp[1], state=get_state_from_offsets(offsets),
                    follower_offset=offsets.local, leader_offset=offsets.remote,
                    leader_offsets=group_offsets(tp, commits), high_watermark=self.high_watermarks.get(tp),
                    stale=tp in self.stale, seconds_since_leader_commit=leader_commit_age(tp, commits, now))
                for tp, offsets in sorted(self.states.snapshot().items())),
            commit_log=CommitLogStatus(stats.applied, stats.skipped_malformed, stats.last_commit_time,
                                       stats.last_error),
            batches=tuple(self.batches),
            events=() if self.event_log is None else self.event_log.events(),
        )

    def close(self) -> None:
        self.remote.stop()
        self.metadata.close()
        if self.publisher is not None:
            self.publisher.close()


def _ignore_terminal_interrupts() -> None:
    """The planner lives in a Python process Spark starts beside the driver, in the terminal's
    process group: a Ctrl-C meant for the job would kill it mid-planning and fail the query.
    The job decides how to stop (after the batch in flight); this process ignores SIGINT."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _named(partitions: Sequence[TopicPartitionKey]) -> str:
    """`events[0], events[1]`, at most `PARTITIONS_NAMED` of them, then `and N more`."""
    ordered = sorted(partitions)
    names = ", ".join(f"{topic}[{partition}]" for topic, partition in ordered[:PARTITIONS_NAMED])
    more = len(ordered) - PARTITIONS_NAMED
    return names + (f" and {more} more" if more > 0 else "")


def _commit_times(releases: Sequence[Release]) -> tuple[tuple[float, int], ...]:
    """Release times rounded to the millisecond, with how many releases had each."""
    counted = Counter(round(release.committed_at, 3) for release in releases)
    return tuple(sorted(counted.items()))
