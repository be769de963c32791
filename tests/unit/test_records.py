"""Recorded benchmark results and the docs' tables rendered from them (benchmarks/records.py)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import records


def results(load: float, gate_p50: float, one_row_ms: int) -> dict:
    """The parts of a benchmark run's results JSON a record keeps."""
    floor = {"latency": {"p50_s": gate_p50 / 2, "p99_s": gate_p50}, "idle_cpu_s_per_s": {"jvm": 0.01, "driver": 0.02},
             "one_row_ms": {"triggerExecution": one_row_ms + 500, "latestOffset": 500}}
    return {"environment": {"date": "2026-11-28T03:00:00+00:00", "load_avg": [load, 0, 0],
                            "load_avg_end": [load + 1, 0, 0], "cpus": 2, "memory_gib": 23.5,
                            "python": "3.11.7", "pyspark": "4.2.0", "spark_master": "local[2]"},
            "median": {"latency": {"400ms": {"p50_s": 0.4, "p99_s": 0.7}, "leader": {"p50_s": gate_p50, "p99_s": 0.4}}},
            "floor": {"leader": floor},
            "floor_spark_kafka": {"0ms": {**floor, "latency": {"p50_s": 0.2, "p99_s": 0.3}}},
            "floor_spark": {"triggerExecution": 150}}


def test_runs_of_one_command_accumulate_and_the_table_shows_their_medians(tmp_path: Path) -> None:
    command = "./spark-submit.sh jobs/benchmark.py run --runs 1"
    for load, p50, one_row in ((0.5, 0.2, 180), (1.0, 0.3, 200), (0.7, 0.25, 190)):
        records.record("triggers", command, records.summarize(results(load, p50, one_row)), tmp_path)
    assert len(json.loads((tmp_path / "triggers.json").read_text())["runs"]) == 3

    body = records.render("triggers", tmp_path)

    lines = body.splitlines()
    assert lines[2] == "| `leader` (the default) | 0.25 / 0.40 s | 0.125 / 0.250 s | 190 ms | 0.030 s/s |"
    assert lines[3] == "| `processing_time` 400ms | 0.40 / 0.70 s | - / - s | - | - |"
    assert lines[4].startswith("| Spark's Kafka source -> delta-rs at 0ms | - | 0.200 / 0.300 s | 190 ms")
    assert lines[5] == "| Spark alone: rate -> Parquet at 0ms | - | - | 150 ms | - |"
    assert lines[-1].startswith(f"`{command}`: medians of 3 recorded runs on ") and "load 0.5-2.0, 2 CPUs" in lines[-1]
    # another command: a record anew
    records.record("triggers", command + " --runs 2", records.summarize(results(3.0, 1.0, 900)), tmp_path)
    assert len(json.loads((tmp_path / "triggers.json").read_text())["runs"]) == 1


def test_the_pages_tables_are_their_records() -> None:
    for page in records.pages():
        text = page.read_text(encoding="utf-8")
        assert records.update(text) == text, f"{page}: a results table differs from its record: run `{records.COMMAND}`"


def test_the_command_a_record_names_leaves_out_where_outputs_went() -> None:
    from benchmarks.benchmark import recorded_command

    assert recorded_command(["--runs", "3", "--record", "triggers", "--output=/tmp/x.json", "--workdir", "/w",
                             "--floor-triggers", "leader"]) == (
        "./spark-submit.sh jobs/benchmark.py run --runs 3 --floor-triggers leader")
    assert records.command("python -m benchmarks.soak", ["--minutes", "5", "--json", "x.json", "--keep=/k"]) == (
        "python -m benchmarks.soak --minutes 5")


def test_request_counts_are_recorded_whole_and_their_tables_show_the_newest_run(tmp_path: Path) -> None:
    counts = {"trigger_s": 0.4, "cost_per_day": {"maintenance every 300 s": {
        "busy_usd": 9.5, "idle_usd": 0.18, "batches_per_day": 216000, "passes_per_day": 288}}}
    for busy in (12.0, 9.5):
        run = results(1.0, 0.2, 180)
        store = {"engines": {"delta-rs": {"requests": {**counts, "cost_per_day": {"maintenance every 300 s": {
            **counts["cost_per_day"]["maintenance every 300 s"], "busy_usd": busy}}}, "floor": {}}}}
        records.record("object-store", "./spark-submit.sh jobs/benchmark.py object-store",
                       records.summarize({**run, "object_store": store}), tmp_path)

    lines = records.render("cost-object-store", tmp_path).splitlines()

    assert lines[:4] == ["| job | delta-rs |", "|---|---|",
                         "| busy: a one-row batch every 0.4 s (216,000 a day), maintenance every 300 s | $9.50 |",
                         "| idle: no event all day, maintenance every 300 s | $0.18 |"]
    assert lines[-1].startswith("`./spark-submit.sh jobs/benchmark.py object-store`: recorded once on ")


def test_throughput_is_recorded_per_contender_and_rendered_as_medians_over_the_runs(tmp_path: Path) -> None:
    command = "./spark-submit.sh jobs/benchmark.py run --engines delta-rs"
    for rows_per_s, ratio in ((500_000.0, 1.0), (600_000.0, 1.2), (550_000.0, 1.1)):
        run = results(1.0, 0.2, 180)
        cpu = {"jvm": 0.5, "py-workers": 2.0, "py-driver": 0.1, "broker": 0.4, "total": 3.0}
        run["median"]["table"] = {
            "librdkafka (1 process)": {"rows_per_s": rows_per_s / ratio, "cpu_us_per_row": cpu,
                                       "forwarder delta-rs x": ratio},
            "forwarder -> delta-rs": {"rows_per_s": rows_per_s, "cpu_us_per_row": cpu, "forwarder delta-rs x": 1.0}}
        run["memory"] = {"rows": {"N": 200_000, "10N": 2_000_000},
                         "peak_mib": {"N": {"total": 3000.0}, "10N": {"total": 3000.0 * ratio}}}
        records.record("direct", command, records.summarize(run), tmp_path)

    lines = records.render("throughput-direct", tmp_path).splitlines()

    assert lines[0] == ("| contender | rows/s | CPU us/row: JVM / Python workers / driver / broker = total | "
                        "forwarder -> delta-rs x |")
    assert lines[2] == "| librdkafka (1 process) | 500,000 | 0.50 / 2.00 / 0.10 / 0.40 = 3.00 | 1.10 |"
    assert lines[3] == "| forwarder -> delta-rs | 550,000 | 0.50 / 2.00 / 0.10 / 0.40 = 3.00 | 1.00 |"
    assert lines[5] == ("Peak RSS of all the forwarder's processes at a backlog of 200,000 rows (N): 3,000 MiB; "
                        "at 2,000,000 (10N): 3,300 MiB (1.10x).")
    assert lines[-1].startswith(f"`{command}`: medians of 3 recorded runs")


def test_the_partitions_axis_is_recorded_per_count_and_rendered_beside_sparks_source(tmp_path: Path) -> None:
    def one(partitions: int, rows_per_s: float, spark_rows_per_s: float) -> dict:
        run = results(2.0, 0.3, 200)
        return {**run, "settings": {"engines": ["delta-rs"], "trigger": "leader"},
                "median": {**run["median"], "load_avg_1m": 2.0, "table": {
                    "forwarder -> delta-rs": {"rows_per_s": rows_per_s},
                    "Spark Kafka source -> delta-rs": {"rows_per_s": spark_rows_per_s}}}}

    axis = {"partitions_axis": {"4": one(4, 10_000.0, 4_000.0), "256": one(256, 12_000.0, 90.0)}}
    records.record("partitions", "./spark-submit.sh jobs/benchmark.py run --partitions 4,256",
                   records.summarize(axis), tmp_path)

    lines = records.render("axis-partitions", tmp_path).splitlines()

    assert lines[0].startswith("| partitions | rows/s | Spark's Kafka source rows/s | gate p50 s | gate p99 s |")
    assert lines[2].startswith("| 4 | 10,000 | 4,000 | 0.30 | 0.40 | 200 | 700 |")
    assert lines[3].startswith("| 256 | 12,000 | 90 | 0.30 | 0.40 |")


def test_growth_shows_each_modes_commit_at_both_ages_and_the_median_of_the_runs_ratios(tmp_path: Path) -> None:
    def measurement(versions: int, commit_ms: float) -> dict:
        return {"mode": "on", "versions": versions, "commit_ms_p50": commit_ms, "commit_ms_mean": commit_ms,
                "commit_ms_max": commit_ms, "read_ms": 60, "live_files": 40, "log_files": 150, "maintenance_s": 1.5}

    for old_ms in (0.4, 0.5, 0.3):
        records.record_run("growth", "python -m benchmarks.growth", ["--modes", "on", "--record", "growth"],
                           {"date": "2026-11-28T03:00:00+00:00", "load_avg": [1.0, 0, 0], "cpus": 2},
                           directory=tmp_path, growth=[measurement(100, 0.4), measurement(20_000, old_ms)])

    lines = records.render("growth", tmp_path).splitlines()

    assert lines[0].startswith("| mode | batch commit p50 at 100 versions | at 20,000 | growth (runs) |")
    assert lines[2] == ("| delta-rs, maintenance at its defaults | 0.40 ms | 0.40 ms | **1.00x** (1.00, 1.25, 0.75) "
                        "| 60 / 60 ms | 40 / 150 | 1.5 s |")
    assert lines[-1].startswith(
        "`python -m benchmarks.growth --modes on`: medians of 3 recorded runs on 2026-11-28, load")


def test_a_long_run_is_a_column_of_its_figures(tmp_path: Path) -> None:
    quarter = {"batches": 200, "batch_ms_p50": 600.0, "batch_ms_p99": 4000.0, "peak_rss_mib": {"jvm": 650.0}}
    report = {"seconds": 1200.0, "rate": 2000.0, "kills": 3, "broker_pause_s": 20.0, "exactly_once": True,
              "duplicates": 0, "gaps": 0, "beyond_leader": 0, "rows": 2_400_000, "live_files": 34, "versions": 673,
              "maintenance_passes": 27, "first": quarter, "last": {**quarter, "batches": 180},
              "engine": "delta-rs", "object_store": False}
    records.record_run("soak", "python -m benchmarks.soak", [], {"date": "2026-11-28T03:00:00+00:00",
                                                                 "load_avg": [6.0, 0, 0]},
                       directory=tmp_path, soak=report)

    lines = records.render("soak", tmp_path).splitlines()

    assert lines[0].startswith("| | delta-rs (load 6.0-")
    assert lines[3] == ("| rows; exactly once (duplicates, gaps, beyond the leader, also at each kill) | "
                        "2,400,000; yes (0, 0, 0) |")
    assert lines[4] == "| micro-batches, first / last quarter | 200 / 180 |"
    assert lines[8] == "| peak RSS, Spark's JVM, first / last quarter | 650 / 650 MiB |"


def test_dead_letters_cost_is_the_difference_of_the_two_sinks_medians(tmp_path: Path) -> None:
    def result(variant: str, add_batch_ms: int, events: str = "clean") -> dict:
        return {"variant": variant, "events": events, "add_batch_ms": add_batch_ms, "rows": 100_000, "batches": 4}

    records.record_run("dead-letters", "python -m benchmarks.dead_letters", [], {
        "date": "2026-11-28T03:00:00+00:00", "load_avg": [1.0, 0, 0]}, directory=tmp_path, dead_letters=[
        result("plain", 2000), result("dead-letters", 900),  # a session's first runs: the JVM warms up
        result("plain", 300), result("dead-letters", 360), result("plain", 340), result("dead-letters", 380),
        result("dead-letters", 9000, "poison")])

    lines = records.render("dead-letters", tmp_path).splitlines()

    assert lines[2] == "| every row parses | 25,000 | 320 ms | 370 ms | +50 ms (+16%) |"
    assert lines[3] == "| one poison row a batch | 25,000 | - | 9,000 ms | - |"


def test_a_table_may_join_the_runs_of_several_records(tmp_path: Path) -> None:
    quarter = {"batches": 200, "batch_ms_p50": 600.0, "batch_ms_p99": 4000.0, "peak_rss_mib": {}}
    for engine in ("delta-rs", "delta-spark"):
        report = {"seconds": 1200.0, "rate": 2000.0, "kills": 3, "broker_pause_s": 20.0, "exactly_once": True,
                  "duplicates": 0, "gaps": 0, "beyond_leader": 0, "rows": 2_400_000, "live_files": 34,
                  "versions": 673, "maintenance_passes": 27, "first": quarter, "last": quarter, "engine": engine,
                  "object_store": False}
        records.record_run(f"soak-{engine}", "python -m benchmarks.soak", ["--engine", engine],
                           {"date": "2026-11-28T03:00:00+00:00", "load_avg": [6.0, 0, 0]},
                           directory=tmp_path, soak=report)

    lines = records.render("soak-soak-delta-rs+soak-delta-spark", tmp_path).splitlines()

    assert lines[0].startswith("| | delta-rs (load 6.0-") and "| delta-spark (load 6.0-" in lines[0]
    assert lines[-3].startswith("`python -m benchmarks.soak --engine delta-rs`: recorded once")
    assert lines[-1].startswith("`python -m benchmarks.soak --engine delta-spark`: recorded once")
