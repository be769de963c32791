"""Smoke run of the benchmark job with tiny sizes: it completes and writes sane JSON (no timing asserts)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import benchmark
from tests import mock_cluster

CONTENDERS = {"kafka-python (1 process)", "librdkafka (1 process)", "Spark Kafka source -> delta-rs",
              "forwarder -> delta-rs"}


@mock_cluster.NO_CREATE_TOPICS  # the benchmark creates its topics with Kafka's admin API
def test_tiny_benchmark_run_writes_sane_results(spark, bootstrap_servers: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    output = tmp_path / "benchmark-results.json"
    assert benchmark.main([
        "run", "--bootstrap", bootstrap_servers, "--runs", "1", "--partitions", "2", "--messages", "300",
        "--engines", "delta-rs", "--memory-messages", "100", "--memory-scale", "2", "--latency-steps", "2",
        "--latency-interval", "0.3", "--latency-rate", "200", "--floor-steps", "2", "--floor-triggers", "leader,250ms",
        "--floor-interval", "0.3", "--spark-floor-seconds", "15", "--no-warmup-run",
        "--workdir", str(tmp_path / "work"), "--output", str(output),
    ]) == 0
    results = json.loads(output.read_text())

    timed_rows = 2 * 300 - 2 * int(300 * 0.2)
    assert "warmup_run" not in results
    run = results["runs"][0]
    forwarder = run["forwarder"]
    assert forwarder == run["forwarders"]["delta-rs"]
    assert forwarder["rows"] == timed_rows
    assert run["reference_msgs_per_s"] > 0 and forwarder["rows_per_s"] > 0 and forwarder["batches"] >= 1
    assert abs(run["ratio"] - forwarder["rows_per_s"] / run["reference_msgs_per_s"]) < 1e-9
    assert abs(run["ratio_librdkafka"] - forwarder["rows_per_s"] / run["librdkafka_msgs_per_s"]) < 1e-9
    assert forwarder["memory_mib"]["jvm"] > 0 and forwarder["memory_mib"]["total"] >= forwarder["memory_mib"]["jvm"]
    peer = run["spark_kafka"]["delta-rs"]
    assert peer["rows"] == timed_rows and peer["rows_per_s"] > 0 and peer["cpu_s"]["jvm"] >= 0
    assert len(run["load_avg"]) == 3

    latency = run["latency"]
    assert latency["steps"] == 2 and len(latency["samples_s"]) == 2
    assert 0 < latency["p50_s"] <= latency["p99_s"] <= latency["max_s"]
    assert list(run["latencies"]) == [results["settings"]["trigger"]] == ["leader"]  # the job's default
    # per engine too (one here), the first engine's also under the keys of a single-engine run
    assert run["engines"] == {"delta-rs": {"latencies": run["latencies"]}}
    assert results["median"]["engines"] == {"delta-rs": {"latency": results["median"]["latency"]}}
    assert results["engines"] == {"delta-rs": {"floor": results["floor"]}}

    assert list(results["floor"]) == ["leader", "250ms"]
    for floor in results["floor"].values():
        assert floor["steps"] == 2 and len(floor["latency"]["samples_s"]) == 2
        assert floor["step_batches"] >= 1 and sum(floor["step_rows"]) == 2 and "addBatch" in floor["step_ms"]
        assert floor["one_row_batches"] <= floor["step_batches"] and floor["idle_triggers"] >= 0
    peer_floor = results["floor_spark_kafka"]["0ms"]  # Spark's Kafka source at its best trigger
    assert len(peer_floor["latency"]["samples_s"]) == 2 and sum(peer_floor["step_rows"]) == 2
    assert results["floor_spark"]["triggerExecution"] > 0  # Spark's own floor, the reference row

    memory = results["memory"]
    assert memory["rows"] == {"N": 2 * 100 - 2 * int(100 * 0.2), "2N": 2 * 200 - 2 * int(200 * 0.2)}
    assert set(memory["ratio"]) >= {"jvm", "total"}

    table = results["median"]["table"]
    assert set(table) == CONTENDERS
    assert table["forwarder -> delta-rs"]["forwarder delta-rs x"] == 1.0
    assert abs(table["Spark Kafka source -> delta-rs"]["forwarder delta-rs x"]
               - forwarder["rows_per_s"] / peer["rows_per_s"]) < 1e-9
    assert table["forwarder -> delta-rs"]["cpu_us_per_row"]["total"] > 0
    assert results["median"]["ratio"] == run["ratio"]
    assert set(results["targets"]) == {
        "ratio >= 1.5", "ratio to librdkafka >= 1.0", "forwarder delta-rs >= 1.2x Spark's Kafka source -> delta-rs",
        "latency p50 <= 0.25s", "latency p99 <= 0.45s", "one-row latency p50 <= 0.25s", "one-row latency p99 <= 0.40s",
        "peak memory at the larger backlog <= 1.2x N (total)"}
    assert results["environment"]["cpus"] >= 1 and results["broker"] == bootstrap_servers
