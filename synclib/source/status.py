"""The status contract: where each partition stands, as the source planned it.

The source's planner writes a `PlannerStatus` to its `statusFile` option (JSON, replaced
atomically) after every planning call. Readers: the job's console output
(`synclib.app.progress`), monitoring, and the status command (`synclib.app.status`), which
fills the same `PartitionStatus` from the Delta table and Kafka without a running job.

The JSON, as `to_json` and `write` give it (every offset is a next offset, an exclusive bound)::

    {"updated_at": 1767261600.0,                  # time.time() of the planning call
     "partitions": [{
        "topic": "events", "partition": 0,
        "state": "LOCAL_BEHIND",                  # UNKNOWN | LOCAL_BEHIND | REMOTE_BEHIND | SYNCHRONIZED
        "follower_offset": 5,                     # the follower's position; null: unknown
        "leader_offset": 8,                       # min over the groups; null while any has not reported
        "leader_offsets": {"snuba": 8},           # each followed group's committed offset (or null)
        "high_watermark": 20,                     # the planner: as last asked, at most 5 s ago; null: unknown
        "stale": false,                           # leader silent for stale_after while data waits; null: not watched
        "seconds_since_leader_commit": 1.5,       # age of the gating group's newest commit; null: unknown
        "lag": 15, "held_back": 12, "ready": 3}], # derived (see the properties); ignored when read
     "commit_log": {"applied": 3, "skipped_malformed": 0,
                    "last_commit_time": {"snuba": 1767261599.2}, "last_error": null},
     "batches": [{                                # the last BATCHES_KEPT micro-batches planned, oldest first
        "end": {"events": {"0": 8}},              # their end offsets, Spark's JSON
        "leader_commits": [[1767261599.25, 4]]}], # the leader commits they release: [time.time(), how many]
     "events": [{"seq": 7, "at": 1767261600.0,     # the planner's log records (its process logs nowhere
        "level": "INFO", "logger": "synclib.source.datasource",  # else): the job logs them again
        "message": "events[0]: UNKNOWN -> LOCAL_BEHIND (follower 0, leader 8)"}]}

The types are pydantic dataclasses: `parse` validates a document (strictly: a value of the wrong
type is a `StatusFormatError` naming it) and `read` tolerates what a reader can meet, no file yet
or an unfinished one (None); absent optional keys take their defaults.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field
from typing import Any

from pydantic import ConfigDict, TypeAdapter, ValidationError, computed_field
from pydantic.dataclasses import dataclass

from synclib.leader.commitlog import Commit
from synclib.locations import read_text, write_text
from synclib.offsets import TopicPartitionKey
from synclib.source.state import SynchronizedPartitionState

LeaderCommits = Mapping[str, Mapping[TopicPartitionKey, Commit]]
# Values of the wrong type are refused (no "5" for 5, no true for 1); keys the document has and
# the type does not (the derived ones, or a newer writer's) are ignored.
_DOCUMENT = ConfigDict(strict=True, extra="ignore")


class StatusFormatError(ValueError):
    """A status document whose shape is not the contract's; the message names the value."""


@dataclass(frozen=True, config=_DOCUMENT)
class PartitionStatus:
    """One partition: the follower's and the leaders' offsets, and the gate's state."""

    topic: str
    partition: int
    state: SynchronizedPartitionState
    follower_offset: int | None = None
    leader_offset: int | None = None
    leader_offsets: Mapping[str, int | None] = field(default_factory=dict)
    high_watermark: int | None = None
    stale: bool | None = None
    seconds_since_leader_commit: float | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def lag(self) -> int | None:
        """Events in Kafka the follower has not forwarded (committed by the leader or not)."""
        if self.high_watermark is None or self.follower_offset is None:
            return None
        return max(0, self.high_watermark - self.follower_offset)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def held_back(self) -> int | None:
        """Events in Kafka beyond what the leader committed: what the gate holds back."""
        if self.high_watermark is None or self.follower_offset is None:
            return None
        return max(0, self.high_watermark - max(self.follower_offset, self.leader_offset or 0))

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ready(self) -> int:
        """Committed by the leader, in Kafka, not forwarded yet: the next batch's work."""
        if self.follower_offset is None or self.leader_offset is None or self.high_watermark is None:
            return 0
        return max(0, min(self.leader_offset, self.high_watermark) - self.follower_offset)

    def to_json(self) -> dict[str, Any]:
        """The partition as JSON-able data, the derived values included."""
        data: dict[str, Any] = _PARTITION_STATUS.dump_python(self, mode="json")
        return data


@dataclass(frozen=True, config=_DOCUMENT)
class CommitLogStatus:
    """What the thread following the leader's offsets has seen (the commit log or group offsets)."""

    applied: int = 0
    skipped_malformed: int = 0
    last_commit_time: Mapping[str, float] = field(default_factory=dict)  # per group, time.time() when applied
    last_error: str | None = None


@dataclass(frozen=True, config=_DOCUMENT)
class PlannedBatch:
    """A micro-batch as planned: its end offsets and the leader commits it releases (their times,
    rounded to the millisecond, and how many partitions' commits at each)."""

    end: Mapping[str, Mapping[str, int]]
    leader_commits: tuple[tuple[float, int], ...] = ()


@dataclass(frozen=True, config=_DOCUMENT)
class PlannerEvent:
    """A log record of the planner, numbered in the order it was made."""

    seq: int
    at: float
    level: str
    logger: str
    message: str


@dataclass(frozen=True, config=_DOCUMENT)
class PlannerStatus:
    """The source's status file: every partition as last planned, the commit log's counters, the
    last batches planned and the planner's last log records."""

    updated_at: float | None = None
    partitions: tuple[PartitionStatus, ...] = ()
    commit_log: CommitLogStatus = field(default_factory=CommitLogStatus)
    batches: tuple[PlannedBatch, ...] = ()
    events: tuple[PlannerEvent, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The document as JSON-able data, the derived values included."""
        data: dict[str, Any] = _PLANNER_STATUS.dump_python(self, mode="json")
        return data

    @classmethod
    def parse(cls, text: str | bytes) -> PlannerStatus:
        """The status document `text`; `StatusFormatError` naming the first value of another
        shape, `ValueError` when it is not JSON."""
        try:
            return _PLANNER_STATUS.validate_json(text)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            if first["type"] == "json_invalid":
                raise ValueError(f"status: not JSON: {first['msg']}") from None
            where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in first["loc"])
            problem = "missing" if first["type"] == "missing" else f"{first['msg']}, got {first['input']!r}"
            raise StatusFormatError(f"status{where}: {problem}") from None

    def write(self, path: str) -> None:
        """Replace `path` atomically: a reader sees the previous document or this one."""
        write_text(path, _PLANNER_STATUS.dump_json(self).decode())

    @classmethod
    def read(cls, path: str) -> PlannerStatus | None:
        """The status at `path`; None when there is none yet or it is not (yet) valid JSON."""
        text = read_text(path)
        if text is None:
            return None
        try:
            return cls.parse(text)
        except StatusFormatError:
            raise
        except ValueError:
            return None


_PARTITION_STATUS = TypeAdapter(PartitionStatus)
_PLANNER_STATUS = TypeAdapter(PlannerStatus)


def group_offsets(tp: TopicPartitionKey, commits: LeaderCommits) -> dict[str, int | None]:
    """Each followed group's committed offset of `tp` (None: the group has not reported it)."""
    return {group: (per_tp[tp].offset if tp in per_tp else None) for group, per_tp in commits.items()}


def leader_commit_age(tp: TopicPartitionKey, commits: LeaderCommits, now: float) -> float | None:
    """Seconds since the gating group's newest commit of `tp` (the oldest of the groups' newest
    commits), from its `orig_message_ts`; None while a group has no timestamped commit."""
    stamps = [per_tp[tp].orig_message_ts for per_tp in commits.values() if tp in per_tp]
    known = [stamp for stamp in stamps if stamp is not None]
    if not commits or len(known) < len(commits):
        return None
    return round(now - min(known), 1)
