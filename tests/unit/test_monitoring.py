"""Health-check file and Prometheus series from plain progress and status data (no Spark)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from synclib.app.health import HealthCheck, last_trigger_time, trigger_end_time
from synclib.app.metrics import ForwarderMetrics, rows_written
from synclib.app.monitoring import Monitoring
from synclib.source.status import PlannerStatus

NOW = 1_800_000_000.0


def progress(batch: int, timestamp: str = "2027-01-15T08:00:00.000Z", trigger_ms: int = 1500,
             rows: int = 10, output: int | None = 10, idle: bool = False) -> dict:
    durations = {"triggerExecution": trigger_ms, **({} if idle else {"addBatch": trigger_ms - 100})}
    return {"timestamp": timestamp, "batchId": batch, "durationMs": durations, "numInputRows": rows,
            "sink": {"numOutputRows": -1 if output is None else output}}


def status(updated_at: float = NOW - 1) -> PlannerStatus:
    return PlannerStatus.parse(json.dumps({
        "updated_at": updated_at,
        "partitions": [
            {"topic": "events", "partition": 0, "state": "LOCAL_BEHIND", "follower_offset": 5, "leader_offset": 8,
             "high_watermark": 20, "stale": False},
            {"topic": "events", "partition": 1, "state": "UNKNOWN", "follower_offset": 3, "leader_offset": None,
             "high_watermark": None, "stale": True},
        ],
        "commit_log": {"applied": 4, "skipped_malformed": 2, "last_commit_time": {"snuba": NOW - 7.5}},
    }))


def samples(metrics: ForwarderMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(metrics.registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


# --- health --------------------------------------------------------------------------------

def test_trigger_end_time_is_the_report_start_plus_its_duration() -> None:
    assert trigger_end_time(progress(0, "1970-01-01T00:00:10.250Z", trigger_ms=1500)) == pytest.approx(11.75)
    assert trigger_end_time({"batchId": 0}) is None
    assert last_trigger_time([progress(0, "1970-01-01T00:00:10.000Z")], status(updated_at=30.0)) == 30.0
    assert last_trigger_time([], None) is None


def test_the_file_is_touched_while_triggers_are_recent_and_not_after(tmp_path: Path) -> None:
    clock = [NOW]
    path = tmp_path / "probe" / "healthy"
    health = HealthCheck(str(path), stall_after_s=60.0, clock=lambda: clock[0])
    path.parent.mkdir()
    path.write_text("left by a previous run")
    health.start()
    assert not path.exists()  # a previous run's file cannot look healthy

    assert not health.observe(active=True, trigger_at=None)  # no trigger yet
    assert not path.exists()
    assert health.observe(active=True, trigger_at=NOW - 1)
    os.utime(path, (0, 0))
    assert health.observe(active=True, trigger_at=NOW - 60)
    assert path.stat().st_mtime > 0  # touched again

    os.utime(path, (0, 0))
    clock[0] += 61  # no trigger for longer than the deadline: a stall
    assert not health.observe(active=True, trigger_at=NOW - 1)
    assert not health.observe(active=False, trigger_at=clock[0])  # failed or stopped
    assert path.stat().st_mtime == 0


def test_a_stall_deadline_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="stall_after_s"):
        HealthCheck(str(tmp_path / "h"), stall_after_s=0)


# --- metrics -------------------------------------------------------------------------------

def test_partition_and_leader_series_follow_the_status() -> None:
    metrics = ForwarderMetrics(clock=lambda: NOW)
    metrics.observe([], status())
    got = samples(metrics)
    p0, p1 = (("partition", "0"), ("topic", "events")), (("partition", "1"), ("topic", "events"))
    assert got[("synclib_partition_follower_offset", p0)] == 5
    assert got[("synclib_partition_leader_offset", p0)] == 8
    assert got[("synclib_partition_high_watermark", p0)] == 20
    assert got[("synclib_partition_lag_offsets", p0)] == 15
    assert got[("synclib_partition_held_back_offsets", p0)] == 12
    assert ("synclib_partition_lag_offsets", p1) not in got  # unknown high watermark: no sample
    states = {labels[1][1]: value for (name, labels), value in got.items()
              if name == "synclib_partition_state" and labels[0] == ("partition", "0")}
    assert states == {"UNKNOWN": 0, "LOCAL_BEHIND": 1, "REMOTE_BEHIND": 0, "SYNCHRONIZED": 0}
    assert (got[("synclib_partition_stale", p0)], got[("synclib_partition_stale", p1)]) == (0, 1)
    assert {labels: value for (name, labels), value in got.items() if name == "synclib_partitions"} == {
        (("state", "UNKNOWN"),): 1, (("state", "LOCAL_BEHIND"),): 1, (("state", "REMOTE_BEHIND"),): 0,
        (("state", "SYNCHRONIZED"),): 0}
    assert got[("synclib_partitions_stale", ())] == 1
    assert (got[("synclib_held_back_offsets", ())], got[("synclib_lag_offsets", ())]) == (12, 15)
    assert got[("synclib_leader_commit_age_seconds", (("group", "snuba"),))] == pytest.approx(7.5)
    assert got[("synclib_commit_log_skipped_total", ())] == 2


def test_batches_are_counted_once_and_idle_triggers_not_at_all() -> None:
    metrics = ForwarderMetrics()
    first = [progress(0, "2027-01-15T08:00:00.000Z", trigger_ms=400, rows=7, output=7),
             progress(0, "2027-01-15T08:00:05.000Z", idle=True)]
    metrics.observe(first, None)
    metrics.observe([*first, progress(1, "2027-01-15T08:00:06.000Z", trigger_ms=3000, rows=5, output=None)], None)
    metrics.maintenance_run()
    got = samples(metrics)
    assert got[("synclib_batches_total", ())] == 2
    assert got[("synclib_rows_written_total", ())] == 12  # foreachBatch reports -1 output rows: input rows
    assert got[("synclib_batch_duration_seconds_count", ())] == 2
    assert got[("synclib_batch_duration_seconds_bucket", (("le", "0.5"),))] == 1
    assert got[("synclib_batch_duration_seconds_sum", ())] == pytest.approx(3.4)
    assert got[("synclib_maintenance_runs_total", ())] == 1
    assert not any(name.endswith("_created") for name, _ in got)


def test_rows_written_prefers_the_sink_count() -> None:
    assert rows_written(progress(0, rows=9, output=4)) == 4
    assert rows_written(progress(0, rows=9, output=None)) == 9


def test_a_busy_port_costs_the_metrics_not_the_job(tmp_path: Path) -> None:
    with Monitoring(None, None, 60.0) as off:
        off.observe(True, [progress(0)], status())  # neither configured: nothing to do, no error
        off.maintenance_run()
    first = ForwarderMetrics()
    assert first.serve(0, "127.0.0.1")
    port = first._server.server_port
    try:
        assert not ForwarderMetrics().serve(port, "127.0.0.1")
    finally:
        first.close()


def test_the_documented_metrics_are_the_served_ones() -> None:
    """docs/operations/monitoring.md's table names every series the endpoint serves, and no other."""
    metrics = ForwarderMetrics(clock=lambda: NOW)
    metrics.observe([progress(0)], status(), {"events": 2}, gate_latencies=[(0.2, 1)])
    metrics.maintenance_run()
    served = {family.name for family in text_string_to_metric_families(generate_latest(metrics.registry).decode())}
    page = (Path(__file__).parents[2] / "docs" / "operations" / "monitoring.md").read_text()
    named = re.findall(r"^\| `(synclib_[^`{]+)[^`]*` \|", page, re.M)
    documented = {name.removesuffix("_total") for name in named}

    assert documented == served
