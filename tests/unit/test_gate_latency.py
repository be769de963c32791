"""Gate latency: from the leader's commit (the planner's releases) to the batch's Delta commit."""

from __future__ import annotations

import pytest

from synclib.app.gate_latency import GateLatency, batch_latencies, committed_at, describe, quantiles, table_latencies
from synclib.leader.tracker import Release
from synclib.source.status import PlannedBatch, PlannerStatus

# 2026-01-01T10:00:00Z
STARTED = 1767261600.0


def progress(batch_id: int, end: str, trigger_ms: int = 300, commit_offsets_ms: int = 40,
             timestamp: str = "2026-01-01T10:00:00.000Z") -> dict:
    return {"batchId": batch_id, "timestamp": timestamp,
            "durationMs": {"addBatch": 200, "latestOffset": 50, "commitOffsets": commit_offsets_ms,
                           "triggerExecution": trigger_ms},
            "sources": [{"startOffset": None, "endOffset": end}]}


def test_a_batch_commits_at_its_trigger_start_plus_its_time_before_the_checkpoint_commit():
    assert committed_at(progress(0, '{"e":{"0":1}}')) == pytest.approx(STARTED + 0.26)
    assert committed_at({"batchId": 1, "timestamp": "2026-01-01T10:00:00.000Z",
                         "durationMs": {"latestOffset": 500, "triggerExecution": 500}}) is None  # idle trigger


def test_the_latencies_of_a_batch_are_those_of_the_batch_planned_with_its_end_offsets():
    status = PlannerStatus(batches=(
        PlannedBatch({"e": {"0": 5}}, ((STARTED - 1.0, 1),)),
        PlannedBatch({"e": {"0": 9, "1": 2}}, ((STARTED - 0.2, 3), (STARTED + 0.1, 1))),
    ))

    latencies = batch_latencies(progress(1, '{"e":{"1":2,"0":9}}'), status)

    assert latencies == [(pytest.approx(0.46), 3), (pytest.approx(0.16), 1)]
    assert batch_latencies(progress(2, '{"e":{"0":10}}'), status) == []  # planned too long ago
    assert batch_latencies(progress(1, '{"e":{"0":9,"1":2}}'), None) == []


def test_each_batch_is_observed_once_and_the_quantiles_cover_the_window():
    clock = [100.0]
    gate = GateLatency(window_s=10.0, clock=lambda: clock[0])
    status = PlannerStatus(batches=(PlannedBatch({"e": {"0": 5}}, ((STARTED - 1.0, 4),)),))
    first = progress(0, '{"e":{"0":5}}')

    assert gate.observe([first], status) == [(pytest.approx(1.26), 4)]
    assert gate.observe([first], status) == []  # seen
    assert gate.quantiles() == (pytest.approx(1.26), pytest.approx(1.26))
    clock[0] += 11.0
    assert gate.quantiles() is None


def test_quantiles_weigh_each_observation_by_its_count():
    p50, p99 = quantiles([(0.1, 98), (5.0, 2)])
    assert p50 == pytest.approx(0.1) and p99 == pytest.approx(5.0)
    assert quantiles([]) is None
    assert describe((0.214, 0.38)) == "gate latency p50 0.21 s, p99 0.38 s"
    assert describe(None) == ""


def test_the_tables_latencies_pair_each_commit_with_the_releases_it_holds():
    releases = {("e", 0): [Release(3, 100.0), Release(5, 101.0), Release(9, 102.5)],
                ("e", 1): [Release(2, 101.5)]}
    batches = [(100.5, {("e", 0): 3}), (101.4, {("e", 0): 5, ("e", 1): 0}), (103.0, {("e", 0): 9, ("e", 1): 2})]

    latencies = table_latencies(batches, releases)

    # the first commit only bounds the second: what it released (offset 3) is not counted
    assert sorted(latencies) == [(pytest.approx(0.4), 1), (pytest.approx(0.5), 1), (pytest.approx(1.5), 1)]
    assert table_latencies(batches[:1], releases) == []
