"""Micro-batch planning arithmetic (pure functions, no I/O).

Per partition: `end = max(start, min(high_watermark, remote))`; remote unknown -> `end = start`.
A read limit is then split across partitions as Spark's Kafka source does it.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping

from synclib.offsets import PartitionOffsets, TopicPartitionKey


def releasable_end(start: int, high_watermark: int, remote: int | None) -> int:
    """How far one partition may be read: up to the leader's commit, never past the data,
    never below where it already is."""
    if remote is None:
        return start
    return max(start, min(high_watermark, remote))


def plan_end_offsets(
    start: Mapping[TopicPartitionKey, int],
    high_watermarks: Mapping[TopicPartitionKey, int],
    remote: Mapping[TopicPartitionKey, int | None],
) -> PartitionOffsets:
    """`releasable_end` for every partition in `start` (partitions without a known high
    watermark stay where they are)."""
    return {
        tp: releasable_end(offset, high_watermarks.get(tp, offset), remote.get(tp))
        for tp, offset in start.items()
    }


def watermarks_to_ask(start: Mapping[TopicPartitionKey, int], remote: Mapping[TopicPartitionKey, int | None],
                      known: Collection[TopicPartitionKey], every: bool) -> list[TopicPartitionKey]:
    """The partitions of `start` whose high watermark a planning call asks the brokers: those the leader
    committed past the follower (`releasable_end` moves no other) and those without a `known` one; all
    of them when `every`."""
    return [tp for tp, offset in start.items()
            if every or tp not in known or (remote.get(tp) or 0) > offset]


def cap_offsets(end: Mapping[TopicPartitionKey, int], cap: Mapping[TopicPartitionKey, int],
                start: Mapping[TopicPartitionKey, int]) -> PartitionOffsets:
    """Clamp `end` to `cap` (the Trigger.AvailableNow target) but never below `start`; a
    partition the cap does not name stays at its start."""
    return {tp: max(start[tp], min(offset, cap.get(tp, start[tp]))) for tp, offset in end.items()}


def limit_rows(
    start: Mapping[TopicPartitionKey, int], end: Mapping[TopicPartitionKey, int], max_rows: int
) -> PartitionOffsets:
    """Split `max_rows` across partitions in proportion to their backlog, as Spark's Kafka
    source does: a share below one row is rounded up so small partitions are not starved."""
    sizes = {tp: end[tp] - start[tp] for tp in end if end[tp] > start[tp]}
    total = sum(sizes.values())
    if total <= max_rows:
        return dict(end)
    limited = dict(end)
    for tp, size in sizes.items():
        share = max_rows * (size / total)
        rows = math.ceil(share) if share < 1 else math.floor(share)
        limited[tp] = min(end[tp], start[tp] + rows)
    return limited


def has_work(start: Mapping[TopicPartitionKey, int], end: Mapping[TopicPartitionKey, int]) -> bool:
    """Whether a batch from `start` to `end` moves any partition (Spark runs it then)."""
    return any(start.get(tp) != offset for tp, offset in end.items())


