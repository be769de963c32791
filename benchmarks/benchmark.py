"""The benchmark job: the forwarder against Spark's own Kafka source into Delta and raw
kafka-python and librdkafka consumers, gate latency, the micro-batch floor and peak memory, in
one run on the embedded broker, on Apache Kafka or on a given cluster.

    spark-submit jobs/benchmark.py [run] [options]          the benchmark below (no subcommand: run)
    spark-submit jobs/benchmark.py object-store [options]   the object-store phase alone
    spark-submit jobs/benchmark.py growth [options]         table growth alone (no Spark)

`run`: after one untimed pass of each Spark contender over the backlog (JIT compilation, Python
workers), per run (`--runs K`, medians reported, the load average printed with each run), on
one backlog of `--messages` records per partition:

1. references, each reading the whole backlog in this process: one kafka-python consumer
   (the read path's client settings, crc32c when installed), then one librdkafka consumer
   (confluent-kafka, batch `consume`, CRCs checked as the forwarder does, no fetch back-off): msg/s;
2. per engine of `--engines` (delta-rs, delta-spark): Spark's own Kafka source (ungated,
   benchmarks/peers.py) writing the forwarder's table shape into Delta with that engine, then
   the forwarder with `sink.engine` set to it: the leader's commit log first releases a
   warm-up slice, then the whole backlog; rows/s from the start of the first batch after the
   warm-up to the Delta commit that holds the last row, CPU seconds per process role;
3. gate latency, per trigger of `--latency-triggers` (default: the config's) and per engine of
   `--engines`: a producer keeps writing while the leader commits in steps at random intervals;
   per step, from the commit-log message being acknowledged to a Delta commit holding its
   offsets appearing in the table's log (polled every 10 ms).

Then once: the micro-batch floor per trigger of `--floor-triggers` and per engine
(benchmarks/floor.py: one-row batches and idle triggers, Spark's `durationMs`), and, with the
first engine only, the forwarder phase on a backlog of `--memory-messages` per partition (N) and
on one `--memory-scale` times larger: peak RSS per process role at 10N against N. Latency and
floor figures are kept per engine and, as before, the first engine's alone (that shape:
benchmarks/trigger_phases.py); the targets and the partitions axis read the first engine's. The
forwarder is the job's own (`synclib.app.forwarder.Forwarder`) with the given config (default
conf/local.yaml), trigger and batch sizing included.

With several `--partitions` (e.g. 4,64,256,1024) the whole benchmark runs once per partition
count, with the same total backlog (`--messages` per partition at the first count) and the same
event rate spread over all partitions (the warm-up pass at the first count only), and ends with
one table of how each figure grows with partitions beside Spark's own Kafka source
(`report.print_axis`).

Spark runs in local[2], in the master spark-submit names, or with `--standalone-workers K` on a
Spark standalone cluster the benchmark starts and stops itself (harness/standalone.py: a
master and K one-core workers on localhost, from PySpark's own jars); CPU and memory then count
the executors and their Python workers too, and the phases' tables and checkpoints live on an
S3 server (S3Proxy, harness/object_store.py) as a cluster without a shared disk needs.

`object-store` runs only the object-store phase (benchmarks/object_store_cost.py): S3 requests
per one-row batch, idle second and maintenance pass, the floor on S3 beside local disk, and the
cost per day. `growth` runs benchmarks/growth.py with its own options.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import signal
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from benchmarks import floor, object_store_cost, records, report, spark_floor, trigger_phases
from benchmarks.cluster import Cluster
from benchmarks.peers import SparkKafkaPeer
from benchmarks.phases import Bench, Settings
from benchmarks.references import librdkafka_rate, reference_rate
from benchmarks.trigger_phases import config_trigger, trigger_label
from harness.delay_proxy import DelayProxyProcess
from harness.object_store import S3Server
from synclib.logs import configure_logging
from synclib.settings import ConfigError, load_config
from synclib.settings.kafka import kafka_client_config
from synclib.settings.values import DELTA_RS, DELTA_SPARK

LOCAL_BROKERS = ("embedded", "apache-kafka", "apache-kafka-3.9")

DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf", "local.yaml")
DEFAULT_OUTPUT = "benchmark-results.json"
SPARK_BEST = "0ms"  # Spark's best trigger for latency: a processing-time trigger of 0


RUN, OBJECT_STORE, GROWTH = "run", "object-store", "growth"  # the subcommands; none given: run
DEFAULTS = Settings()


def _common() -> argparse.ArgumentParser:
    """The options of every Spark subcommand: the config, the broker, the engines, where results go, the cluster."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", help="forwarder YAML (default: conf/local.yaml)")
    common.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a forwarder config key, e.g. --set trigger.min_interval=500ms")
    common.add_argument("--bootstrap", help="benchmark this cluster instead of the config's (default: the "
                        "config's; 'embedded' starts the embedded broker, 'apache-kafka' a one-node Apache "
                        "Kafka 4 and 'apache-kafka-3.9' a Kafka 3.9, both from jvm/ivy.xml)")
    common.add_argument("--engines", default="delta-rs,delta-spark",
                        help="Delta engines, comma-separated; with run, of the forwarder and of Spark's Kafka "
                        "source, the forwarder's each also in the latency and floor phases and the first one in "
                        "the memory phase (default: %(default)s)")
    common.add_argument("--floor-steps", type=int, default=12,
                        help="one-row batches per trigger in the floor phase (0: skip)")
    common.add_argument("--floor-interval", type=float, default=1.0, help="mean seconds between one-row commits")
    common.add_argument("--standalone-workers", type=int, default=0, metavar="K",
                        help="start a Spark standalone cluster from PySpark's jars (a master and K workers on "
                        "localhost, harness/standalone.py) and run the Spark work in its executors instead "
                        "of local[2]; CPU and memory then include the executors (default: 0, no cluster)")
    common.add_argument("--standalone-cores", type=int, default=1, help="cores per worker (default: %(default)s)")
    common.add_argument("--standalone-memory", default="1g",
                        help="memory per worker, all of it its executor's heap (default: %(default)s)")
    common.add_argument("--output", default=DEFAULT_OUTPUT, help="JSON results (default: %(default)s)")
    common.add_argument("--record", metavar="NAME", help="add the run's figures (run: throughput, memory, latency and "
                        "floor, or the partitions axis; object-store: request counts) to benchmarks/results/NAME.json, "
                        "which the docs' tables are rendered from (benchmarks/records.py)")
    common.add_argument("--workdir", help="where tables and checkpoints go (default: a temporary directory)")
    common.add_argument("--log-level", default="WARNING")
    return common


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="benchmark.py", description=__doc__.splitlines()[0],
                                     epilog=f"without a subcommand: {RUN}")
    modes = parser.add_subparsers(dest="command", required=True, metavar="{run,object-store,growth}")
    common = _common()
    run = modes.add_parser(RUN, parents=[common], help="the benchmark: throughput, gate latency, floor, memory")
    run.add_argument("--no-spark-kafka", dest="spark_kafka", action="store_false",
                     help="skip Spark's own Kafka source (spark-sql-kafka-0-10 on the classpath)")
    run.add_argument("--runs", type=int, default=DEFAULTS.runs, help="runs of phases 1-3; medians reported")
    run.add_argument("--partitions", default=str(DEFAULTS.partitions), help="partitions of the topics; several, "
                     "comma-separated (e.g. 4,64,256,1024): the partitions axis, the same total backlog each time")
    run.add_argument("--messages", type=int, default=DEFAULTS.messages,
                     help="backlog N per partition (with several --partitions: at the first count)")
    run.add_argument("--value-bytes", type=int, default=DEFAULTS.value_bytes)
    run.add_argument("--warmup", type=float, default=DEFAULTS.warmup,
                     help="fraction of N released first, untimed (JVM JIT and Python workers warm up)")
    run.add_argument("--no-warmup-run", dest="warmup_run", action="store_false",
                     help="skip the untimed forwarder pass over the backlog that warms up the JVM first")
    run.add_argument("--memory-messages", type=int, default=DEFAULTS.memory_messages,
                     help="memory phase N per partition")
    run.add_argument("--memory-scale", type=int, default=DEFAULTS.memory_scale,
                     help="memory phase: N, then this times N (0: skip)")
    run.add_argument("--latency-steps", type=int, default=DEFAULTS.latency_steps,
                     help="leader commit steps per run (0: skip)")
    run.add_argument("--latency-interval", type=float, default=DEFAULTS.latency_interval_s,
                     help="mean seconds between steps")
    run.add_argument("--latency-rate", type=float, default=DEFAULTS.latency_rate,
                     help="events/s during the latency phase")
    run.add_argument("--latency-triggers", default="",
                     help="comma-separated triggers of the latency phase: leader (trigger.mode leader) or an "
                     "interval (trigger.mode processing_time), e.g. leader,400ms (default: the config's)")
    run.add_argument("--floor-triggers", default="",
                     help="comma-separated triggers of the floor phase, as --latency-triggers (default: the "
                     "config's); beside them Spark's Kafka source into delta-rs at its best trigger (0)")
    run.add_argument("--spark-floor-seconds", type=float, default=30.0,
                     help="Spark's own floor (benchmarks/spark_floor.py, rate source -> Parquet at trigger 0) "
                     "this long after the floor phase (0: skip)")
    store = modes.add_parser(OBJECT_STORE, parents=[common], help="the object-store phase alone "
                             "(benchmarks/object_store_cost.py: S3 requests per one-row batch, idle second and "
                             "maintenance pass by kind and owner, the floor on S3 beside local disk, cost per day)")
    store.add_argument("--partitions", type=int, default=DEFAULTS.partitions, help="partitions of the topics")
    store.add_argument("--cost-batches", type=int, default=20,
                       help="one-row batches counted per engine (default: %(default)s)")
    store.add_argument("--cost-idle", type=float, default=10.0,
                       help="idle seconds counted per engine (default: %(default)s)")
    store.add_argument("--request-delay-ms", type=float, default=20.0,
                       help="also measure the floor with each S3 request held this long by a proxy "
                       "(harness/delay_proxy.py; a real bucket's request time; 0: not measured; "
                       "default: %(default)s)")
    growth = modes.add_parser(GROWTH, add_help=False, help="table growth alone (benchmarks/growth.py: batch "
                              "commit and read time at 100 vs 20,000 versions, no Spark); its options are "
                              "growth's own (growth --help)")
    growth.set_defaults(log_level="WARNING")
    return parser


def with_command(argv: Sequence[str]) -> list[str]:
    """`argv` naming its subcommand: `run` when it names none."""
    given = list(argv)
    return given if given[:1] and given[0] in (RUN, OBJECT_STORE, GROWTH, "-h", "--help") else [RUN, *given]


def parse_args(argv: Sequence[str], default_config: str = DEFAULT_CONFIG) -> argparse.Namespace:
    parser = _parser()
    args, rest = parser.parse_known_args(with_command(argv))
    if args.command == GROWTH:  # growth parses its own options
        args.growth_args = rest
        return args
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    args.config = args.config or default_config
    if args.standalone_workers < 0 or args.standalone_cores < 1:
        parser.error("need --standalone-workers >= 0 and --standalone-cores >= 1")
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    if not args.engines or any(e not in (DELTA_RS, DELTA_SPARK) for e in args.engines):
        parser.error(f"--engines takes {DELTA_RS} and/or {DELTA_SPARK}")
    if args.command == RUN:
        try:
            args.partition_axis = [int(p) for p in args.partitions.split(",") if p.strip()]
        except ValueError:
            parser.error(f"--partitions takes comma-separated integers, not {args.partitions!r}")
        args.partitions = args.partition_axis[0] if args.partition_axis else 0
        if (args.runs < 1 or min(args.partition_axis, default=0) < 1 or args.messages < 10
                or not 0 < args.warmup < 1):
            parser.error("need --runs >= 1, --partitions >= 1, --messages >= 10 and 0 < --warmup < 1")
        try:
            args.latency_triggers = [trigger_label(t) for t in args.latency_triggers.split(",") if t.strip()]
            args.floor_triggers = [trigger_label(t) for t in args.floor_triggers.split(",") if t.strip()]
        except ValueError as exc:
            parser.error(f"--latency-triggers and --floor-triggers take 'leader' or intervals: {exc}")
    try:  # a bad --set or config stops here, in one line, before Spark starts
        load_config(args.config, args.overrides)
    except ConfigError as exc:
        parser.error(str(exc))
    return args


# --- running and reporting -----------------------------------------------------------------

def _environment(spark: Any) -> dict[str, Any]:
    import kafka.record.util

    conf = spark.sparkContext.getConf()
    return {
        **records.environment(),
        "kafka_python": __import__("kafka").__version__,
        "kafka_crc32c_native": kafka.record.util.crc32c_c is not None,
        "spark_master": conf.get("spark.master"), "driver_memory": conf.get("spark.driver.memory", "1g"),
        "default_parallelism": spark.sparkContext.defaultParallelism,
        "executor_memory": conf.get("spark.executor.memory", None),
    }


def _broker(stack: ExitStack, kind: str) -> tuple[str, int | None]:
    """Start the broker `kind` names ('embedded', 'apache-kafka[-3.9]'): bootstrap, pid."""
    if kind == "embedded":
        from synclib.embedded.broker import EmbeddedBroker

        broker = stack.enter_context(EmbeddedBroker())
        return broker.bootstrap_servers, broker.pid
    from harness.apache_kafka import KAFKA_3_9, KAFKA_4, KafkaCluster

    kafka = stack.enter_context(KafkaCluster(1, version=KAFKA_3_9 if kind.endswith("3.9") else KAFKA_4,
                                             in_memory=True))
    process = getattr(kafka.nodes[0], "_process", None)
    return kafka.bootstrap_servers, None if process is None else process.pid


def _object_store(stack: ExitStack, spark: Any, workdir: str) -> S3Server:
    """The S3 server (S3Proxy, under `workdir`), configured for the session as the job configures
    `storage.s3`: the driver's and the executors' AWS variables, the JVM's S3A settings."""
    from synclib.app.session import use_storage
    from synclib.settings.storage import S3Config

    store = stack.enter_context(S3Server(Path(workdir) / "s3"))
    use_storage(spark, S3Config(**store.storage_settings()))
    return store


def _attempt(what: str, measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """A contender's result, or {"error"}: one failing engine does not lose the others' numbers."""
    try:
        return measure()
    except Exception as exc:  # reported in the table and the JSON
        logging.getLogger(__name__).exception("%s failed", what)
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:500]}


def run(spark: Any, args: argparse.Namespace, save: Callable[[Mapping[str, Any]], None],
        roots: Mapping[int, str] | None = None) -> dict[str, Any]:
    """The benchmark; `roots`: the standalone cluster's daemons (pid -> role), whose process
    trees (executors, their Python workers) count in CPU and memory beside the driver's."""
    engine_sets = {engine: [f"sink.engine={engine}"] for engine in args.engines}
    primary = args.engines[0]
    base_overrides = list(args.overrides)
    kind = args.bootstrap if args.bootstrap in LOCAL_BROKERS else None
    overrides = base_overrides + ([f"kafka.bootstrap_servers={args.bootstrap}"] if args.bootstrap and not kind else [])
    base = load_config(args.config, [*overrides, "embedded=null"] if args.bootstrap
                       and args.bootstrap != "embedded" and not kind else overrides)
    object_store = args.command == OBJECT_STORE
    settings = Settings(args.partitions) if object_store else Settings(
        args.partitions, args.messages, args.value_bytes, args.warmup, args.memory_messages, args.memory_scale,
        args.latency_steps, args.latency_interval, args.latency_rate, args.runs)
    trigger = config_trigger(base)
    latency_triggers = [trigger] if object_store else args.latency_triggers or [trigger]
    jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    results: dict[str, Any] = {"settings": {**dataclasses.asdict(settings), "engines": args.engines,
                                            "trigger": trigger, "latency_triggers": latency_triggers},
                               "config": args.config, "overrides": list(args.overrides),
                               "environment": _environment(spark)}
    with ExitStack() as stack:
        bootstrap, broker_pid = base.kafka.bootstrap_servers, None
        if kind or base.kafka.embedded:
            bootstrap, broker_pid = _broker(stack, kind or "embedded")
        results["broker"] = kind or ("embedded" if base.kafka.embedded else bootstrap)
        workdir = args.workdir or stack.enter_context(tempfile.TemporaryDirectory(prefix="synclib-bench-"))
        client_config = kafka_client_config(
            {**base.kafka.client_options(), "kafka.bootstrap.servers": bootstrap})
        cluster = Cluster(client_config, settings.partitions)
        stack.callback(cluster.close)
        # a cluster has no shared disk: its tables and checkpoints go to an S3 server
        store = _object_store(stack, spark, workdir) if object_store or args.standalone_workers else None
        on_s3: dict[str, Any] = {"store": store, "bucket": store.bucket("bench")} if store is not None else {}
        bench = Bench(settings, args.config, overrides, bootstrap, cluster, workdir, jvm_pid, broker_pid, roots,
                      **(on_s3 if args.standalone_workers else {}))
        if object_store:
            assert store is not None
            delayed = None
            if args.request_delay_ms > 0:
                proxy = stack.enter_context(DelayProxyProcess(store.port, args.request_delay_ms / 1000))
                view = store.behind(proxy.port)
                delayed = Bench(settings, args.config, overrides, bootstrap, cluster, workdir, jvm_pid, broker_pid,
                                roots, store=view, bucket=view.bucket("delayed"))
            results["object_store"] = object_store_cost.run(
                spark, bench, Bench(settings, args.config, overrides, bootstrap, cluster, workdir, jvm_pid,
                                    broker_pid, roots, **on_s3),
                args.engines, args.cost_batches, args.cost_idle, args.floor_steps, args.floor_interval,
                _attempt, lambda partial: save({**results, "object_store": partial}), delayed, args.request_delay_ms)
            results["environment"]["load_avg_end"] = os.getloadavg()
            return results
        peer = SparkKafkaPeer(spark, {**base.kafka.client_options(), "kafka.bootstrap.servers": bootstrap},
                              bench.root, bench.local, base.trigger.busiest_interval, base.sink.partition_by_date,
                              bench.usage)
        topic, ends = cluster.backlog("backlog", settings.messages, settings.value_bytes)
        warm = {p: max(1, int(end * settings.warmup)) for p, end in ends.items()}
        if args.warmup_run:  # JIT compilation and Python worker start-up, before anything is timed
            results["warmup_run"] = {}
            for engine, extra in engine_sets.items():
                if args.spark_kafka:
                    results["warmup_run"][f"spark-kafka {engine}"] = _attempt(
                        f"warm-up Spark Kafka {engine}",
                        lambda e=engine: peer.throughput(topic, ends, warm, e, f"warmup-spark-kafka-{e}"))
                results["warmup_run"][engine] = _attempt(
                    f"warm-up forwarder {engine}",
                    lambda e=engine, x=extra: bench.throughput(topic, ends, f"warmup-{e}", x))
        runs = []
        for index in range(settings.runs):
            load = os.getloadavg()
            with bench.usage() as usage:
                reference = reference_rate(client_config, topic, ends)
            with bench.usage() as librdkafka_usage:
                librdkafka = librdkafka_rate(client_config, topic, ends)
            spark_kafka, forwarders = {}, {}
            for engine, extra in engine_sets.items():
                if args.spark_kafka:
                    spark_kafka[engine] = _attempt(
                        f"Spark Kafka {engine}",
                        lambda e=engine, i=index: peer.throughput(topic, ends, warm, e, f"run{i}-spark-kafka-{e}"))
                forwarders[engine] = _attempt(
                    f"forwarder {engine}",
                    lambda e=engine, x=extra, i=index: bench.throughput(topic, ends, f"run{i}-{e}", x))
            latencies = trigger_phases.latencies(bench, args.engines, latency_triggers, f"run{index}",
                                                 _attempt) if settings.latency_steps else {}
            forwarder = forwarders[primary]
            rate = forwarder.get("rows_per_s")
            runs.append({"load_avg": load, "load_avg_end": os.getloadavg(),
                         "backlog_rows": sum(ends.values()),
                         "reference_msgs_per_s": reference, "reference_cpu_s": usage.cpu_seconds_by_role(),
                         "librdkafka_msgs_per_s": librdkafka,
                         "librdkafka_cpu_s": librdkafka_usage.cpu_seconds_by_role(),
                         "forwarder": forwarder, "forwarders": forwarders, "spark_kafka": spark_kafka,
                         "ratio": None if rate is None else rate / reference,
                         "ratio_librdkafka": None if rate is None else rate / librdkafka,
                         "latency": latencies.get(primary, {}).get(latency_triggers[0]),
                         **trigger_phases.keyed(latencies, "latencies", primary)})
            report.print_run(index + 1, runs[-1])
            results["runs"] = runs
            save(results)  # what was measured survives a later phase's failure
        results["median"] = report.medians(runs)
        if args.floor_steps:
            floors: dict[str, dict[str, Any]] = {engine: {} for engine in args.engines}  # filled as measured
            results.update(trigger_phases.keyed(floors, "floor", primary), floor_spark_kafka={})
            for engine, t, one in trigger_phases.floors(bench, args.engines, args.floor_triggers or [trigger],
                                                        args.floor_steps, args.floor_interval, _attempt):
                floors[engine][t] = one
                print(f"batch floor {report.at(t, engine, args.engines)}: {report.floor_line(one)}", flush=True)
                save(results)
            if args.spark_kafka:  # the same sink behind Spark's Kafka source at its best trigger
                results["floor_spark_kafka"][SPARK_BEST] = _attempt("Spark Kafka floor", lambda: floor.floor(
                    bench, "floor-spark-kafka", [], args.floor_steps, args.floor_interval,
                    peer=lambda topic, name: peer.live(topic, name, "0 milliseconds")))
                print(f"Spark's Kafka source -> delta-rs, floor at trigger {SPARK_BEST}: "
                      f"{report.floor_line(results['floor_spark_kafka'][SPARK_BEST])}", flush=True)
                save(results)
        if args.spark_floor_seconds:  # Spark alone: its rate source into its Parquet sink
            results["floor_spark"] = _attempt("Spark's own floor", lambda: spark_floor.run(
                spark, 0.0, args.spark_floor_seconds))
            print(f"Spark's own floor (rate -> Parquet at trigger {SPARK_BEST}), medians ms: "
                  + report.durations_line(results["floor_spark"]), flush=True)
        if settings.memory_scale:  # a failure (say, Spark's Python worker at a high load) loses only this phase
            memory = _attempt("memory phase", lambda: bench.memory(engine_sets[primary]))
            results["memory_error" if "error" in memory else "memory"] = memory
    results["environment"]["load_avg_end"] = os.getloadavg()
    results["targets"] = report.targets(results)
    return results


def main(argv: Sequence[str] | None = None, default_config: str = DEFAULT_CONFIG) -> int:
    """Run the benchmark; `default_config` is the forwarder YAML used without --config (the job
    passes the repository's conf/local.yaml: spark-submit may import synclib from a zip)."""
    args = parse_args(sys.argv[1:] if argv is None else argv, default_config)
    configure_logging(args.log_level, clients_at_least=logging.ERROR)
    if args.command == GROWTH:
        from benchmarks import growth

        return growth.main(args.growth_args)
    from pyspark.sql import SparkSession

    from synclib.app.session import with_session_defaults
    from synclib.compat.pyspark import submitted_conf

    builder = with_session_defaults(SparkSession.builder.appName("synclib-benchmark"))  # the job's own
    submitted = submitted_conf("spark-submit's --master")
    # spark-submit's --master, unless it is spark-submit's default (local[*]): then local[2]
    master = submitted.get("spark.master", None) if submitted is not None else None
    master_given = master not in (None, "local[*]")
    output = os.path.abspath(args.output)

    def save(results: Mapping[str, Any]) -> None:
        with open(output, "w") as out:
            json.dump(results, out, indent=2)

    with ExitStack() as stack:  # closed in reverse: the session stops before the cluster, then the workdir goes
        roots: dict[int, str] = {}
        if args.standalone_workers:
            if master_given:
                print("--standalone-workers starts its own master: drop spark-submit's --master", file=sys.stderr)
                return 2
            from harness.standalone import standalone_cluster

            signal.signal(signal.SIGTERM, _exit_on_sigterm)  # the cluster stops however the run ends
            args.workdir = args.workdir or stack.enter_context(tempfile.TemporaryDirectory(prefix="synclib-bench-"))
            standalone = stack.enter_context(standalone_cluster(
                args.standalone_workers, os.path.join(args.workdir, "standalone"), args.standalone_cores,
                args.standalone_memory))
            for key, value in standalone.session_conf().items():
                builder = builder.config(key, value)
            roots = standalone.roots()
        elif not master_given:
            builder = builder.master("local[2]")
        created = SparkSession.getActiveSession() is None
        spark = builder.getOrCreate()
        if created:  # a session the caller made (the tests' one) is the caller's to stop
            stack.callback(spark.stop)
        spark.sparkContext.setLogLevel("WARN")
        if args.command == OBJECT_STORE:
            results = run(spark, args, save, roots)
            print("\n".join(object_store_cost.table(results["object_store"])), flush=True)
        elif len(args.partition_axis) == 1:
            results = run(spark, args, save, roots)
            report.print_report(results)
        else:
            results = {"partitions_axis": {}}
            for count, one in axis_arguments(args):
                results["partitions_axis"][str(count)] = run(
                    spark, one, lambda partial, c=count: save({"partitions_axis": {
                        **results["partitions_axis"], str(c): partial}}), roots)
                report.print_report(results["partitions_axis"][str(count)])
                save(results)
            report.print_axis(results["partitions_axis"])
        save(results)
        if args.record:
            print(f"recorded in {records.record(args.record, recorded_command(argv), records.summarize(results))}")
    print(f"results: {output}")
    return 0


def recorded_command(argv: Sequence[str] | None) -> str:
    """The command as a record names it: its subcommand always, without where its outputs went."""
    return records.command("./spark-submit.sh jobs/benchmark.py", with_command(sys.argv[1:] if argv is None else argv))


def axis_arguments(args: argparse.Namespace) -> list[tuple[int, argparse.Namespace]]:
    """Per partition count of the axis, the arguments of its run: the first count's total backlog
    (and memory-phase backlog) spread over its partitions, and a work directory of its own (the
    phases' checkpoints are named alike in every count). Only the first count makes the untimed
    warm-up pass: the later counts run in the same warm JVM and Python workers, and Spark's Kafka
    source makes a task per Kafka partition, so a warm-up at 1,024 partitions took longer than
    the measured passes (it outlasted an 18-minute run)."""
    first = args.partition_axis[0]
    return [(count, argparse.Namespace(**{
        **vars(args), "partitions": count, "messages": max(10, args.messages * first // count),
        "memory_messages": max(1, args.memory_messages * first // count),
        "warmup_run": args.warmup_run and index == 0,
        "workdir": args.workdir and os.path.join(args.workdir, f"partitions-{count}")}))
        for index, count in enumerate(args.partition_axis)]


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
