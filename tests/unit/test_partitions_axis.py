"""The benchmark's partitions axis: the same total backlog at every partition count, and one table."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks import report
from benchmarks.benchmark import axis_arguments, parse_args


def test_the_axis_spreads_the_first_counts_backlog_over_each_count() -> None:
    args = parse_args(["--partitions", "4,64,256,1024", "--messages", "25600", "--memory-messages", "2048",
                       "--workdir", "/w"])

    runs = axis_arguments(args)

    assert [one.workdir for _, one in runs] == [f"/w/partitions-{count}" for count in (4, 64, 256, 1024)]

    assert [(count, one.partitions, one.messages, one.memory_messages) for count, one in runs] == [
        (4, 4, 25600, 2048), (64, 64, 1600, 128), (256, 256, 400, 32), (1024, 1024, 100, 8)]
    assert [one.warmup_run for _, one in runs] == [True, False, False, False]  # later counts run warm
    cold = axis_arguments(parse_args(["--partitions", "4,8", "--no-warmup-run"]))
    assert not any(one.warmup_run for _, one in cold)
    assert parse_args(["--partitions", "8"]).partition_axis == [8]
    with pytest.raises(SystemExit):
        parse_args(["--partitions", "4,many"])


def results(rows_per_s: float, spark: float, one_row_ms: float, p50: float, ratio: float) -> dict[str, Any]:
    return {"settings": {"engines": ["delta-rs"], "trigger": "250ms"},
            "median": {"load_avg_1m": 3.0, "latency": {"250ms": {"p50_s": p50, "p99_s": 2 * p50}},
                       "table": {"forwarder -> delta-rs": {"rows_per_s": rows_per_s},
                                 "Spark Kafka source -> delta-rs": {"rows_per_s": spark}}},
            "floor": {"250ms": {"one_row_ms": {"triggerExecution": one_row_ms, "latestOffset": 20, "addBatch": 100},
                                "idle_ms": {"latestOffset": 15},
                                "idle_cpu_s_per_s": {"python-driver-runner": 0.04}}},
            "memory": {"peak_mib": {"N": {"total": 900.0}}, "ratio": {"total": ratio}}}


def test_the_axis_table_and_targets(capsys: pytest.CaptureFixture[str]) -> None:
    axis = {"4": results(40000, 30000, 200, 0.4, 1.05), "256": results(30000, 29000, 320, 1.2, 1.1),
            "1024": results(20000, 15000, 400, 1.5, 1.15)}

    rows = report.axis_rows(axis)
    report.print_axis(axis)

    assert rows[1]["planner_cpu_ms_per_s"] == pytest.approx(40.0)  # 0.04 CPU s/s while idle
    assert report.axis_targets(rows) == {
        "256: one-row batch <= 1.5x 4's": False, "256: rows/s >= 0.8x 4's": False, "256: gate p50 <= 1 s": False,
        "1024: rows/s >= Spark's Kafka source": True, "1024: memory bounded (RSS 10N/N <= 1.2)": True}
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("partitions axis")
    assert printed[1].split()[:3] == ["partitions", "load", "rows/s"]
    assert printed[3].split()[:4] == ["256", "3.0", "30,000", "29,000"]
    assert printed[-1].startswith("targets: 256: one-row batch <= 1.5x 4's: NOT met")
