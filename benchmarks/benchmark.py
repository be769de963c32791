"""The benchmark job: forwarder throughput against raw kafka-python and librdkafka consumers,
gate latency and peak memory, in one run on the embedded broker or on a given cluster.

After one untimed forwarder pass over the backlog (JIT compilation, Python workers), per run
(`--runs K`, medians reported), on one backlog of `--messages` records per partition:

1. references, each reading the whole backlog in this process: one kafka-python consumer
   (the read path's client settings, crc32c when installed), then one librdkafka consumer
   (confluent-kafka, batch `consume`, CRCs checked as the forwarder does, no fetch back-off): msg/s;
2. forwarder: the leader's commit log first releases a warm-up slice, then the whole
   backlog; rows/s from the start of the first batch after the warm-up to the Delta commit
   that holds the last row, and the ratio to each reference; peak RSS of the process tree meanwhile;
3. gate latency: a producer keeps writing while the leader commits in steps at random
   intervals; per step, from the commit-log message being acknowledged to a Delta commit
   holding its offsets appearing in the table's log (polled every 10 ms).

Then once, the forwarder phase on a backlog of `--memory-messages` per partition (N) and on
one `--memory-scale` times larger: peak RSS per process role at 10N against N. CPU seconds
per role (JVM, Python workers, driver-side Python, broker) are recorded with each phase.
The forwarder is the job's own (`synclib.app.job.Forwarder`) with the given config (default
conf/local.yaml), trigger and batch sizing included.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import platform
import statistics
import sys
import tempfile
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from typing import Any

from benchmarks.cluster import Cluster
from benchmarks.phases import Bench, Settings
from benchmarks.procmem import TreeMemory
from benchmarks.references import librdkafka_rate, reference_rate
from synclib.kafka import client_config as kafkaconf
from synclib.settings import load_config

DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf", "local.yaml")
DEFAULT_OUTPUT = "benchmark-results.json"


def parse_args(argv: Sequence[str], default_config: str = DEFAULT_CONFIG) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="benchmark.py", description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=default_config, help="forwarder YAML (default: %(default)s)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a forwarder config key, e.g. --set trigger.processing_time=500ms")
    parser.add_argument("--bootstrap", help="benchmark this cluster instead of the config's "
                        "(default: the config's; 'embedded' starts a local broker)")
    parser.add_argument("--runs", type=int, default=3, help="runs of phases 1-3; medians reported")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--messages", type=int, default=250_000, help="backlog N per partition")
    parser.add_argument("--value-bytes", type=int, default=200)
    parser.add_argument("--warmup", type=float, default=0.2,
                        help="fraction of N released first, untimed (JVM JIT and Python workers warm up)")
    parser.add_argument("--no-warmup-run", dest="warmup_run", action="store_false",
                        help="skip the untimed forwarder pass over the backlog that warms up the JVM first")
    parser.add_argument("--memory-messages", type=int, default=50_000, help="memory phase N per partition")
    parser.add_argument("--memory-scale", type=int, default=10, help="memory phase: N, then this times N (0: skip)")
    parser.add_argument("--latency-steps", type=int, default=20, help="leader commit steps per run (0: skip)")
    parser.add_argument("--latency-interval", type=float, default=1.0, help="mean seconds between steps")
    parser.add_argument("--latency-rate", type=float, default=5000.0, help="events/s during the latency phase")
    parser.add_argument("--output", default=DEFAULT_OUTPUT, help="JSON results (default: %(default)s)")
    parser.add_argument("--workdir", help="where tables and checkpoints go (default: a temporary directory)")
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument("--growth", action="store_true", help="run only the table growth phase instead "
                        "(benchmarks/growth.py: batch commit and read time at 100 vs 20,000 versions)")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.partitions < 1 or args.messages < 10 or not 0 < args.warmup < 1:
        parser.error("need --runs >= 1, --partitions >= 1, --messages >= 10 and 0 < --warmup < 1")
    return args


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


# --- running and reporting -----------------------------------------------------------------

def _environment(spark: Any) -> dict[str, Any]:
    import kafka.record.util
    import pyspark

    conf = spark.sparkContext.getConf()
    with open("/proc/meminfo") as meminfo:
        total_kib = int(meminfo.readline().split()[1])
    return {
        "cpus": os.cpu_count(), "memory_gib": round(total_kib / 2**20, 1), "load_avg": os.getloadavg(),
        "python": platform.python_version(), "pyspark": pyspark.__version__,
        "kafka_python": __import__("kafka").__version__,
        "kafka_crc32c_native": kafka.record.util.crc32c_c is not None,
        "spark_master": conf.get("spark.master"), "driver_memory": conf.get("spark.driver.memory", "1g"),
        "default_parallelism": spark.sparkContext.defaultParallelism,
    }


def run(spark: Any, args: argparse.Namespace) -> dict[str, Any]:
    settings = Settings(args.partitions, args.messages, args.value_bytes, args.warmup, args.memory_messages,
                        args.memory_scale,
                        args.latency_steps, args.latency_interval, args.latency_rate, args.runs)
    overrides = list(args.overrides) + ([f"kafka.bootstrap_servers={args.bootstrap}"] if args.bootstrap else [])
    base = load_config(args.config, [*overrides, "embedded=null"] if args.bootstrap
                       and args.bootstrap != "embedded" else overrides)
    jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    results: dict[str, Any] = {"settings": dataclasses.asdict(settings), "config": args.config,
                               "overrides": list(args.overrides), "environment": _environment(spark)}
    with ExitStack() as stack:
        bootstrap, broker_pid = base.kafka.bootstrap_servers, None
        if base.kafka.embedded:
            from synclib.embedded.broker import EmbeddedBroker

            broker = stack.enter_context(EmbeddedBroker())
            bootstrap, broker_pid = broker.bootstrap_servers, broker.pid
        results["broker"] = "embedded" if base.kafka.embedded else bootstrap
        workdir = args.workdir or stack.enter_context(tempfile.TemporaryDirectory(prefix="synclib-bench-"))
        client_config = kafkaconf.kafka_client_config(
            {**base.kafka.client_options(), "kafka.bootstrap.servers": bootstrap})
        cluster = Cluster(client_config, settings.partitions)
        stack.callback(cluster.close)
        bench = Bench(settings, args.config, overrides, bootstrap, cluster, workdir, jvm_pid, broker_pid)
        topic, ends = cluster.backlog("backlog", settings.messages, settings.value_bytes)
        if args.warmup_run:  # JIT compilation and Python worker start-up, before anything is timed
            results["warmup_run"] = bench.throughput(topic, ends, "warmup")
        runs = []
        for index in range(settings.runs):
            with TreeMemory(jvm_pid, bench.others) as usage:
                reference = reference_rate(client_config, topic, ends)
            with TreeMemory(jvm_pid, bench.others) as librdkafka_usage:
                librdkafka = librdkafka_rate(client_config, topic, ends)
            forwarder = bench.throughput(topic, ends, f"run{index}")
            latency = bench.latency(f"run{index}") if settings.latency_steps else None
            runs.append({"reference_msgs_per_s": reference, "reference_cpu_s": usage.cpu_seconds_by_role(),
                         "librdkafka_msgs_per_s": librdkafka,
                         "librdkafka_cpu_s": librdkafka_usage.cpu_seconds_by_role(),
                         "forwarder": forwarder, "ratio": forwarder["rows_per_s"] / reference,
                         "ratio_librdkafka": forwarder["rows_per_s"] / librdkafka, "latency": latency})
            _print_run(index + 1, runs[-1])
        results["runs"] = runs
        results["median"] = _medians(runs)
        if settings.memory_scale:
            phases = {}
            for label, scale in (("N", 1), (f"{settings.memory_scale}N", settings.memory_scale)):
                memory_topic, memory_ends = cluster.backlog(f"memory-{label}", settings.memory_messages * scale,
                                                            settings.value_bytes)
                phases[label] = bench.throughput(memory_topic, memory_ends, f"memory-{label}")
            results["memory"] = _memory(phases)
    results["environment"]["load_avg_end"] = os.getloadavg()
    results["targets"] = _targets(results)
    return results


def _medians(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    latencies = [r["latency"] for r in runs if r["latency"]]
    return {
        "reference_msgs_per_s": _median([r["reference_msgs_per_s"] for r in runs]),
        "librdkafka_msgs_per_s": _median([r["librdkafka_msgs_per_s"] for r in runs]),
        "forwarder_rows_per_s": _median([r["forwarder"]["rows_per_s"] for r in runs]),
        "ratio": _median([r["ratio"] for r in runs]),
        "ratio_librdkafka": _median([r["ratio_librdkafka"] for r in runs]),
        "latency_p50_s": _median([x["p50_s"] for x in latencies]),
        "latency_p99_s": _median([x["p99_s"] for x in latencies]),
        "latency_max_s": max((x["max_s"] for x in latencies), default=None),
    }


def _memory(phases: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Peak RSS per role at N and at the larger backlog, and their ratio."""
    (_, at_n), (_, at_large) = phases.items()
    return {
        "rows": {label: phase["rows"] for label, phase in phases.items()},
        "rows_per_s": {label: phase["rows_per_s"] for label, phase in phases.items()},
        "peak_mib": {label: phase["memory_mib"] for label, phase in phases.items()},
        "ratio": {role: round(at_large["memory_mib"][role] / mib, 3)
                  for role, mib in at_n["memory_mib"].items() if mib and role in at_large["memory_mib"]},
    }


def _targets(results: Mapping[str, Any]) -> dict[str, bool | None]:
    median = results["median"]
    memory = results.get("memory")
    p50, p99 = median["latency_p50_s"], median["latency_p99_s"]
    return {
        "ratio >= 1.5": median["ratio"] >= 1.5,
        "ratio to librdkafka >= 1.0": median["ratio_librdkafka"] >= 1.0,
        "latency p50 <= 1s": None if p50 is None else p50 <= 1.0,
        "latency p99 <= 3s": None if p99 is None else p99 <= 3.0,
        "peak memory at the larger backlog <= 1.2x N (total)":
            None if memory is None else memory["ratio"].get("total", 0) <= 1.2,
    }


def _print_run(number: int, run: Mapping[str, Any]) -> None:
    forwarder, latency = run["forwarder"], run["latency"]
    lat = "-" if latency is None else f"{latency['p50_s']:.2f}/{latency['p99_s']:.2f}/{latency['max_s']:.2f}"
    mem = forwarder["memory_mib"]
    print(f"{number:>6} {run['reference_msgs_per_s']:>13,.0f} {run['librdkafka_msgs_per_s']:>12,.0f} "
          f"{forwarder['rows_per_s']:>12,.0f} {run['ratio']:>10.2f} {run['ratio_librdkafka']:>10.2f} "
          f"{forwarder['batches']:>7} {lat:>16} {mem.get('total', 0):>10,.0f}", flush=True)


def print_report(results: Mapping[str, Any]) -> None:
    median, env = results["median"], results["environment"]
    lat = "-" if median["latency_p50_s"] is None else (
        f"{median['latency_p50_s']:.2f}/{median['latency_p99_s']:.2f}/{median['latency_max_s']:.2f}")
    print(f"{'median':>6} {median['reference_msgs_per_s']:>13,.0f} {median['librdkafka_msgs_per_s']:>12,.0f} "
          f"{median['forwarder_rows_per_s']:>12,.0f} {median['ratio']:>10.2f} {median['ratio_librdkafka']:>10.2f} "
          f"{'':>7} {lat:>16}")
    memory = results.get("memory")
    if memory:
        for label, peaks in memory["peak_mib"].items():
            print(f"peak RSS MiB at {label:>4} ({memory['rows'][label]:,} rows, "
                  f"{memory['rows_per_s'][label]:,.0f} rows/s): "
                  + ", ".join(f"{k} {v:,.0f}" for k, v in peaks.items()))
        print("ratio: " + ", ".join(f"{k} {v:.2f}" for k, v in memory["ratio"].items()))
    print("targets: " + ", ".join(f"{k}: {'-' if v is None else 'met' if v else 'NOT met'}"
                                  for k, v in results["targets"].items()))
    print(f"machine: {env['cpus']} cpus, {env['memory_gib']} GiB, master {env['spark_master']}, "
          f"load {env['load_avg'][0]:.2f} -> {env['load_avg_end'][0]:.2f}, crc32c native: {env['kafka_crc32c_native']}")


def main(argv: Sequence[str] | None = None, default_config: str = DEFAULT_CONFIG) -> int:
    """Run the benchmark; `default_config` is the forwarder YAML used without --config (the job
    passes the repository's conf/local.yaml: spark-submit may import synclib from a zip)."""
    args = parse_args(sys.argv[1:] if argv is None else argv, default_config)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(max(logging.ERROR, logging.getLevelName(args.log_level)))
    if args.growth:
        from benchmarks import growth

        return growth.main(["--workdir", args.workdir] if args.workdir else [])
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("synclib-benchmark")
    from pyspark import SparkConf

    if not SparkConf().contains("spark.master"):
        builder = builder.master("local[2]")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    print(f"{'run':>6} {'kafka-python/s':>13} {'librdkafka/s':>12} {'forwarder/s':>12} {'x kafka-py':>10} "
          f"{'x rdkafka':>10} {'batches':>7} {'lat p50/p99/max':>16} {'peak MiB':>10}", flush=True)
    results = run(spark, args)
    print_report(results)
    output = os.path.abspath(args.output)
    with open(output, "w") as out:
        json.dump(results, out, indent=2)
    print(f"results: {output}")
    return 0
