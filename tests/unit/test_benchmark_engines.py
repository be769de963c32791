"""The benchmark's latency and floor phases per engine (benchmarks/trigger_phases.py): run for every
engine of `--engines`, kept per engine beside the first engine's single-engine keys, and printed and
rendered a line or row per engine; a record of one engine, and one made before, render as before."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks import records, report, trigger_phases

ENGINES = ["delta-rs", "delta-spark"]


def latency(p50: float) -> dict[str, Any]:
    return {"steps": 2, "p50_s": p50, "p99_s": 2 * p50, "max_s": 3 * p50, "samples_s": [p50, 2 * p50],
            "batch_ms": {"addBatch": 100}, "cpu_s_per_s": {"jvm": 0.1, "python-worker": 0.05, "driver": 0.5}}


def floor(p50: float) -> dict[str, Any]:
    return {"steps": 2, "latency": {"p50_s": p50, "p99_s": 2 * p50, "max_s": 2 * p50},
            "one_row_ms": {"triggerExecution": 1000 * p50 + 50, "latestOffset": 50},
            "idle_cpu_s_per_s": {"jvm": 0.01, "driver": 0.02}, "step_rows": [1, 1], "step_ms": {}, "idle_ms": {}}


def run(engines: list[str], load: float = 1.0) -> dict[str, Any]:
    """One run as benchmark.run keeps it: gate latency at leader and 400ms per engine (the second 0.1 s slower)."""
    per_engine = {engine: {"leader": latency(0.3 + 0.1 * index), "400ms": latency(0.5 + 0.1 * index)}
                  for index, engine in enumerate(engines)}
    forwarders = {engine: {"rows": 1000, "rows_per_s": 5000.0, "cpu_s": {"jvm": 0.1}} for engine in engines}
    return {"load_avg": [load, 0, 0], "backlog_rows": 1000, "reference_msgs_per_s": 2000.0,
            "reference_cpu_s": {"driver": 0.5}, "librdkafka_msgs_per_s": 4000.0, "librdkafka_cpu_s": {"driver": 0.2},
            "forwarder": forwarders[engines[0]], "forwarders": forwarders, "spark_kafka": {},
            "ratio": 2.5, "ratio_librdkafka": 1.25, "latency": per_engine[engines[0]]["leader"],
            **trigger_phases.keyed(per_engine, "latencies", engines[0])}


def results(engines: list[str]) -> dict[str, Any]:
    """benchmark.run's results of two runs, the floor at leader per engine."""
    runs = [run(engines, 1.0), run(engines, 2.0)]
    floors = {engine: {"leader": floor(0.25 + 0.1 * index)} for index, engine in enumerate(engines)}
    found = {"settings": {"engines": engines, "trigger": "leader"}, "runs": runs, "median": report.medians(runs),
             **trigger_phases.keyed(floors, "floor", engines[0]), "floor_spark_kafka": {},
             "environment": {"date": "2026-12-01T03:00:00+00:00", "load_avg": [1.0, 0, 0], "load_avg_end": [2.0, 0, 0],
                             "cpus": 2, "memory_gib": 23.5, "python": "3.11.7", "pyspark": "4.2.0",
                             "spark_master": "local[2]", "kafka_crc32c_native": True},
             "broker": "embedded"}
    return {**found, "targets": report.targets(found)}


def test_each_engine_runs_each_trigger_into_its_own_sink(monkeypatch: pytest.MonkeyPatch) -> None:
    class Bench:
        def latency(self, name: str, extra: list[str]) -> dict[str, Any]:
            return {"name": name, "extra": extra}

    called: list[tuple[str, list[str], int]] = []
    monkeypatch.setattr(trigger_phases.floor, "floor", lambda bench, name, extra, steps, interval_s: (
        called.append((name, extra, steps)) or {"name": name}))

    def attempt(what: str, measure: Any) -> dict[str, Any]:
        return {"what": what, **measure()}

    found = trigger_phases.latencies(Bench(), ENGINES, ["leader", "400ms"], "run0", attempt)  # type: ignore[arg-type]
    floors = list(trigger_phases.floors(Bench(), ENGINES, ["leader"], 3, 0.5, attempt))  # type: ignore[arg-type]

    assert found["delta-spark"]["400ms"] == {
        "what": "latency delta-spark at 400ms", "name": "run0-lat-delta-spark-400ms",
        "extra": ["sink.engine=delta-spark", "trigger.mode=processing_time", "trigger.processing_time=400ms"]}
    assert found["delta-rs"]["leader"]["extra"] == ["sink.engine=delta-rs", "trigger.mode=leader"]
    assert [(engine, trigger) for engine, trigger, _ in floors] == [("delta-rs", "leader"), ("delta-spark", "leader")]
    assert called == [("floor-delta-rs-leader", ["sink.engine=delta-rs", "trigger.mode=leader"], 3),
                      ("floor-delta-spark-leader", ["sink.engine=delta-spark", "trigger.mode=leader"], 3)]


def test_two_engines_are_kept_per_engine_and_the_first_one_as_a_single_engine_run_had_it() -> None:
    found = results(ENGINES)
    median = found["median"]

    assert median["latency"] == median["engines"]["delta-rs"]["latency"]
    assert median["engines"]["delta-spark"]["latency"]["leader"]["p50_s"] == pytest.approx(0.4)
    assert median["latency"]["leader"]["query_cpu_s_per_s"] == pytest.approx(0.15)  # not the driver's
    assert found["floor"] == found["engines"]["delta-rs"]["floor"]
    assert report.by_engine(found, "floor")["delta-spark"]["leader"]["latency"]["p50_s"] == pytest.approx(0.35)
    # the targets stay the first engine's
    assert found["targets"]["latency p50 <= 0.25s"] is False and found["targets"]["one-row latency p50 <= 0.25s"]
    # a run of one engine, or one made before: its own keys are the first engine's
    old = {"latencies": {"leader": latency(0.3)}}
    assert report.by_engine(old, "latencies", "delta-rs") == {"delta-rs": old["latencies"]}
    assert report.by_engine({"latencies": {}}, "latencies") == {}


def test_the_console_report_has_a_latency_and_a_floor_line_per_engine(capsys: pytest.CaptureFixture[str]) -> None:
    found = results(ENGINES)
    report.print_run(1, found["runs"][0])
    report.print_report(found)
    printed = [line.strip() for line in capsys.readouterr().out.splitlines()]

    gate = [line.split(":")[0] for line in printed if line.startswith("gate latency")]
    at = ["into delta-rs at trigger leader", "into delta-spark at trigger leader",
          "into delta-rs at trigger 400ms", "into delta-spark at trigger 400ms"]
    assert gate == [f"gate latency {where}" for where in at] + [f"gate latency {where} (medians)" for where in at]
    assert [line.split(":")[0] for line in printed if line.startswith("batch floor")] == [
        "batch floor into delta-rs at trigger leader", "batch floor into delta-spark at trigger leader"]


def test_one_engine_prints_as_before(capsys: pytest.CaptureFixture[str]) -> None:
    found = results(["delta-rs"])
    report.print_report(found)
    printed = capsys.readouterr().out.splitlines()

    assert "gate latency at trigger leader (medians): p50 0.30 / p99 0.60 / max 0.90 s; the query's CPU 0.150 s/s" \
        in printed
    assert [line.split(":")[0] for line in printed if line.startswith("batch floor")] == [
        "batch floor at trigger leader"]


def test_a_record_of_two_engines_renders_a_row_per_engine_and_trigger(tmp_path: Path) -> None:
    summary = records.summarize(results(ENGINES))
    assert summary["triggers"] == summary["engines"]["delta-rs"]["triggers"]  # the first engine's, as before
    records.record("both", "./spark-submit.sh jobs/benchmark.py run", summary, tmp_path)

    lines = records.render("triggers-both", tmp_path).splitlines()

    assert lines[:6] == [
        "| trigger | gate latency p50 / p99 | one-row latency p50 / p99 | one-row batch | idle CPU |",
        "|---|---|---|---|---|",
        "| `leader` (the default), delta-rs | 0.30 / 0.60 s | 0.250 / 0.500 s | 250 ms | 0.030 s/s |",
        "| `leader` (the default), delta-spark | 0.40 / 0.80 s | 0.350 / 0.700 s | 350 ms | 0.030 s/s |",
        "| `processing_time` 400ms, delta-rs | 0.50 / 1.00 s | - / - s | - | - |",
        "| `processing_time` 400ms, delta-spark | 0.60 / 1.20 s | - / - s | - | - |"]


def test_a_record_of_one_engine_keeps_its_shape_and_renders_as_before(tmp_path: Path) -> None:
    summary = records.summarize(results(["delta-rs"]))
    assert "engines" not in summary and set(summary["triggers"]) == {"leader", "400ms"}
    records.record("one", "./spark-submit.sh jobs/benchmark.py run", summary, tmp_path)

    lines = records.render("triggers-one", tmp_path).splitlines()

    assert lines[2] == "| `leader` (the default) | 0.30 / 0.60 s | 0.250 / 0.500 s | 250 ms | 0.030 s/s |"
    assert lines[3] == "| `processing_time` 400ms | 0.50 / 1.00 s | - / - s | - | - |"


def test_an_old_record_counts_for_the_first_engine_beside_a_newer_run_of_two(tmp_path: Path) -> None:
    command = "./spark-submit.sh jobs/benchmark.py run"
    for _ in range(2):  # two runs of one engine, in the shape records had before the phases ran per engine
        records.record("triggers", command, records.summarize(results(["delta-rs"])), tmp_path)
    old = json.loads((tmp_path / "triggers.json").read_text())
    assert all("engines" not in one for one in old["runs"])

    records.record("triggers", command, records.summarize(results(ENGINES)), tmp_path)
    lines = records.render("triggers", tmp_path).splitlines()

    assert lines[2] == "| `leader` (the default), delta-rs | 0.30 / 0.60 s | 0.250 / 0.500 s | 250 ms | 0.030 s/s |"
    assert lines[3] == "| `leader` (the default), delta-spark | 0.40 / 0.80 s | 0.350 / 0.700 s | 350 ms | 0.030 s/s |"
    assert lines[-1].startswith(f"`{command}`: medians of 3 recorded runs")
