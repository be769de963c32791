"""Gate latency: the time from a leader's commit to the Delta commit that holds its offsets.

What a post-process forwarder's operator watches: how long after the leader commits an event its
follower has it. The planner keeps, for each micro-batch it plans, the times of the leader commits
that batch releases (`PlannerStatus.batches`: the commit-log records' timestamps, or when the group
poller saw them); once Spark reports the batch, its Delta commit time (the trigger's start plus its
duration up to the sink's commit) minus each of those is one observation. Both clocks are wall
clocks: the leader's producer's and the driver's. The status command measures the same from the
table's recent commits and the commit log (`table_latencies`).
"""

from __future__ import annotations

import itertools
import statistics
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from synclib.leader.tracker import Release
from synclib.offsets import PartitionOffsets, TopicPartitionKey, parse_offsets_json
from synclib.source.status import PlannerStatus

WINDOW_S = 10.0  # the progress line's "recent": ten seconds (the histogram keeps every observation)


def committed_at(progress: Mapping[str, Any]) -> float | None:
    """When a batch's sink committed: the trigger's start plus its duration without the checkpoint
    commit that follows the sink (`commitOffsets`); None for a trigger that ran no batch."""
    durations = progress.get("durationMs") or {}
    if "addBatch" not in durations:
        return None
    started = datetime.fromisoformat(str(progress["timestamp"]).replace("Z", "+00:00")).timestamp()
    return started + (int(durations.get("triggerExecution") or 0) - int(durations.get("commitOffsets") or 0)) / 1000


def batch_latencies(progress: Mapping[str, Any], status: PlannerStatus | None) -> list[tuple[float, int]]:
    """The gate latencies of the batch `progress` reports, as (seconds, how many), from the batch the
    planner planned with the same end offsets; empty when unknown (no batch, or planned too long ago)."""
    when = committed_at(progress)
    sources = progress.get("sources") or []
    if when is None or status is None or len(sources) != 1 or sources[0].get("endOffset") in (None, "null"):
        return []
    end = parse_offsets_json(sources[0]["endOffset"])
    for planned in reversed(status.batches):
        if parse_offsets_json(dict(planned.end)) == end:
            return [(max(0.0, when - at), count) for at, count in planned.leader_commits]
    return []


class GateLatency:
    """The gate latencies of a run's batches: each batch observed once, quantiles of the last `window_s`."""

    def __init__(self, window_s: float = WINDOW_S, clock: Callable[[], float] = time.time) -> None:
        self._window_s = window_s
        self._clock = clock
        self._recent: deque[tuple[float, float, int]] = deque()  # (observed at, seconds, how many)
        self._seen: tuple[str, int] = ("", -1)

    def observe(self, progresses: Sequence[Mapping[str, Any]], status: PlannerStatus | None) -> list[tuple[float, int]]:
        """The latencies of the batches not seen yet (oldest first), kept for `quantiles`."""
        new: list[tuple[float, int]] = []
        for progress in progresses:
            key = (str(progress["timestamp"]), int(progress["batchId"]))
            if key <= self._seen:
                continue
            self._seen = key
            new.extend(batch_latencies(progress, status))
        now = self._clock()
        self._recent.extend((now, seconds, count) for seconds, count in new)
        return new

    def quantiles(self) -> tuple[float, float] | None:
        """p50 and p99 of the last `window_s` (None without an observation)."""
        now = self._clock()
        while self._recent and now - self._recent[0][0] > self._window_s:
            self._recent.popleft()
        return quantiles([(seconds, count) for _, seconds, count in self._recent])


def table_latencies(batches: Sequence[tuple[float, PartitionOffsets]],
                    releases: Mapping[TopicPartitionKey, Sequence[Release]]) -> list[tuple[float, int]]:
    """The gate latencies of consecutive Delta commits (`recent_batches`: when, offsets held up to)
    from the leader's `releases`: a release at offset `o` of a partition is held by the first commit
    whose offset reaches `o`. The oldest commit only bounds the next (what it released is unknown)."""
    latencies: list[tuple[float, int]] = []
    for (_, before), (committed, after) in itertools.pairwise(batches):
        for tp, end in after.items():
            start = before.get(tp, end)
            latencies.extend((max(0.0, committed - release.committed_at), 1)
                             for release in releases.get(tp, ()) if start < release.offset <= end)
    return latencies


def quantiles(latencies: Sequence[tuple[float, int]]) -> tuple[float, float] | None:
    """p50 and p99 of weighted observations (seconds, how many); None when there are none."""
    values = sorted(seconds for seconds, count in latencies for _ in range(count))
    if not values:
        return None
    if len(values) == 1:
        return values[0], values[0]
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return cuts[49], cuts[98]


def describe(p50_p99: tuple[float, float] | None) -> str:
    """`gate latency p50 0.21 s, p99 0.38 s` ("" when unknown)."""
    if p50_p99 is None:
        return ""
    return f"gate latency p50 {p50_p99[0]:.2f} s, p99 {p50_p99[1]:.2f} s"
