"""The status contract: where each partition stands, as the source planned it.

The source's planner writes a `PlannerStatus` to its `statusFile` option (JSON, replaced
atomically) after every planning call. Readers: the job's console output
(`synclib.app.progress`), monitoring, and the status command (`synclib.app.status`), which
fills the same `PartitionStatus` from the Delta table and Kafka without a running job.

The JSON, as `to_json` writes it (every offset is a next offset, an exclusive bound)::

    {"updated_at": 1767261600.0,                  # time.time() of the planning call
     "partitions": [{
        "topic": "events", "partition": 0,
        "state": "LOCAL_BEHIND",                  # UNKNOWN | LOCAL_BEHIND | REMOTE_BEHIND | SYNCHRONIZED
        "follower_offset": 5,                     # the follower's position; null: unknown
        "leader_offset": 8,                       # min over the groups; null while any has not reported
        "leader_offsets": {"snuba": 8},           # each followed group's committed offset (or null)
        "high_watermark": 20,                     # null: unknown (e.g. the topic is gone)
        "stale": false,                           # leader silent for stale_after while data waits; null: not watched
        "seconds_since_leader_commit": 1.5,       # age of the gating group's newest commit; null: unknown
        "lag": 15, "held_back": 12, "ready": 3}], # derived (see the properties); ignored when read
     "commit_log": {"applied": 3, "skipped_malformed": 0,
                    "last_commit_time": {"snuba": 1767261599.2}, "last_error": null}}

Reading tolerates what a reader can meet: no file yet or an unfinished one (`read` returns
None) and absent optional keys (their defaults). A value of the wrong type is a
`StatusFormatError` naming it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from synclib.leader.commitlog import Commit
from synclib.locations import write_text
from synclib.offsets import TopicPartitionKey
from synclib.source.state import SynchronizedPartitionState

_T = TypeVar("_T")
LeaderCommits = Mapping[str, Mapping[TopicPartitionKey, Commit]]


class StatusFormatError(ValueError):
    """A status document whose shape is not the contract's; the message names the value."""


@dataclass(frozen=True)
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

    @property
    def lag(self) -> int | None:
        """Events in Kafka the follower has not forwarded (committed by the leader or not)."""
        if self.high_watermark is None or self.follower_offset is None:
            return None
        return max(0, self.high_watermark - self.follower_offset)

    @property
    def held_back(self) -> int | None:
        """Events in Kafka beyond what the leader committed: what the gate holds back."""
        if self.high_watermark is None or self.follower_offset is None:
            return None
        return max(0, self.high_watermark - max(self.follower_offset, self.leader_offset or 0))

    @property
    def ready(self) -> int:
        """Committed by the leader, in Kafka, not forwarded yet: the next batch's work."""
        if self.follower_offset is None or self.leader_offset is None or self.high_watermark is None:
            return 0
        return max(0, min(self.leader_offset, self.high_watermark) - self.follower_offset)

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic, "partition": self.partition, "state": self.state.value,
            "follower_offset": self.follower_offset, "leader_offset": self.leader_offset,
            "leader_offsets": dict(self.leader_offsets), "high_watermark": self.high_watermark,
            "stale": self.stale, "seconds_since_leader_commit": self.seconds_since_leader_commit,
            "lag": self.lag, "held_back": self.held_back, "ready": self.ready,
        }

    @classmethod
    def from_json(cls, data: Any, where: str = "partition") -> PartitionStatus:
        data = _object(data, where)
        state = _required(data, "state", str, where)
        try:
            parsed_state = SynchronizedPartitionState(state)
        except ValueError:
            raise StatusFormatError(f"{where}.state: unknown state {state!r}") from None
        by_group = _optional(data, "leader_offsets", dict, where) or {}
        return cls(
            topic=_required(data, "topic", str, where),
            partition=_required(data, "partition", int, where),
            state=parsed_state,
            follower_offset=_optional(data, "follower_offset", int, where),
            leader_offset=_optional(data, "leader_offset", int, where),
            leader_offsets={group: _optional(by_group, group, int, f"{where}.leader_offsets") for group in by_group},
            high_watermark=_optional(data, "high_watermark", int, where),
            stale=_optional(data, "stale", bool, where),
            seconds_since_leader_commit=_optional(data, "seconds_since_leader_commit", float, where),
        )


@dataclass(frozen=True)
class CommitLogStatus:
    """What the thread following the leader's offsets has seen (the commit log or group offsets)."""

    applied: int = 0
    skipped_malformed: int = 0
    last_commit_time: Mapping[str, float] = field(default_factory=dict)  # per group, time.time() when applied
    last_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"applied": self.applied, "skipped_malformed": self.skipped_malformed,
                "last_commit_time": dict(self.last_commit_time), "last_error": self.last_error}

    @classmethod
    def from_json(cls, data: Any, where: str = "status.commit_log") -> CommitLogStatus:
        data = _object(data, where)
        times = _optional(data, "last_commit_time", dict, where) or {}
        return cls(
            applied=_optional(data, "applied", int, where) or 0,
            skipped_malformed=_optional(data, "skipped_malformed", int, where) or 0,
            last_commit_time={group: _required(times, group, float, f"{where}.last_commit_time") for group in times},
            last_error=_optional(data, "last_error", str, where),
        )


@dataclass(frozen=True)
class PlannerStatus:
    """The source's status file: every partition as last planned, and the commit log's counters."""

    updated_at: float | None = None
    partitions: tuple[PartitionStatus, ...] = ()
    commit_log: CommitLogStatus = field(default_factory=CommitLogStatus)

    def to_json(self) -> dict[str, Any]:
        return {"updated_at": self.updated_at, "partitions": [p.to_json() for p in self.partitions],
                "commit_log": self.commit_log.to_json()}

    @classmethod
    def from_json(cls, data: Any) -> PlannerStatus:
        data = _object(data, "status")
        partitions = _optional(data, "partitions", list, "status") or []
        commit_log = data.get("commit_log")
        return cls(
            updated_at=_optional(data, "updated_at", float, "status"),
            partitions=tuple(PartitionStatus.from_json(p, f"status.partitions[{i}]") for i, p in enumerate(partitions)),
            commit_log=CommitLogStatus() if commit_log is None else CommitLogStatus.from_json(commit_log),
        )

    def write(self, path: str) -> None:
        """Replace `path` atomically: a reader sees the previous document or this one."""
        write_text(path, json.dumps(self.to_json()))

    @classmethod
    def read(cls, path: str) -> PlannerStatus | None:
        """The status at `path`; None when there is none yet or it is not (yet) valid JSON."""
        try:
            with open(path) as file:
                data = json.load(file)
        except (FileNotFoundError, ValueError):
            return None
        return cls.from_json(data)


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


_KINDS = {int: "an integer", float: "a number", str: "a string", bool: "a boolean", dict: "an object",
          list: "an array"}


def _object(data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise StatusFormatError(f"{where}: expected an object, got {data!r}")
    return data


def _optional(data: dict[str, Any], key: str, kind: type[_T], where: str) -> _T | None:
    """`data[key]` if it is a `kind`, None if absent or null; an int is a valid float."""
    value = data.get(key)
    if value is None:
        return None
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise StatusFormatError(f"{where}.{key}: expected {_KINDS[kind]}, got {value!r}")
    return value


def _required(data: dict[str, Any], key: str, kind: type[_T], where: str) -> _T:
    value = _optional(data, key, kind, where)
    if value is None:
        raise StatusFormatError(f"{where}.{key}: missing")
    return value
