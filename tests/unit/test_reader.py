"""Task planning of the read path (synclib/kafka/reader.py; reading on a broker: tests/broker/test_reader.py
and tests/broker/test_arrow_records.py): small ranges packed into few tasks, large ranges split."""

from __future__ import annotations

from synclib.kafka.reader import plan_tasks
from synclib.offsets import OffsetRange


def covered(tasks: list) -> dict[tuple[str, int], list[tuple[int, int]]]:
    """Per partition, the offset ranges the tasks read, merged where they touch."""
    found: dict[tuple[str, int], list[tuple[int, int]]] = {}
    for task in tasks:
        for r in task.ranges:
            found.setdefault((r.topic, r.partition), []).append((r.start, r.end))
    merged = {}
    for tp, spans in found.items():
        spans.sort()
        out = [spans[0]]
        for start, end in spans[1:]:
            assert start == out[-1][1], f"{tp}: gap or overlap at {start}"
            out[-1] = (out[-1][0], end)
        merged[tp] = out
    return merged


def test_a_small_batch_is_one_task_reading_every_range() -> None:
    ranges = [OffsetRange("events", p, 100 * p, 100 * p + 1000) for p in range(4)]
    tasks = plan_tasks(ranges, min_rows=50_000, max_rows=500_000)
    assert len(tasks) == 1
    assert list(tasks[0].ranges) == ranges


def test_large_ranges_keep_one_task_each() -> None:
    ranges = [OffsetRange("events", p, 0, 200_000) for p in range(4)]
    tasks = plan_tasks(ranges, min_rows=50_000, max_rows=500_000)
    assert sorted(len(t.ranges) for t in tasks) == [1, 1, 1, 1]
    assert covered(tasks) == {("events", p): [(0, 200_000)] for p in range(4)}


def test_a_hot_partition_is_split_evenly() -> None:
    ranges = [OffsetRange("events", 0, 7, 1_000_007), OffsetRange("events", 1, 0, 10)]
    tasks = plan_tasks(ranges, min_rows=50_000, max_rows=500_000)
    assert len(tasks) == 2
    assert covered(tasks) == {("events", 0): [(7, 1_000_007)], ("events", 1): [(0, 10)]}
    assert sorted(sum(r.size for r in t.ranges) for t in tasks) == [500_000, 500_010]


def test_mid_sized_batches_are_balanced_across_tasks() -> None:
    ranges = [OffsetRange(t, p, 0, size) for t, p, size in
              [("a", 0, 40_000), ("a", 1, 35_000), ("b", 0, 30_000), ("b", 1, 25_000), ("b", 2, 20_000)]]
    tasks = plan_tasks(ranges, min_rows=50_000, max_rows=500_000)
    assert covered(tasks) == {(r.topic, r.partition): [(0, r.end)] for r in ranges}
    assert sorted(sum(r.size for r in t.ranges) for t in tasks) == [75_000, 75_000]


def test_nothing_to_read_is_no_task() -> None:
    assert plan_tasks([]) == []
