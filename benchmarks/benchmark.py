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
import datetime as dt
import json
import logging
import os
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import confluent_kafka
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from benchmarks.procmem import TreeMemory
from synclib.delta.writer import META_BATCH_ID, META_OFFSETS
from synclib.kafka import client_config as kafkaconf
from synclib.kafka import reader as partition_reader
from synclib.leader.commitlog import Commit, encode_commit
from synclib.settings import ForwarderConfig, load_config

logger = logging.getLogger("benchmarks.benchmark")

DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf", "local.yaml")
DEFAULT_OUTPUT = "benchmark-results.json"
LEADER_GROUP = "benchmark-leader"
WAIT_TIMEOUT_S = 600.0
LOG_POLL_S = 0.01
LIBRDKAFKA_BATCH = 10_000  # messages per consume() call
# kafka-python client settings -> librdkafka's, for the reference consumer on secured clusters.
LIBRDKAFKA_NAMES = {
    "security_protocol": "security.protocol", "sasl_mechanism": "sasl.mechanisms",
    "sasl_plain_username": "sasl.username", "sasl_plain_password": "sasl.password",
    "ssl_cafile": "ssl.ca.location", "ssl_certfile": "ssl.certificate.location",
    "ssl_keyfile": "ssl.key.location", "ssl_password": "ssl.key.password",
}

PartitionEnds = dict[int, int]


@dataclass(frozen=True)
class Settings:
    partitions: int
    messages: int  # per partition: the backlog N
    value_bytes: int
    warmup: float  # fraction of the backlog released first, not timed
    memory_messages: int  # per partition: the memory phase's N
    memory_scale: int  # the memory phase reads N, then memory_scale * N; 0 skips it
    latency_steps: int
    latency_interval_s: float  # mean time between leader commits; each wait is uniform in [0.5x, 1.5x]
    latency_rate: float  # events/s produced during the latency phase
    runs: int


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


def _percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))]


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


# --- the Delta table's log, as a reader sees it --------------------------------------------

@dataclass(frozen=True)
class SeenCommit:
    version: int
    seen_at: float  # time.time() when the poller first saw the log file
    committed_at: float  # the commit's own timestamp
    batch_id: int | None
    offsets: dict[str, dict[str, int]]


def _reaches(offsets: Mapping[str, Mapping[str, int]], topic: str, wanted: PartitionEnds) -> bool:
    have = offsets.get(topic, {})
    return all(have.get(str(p), -1) >= end for p, end in wanted.items())


class DeltaLogWatcher:
    """Polls `<table>/_delta_log` and records every commit carrying synclib offsets."""

    def __init__(self, table_path: str) -> None:
        self._log_dir = os.path.join(table_path, "_delta_log")
        self._lock = threading.Lock()
        self._commits: list[SeenCommit] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="delta-log-watcher", daemon=True)

    def __enter__(self) -> DeltaLogWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def commits(self) -> list[SeenCommit]:
        with self._lock:
            return list(self._commits)

    def _run(self) -> None:
        version = 0
        while not self._stop.wait(LOG_POLL_S):
            while True:
                path = os.path.join(self._log_dir, f"{version:020d}.json")
                try:
                    with open(path) as log:
                        lines = log.read().splitlines()
                except FileNotFoundError:
                    break
                seen = self._parse(version, time.time(), lines)
                if seen is not None:
                    with self._lock:
                        self._commits.append(seen)
                version += 1

    @staticmethod
    def _parse(version: int, seen_at: float, lines: Sequence[str]) -> SeenCommit | None:
        for line in lines:
            info = json.loads(line).get("commitInfo") if line.strip() else None
            if info is None:
                continue
            meta = info if META_OFFSETS in info else json.loads(info.get("userMetadata") or "{}")
            if not meta.get(META_OFFSETS):
                return None
            batch_id = meta.get(META_BATCH_ID)
            return SeenCommit(version, seen_at, info["timestamp"] / 1000,
                              None if batch_id is None else int(batch_id), json.loads(meta[META_OFFSETS]))
        return None

    def wait_for(self, topic: str, wanted: PartitionEnds, query: Any, timeout_s: float = WAIT_TIMEOUT_S) -> SeenCommit:
        """The first commit whose offsets reach `wanted`; raises if the query dies or time runs out."""
        deadline = time.monotonic() + timeout_s
        while True:
            for commit in self.commits():
                if _reaches(commit.offsets, topic, wanted):
                    return commit
            if not query.isActive:
                raise RuntimeError(f"the forwarder query stopped: {query.exception()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no Delta commit reached {wanted} of {topic} in {timeout_s:.0f}s")
            time.sleep(LOG_POLL_S)


# --- the cluster: topics, backlogs, the leader's commits ------------------------------------

def event_values(value_bytes: int) -> Callable[[int, int], bytes]:
    """(partition, sequence) -> a Sentry-like JSON event of `value_bytes` bytes with a unique
    event id: distinct values, so Parquet encoding costs what it costs on real events."""
    from synclib.embedded.world import make_event

    template = make_event(1, value_bytes, random.Random(0))
    at = template.index(b'"event_id": "') + len(b'"event_id": "')
    head, tail = template[:at], template[at + 32:]
    return lambda partition, sequence: b"%s%08x%024x%s" % (head, partition, sequence, tail)


class LiveProducer:
    """Writes `rate` events/s round-robin over the partitions in bursts every 50 ms (cheap
    formatted values, not to steal the forwarder's CPU), each burst ending with a single-record
    batch per partition, as the embedded broker needs for exact high watermarks."""

    def __init__(self, cluster: Cluster, topic: str, rate: float, value_bytes: int) -> None:
        self._cluster, self._topic, self._rate = cluster, topic, rate
        self._event = event_values(value_bytes)
        self._produced: PartitionEnds = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="live-producer", daemon=True)

    def __enter__(self) -> LiveProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def produced(self) -> PartitionEnds:
        """Next offset per partition, as acknowledged; raises if the producer thread died."""
        if self._failure is not None:
            raise RuntimeError(f"the live producer died: {self._failure!r}") from self._failure
        with self._lock:
            return dict(self._produced)

    def _run(self) -> None:
        from synclib.embedded.world import send_ending_single

        partitions = self._cluster.partitions
        producer = self._cluster.producer(linger_ms=5)
        try:
            started, sent = time.monotonic(), 0
            while not self._stop.wait(0.05):
                due = int(self._rate * (time.monotonic() - started))
                records: dict[int, list[Any]] = {}
                for sequence in range(sent, due):
                    partition = sequence % partitions
                    records.setdefault(partition, []).append((None, self._event(partition, sequence), []))
                sent = due
                ends = send_ending_single(producer, self._topic, records)
                with self._lock:
                    self._produced.update(ends)
        except BaseException as exc:  # noqa: BLE001 - reported by produced()
            self._failure = exc
        finally:
            producer.close(timeout=5)


class Cluster:
    """The broker under test, with the benchmark's clients."""

    def __init__(self, client_config: Mapping[str, Any], partitions: int) -> None:
        from synclib.embedded.broker import TopicAdmin

        self.client_config = dict(client_config)
        self.partitions = partitions
        self._admin = TopicAdmin(**kafkaconf.for_admin(self.client_config))
        self._producer = KafkaProducer(**{**kafkaconf.for_producer(self.client_config), "linger_ms": 0})
        self._prefix = f"bench-{int(time.time())}-{random.randrange(1 << 16):04x}"
        self.created: list[str] = []

    def topic(self, name: str, partitions: int) -> str:
        full = f"{self._prefix}-{name}"
        self._admin.create(full, partitions)
        self.created.append(full)
        return full

    def backlog(self, name: str, per_partition: int, value_bytes: int) -> tuple[str, PartitionEnds]:
        """A topic holding `per_partition` distinct events of `value_bytes` per partition."""
        from synclib.embedded.world import send_ending_single

        topic = self.topic(name, self.partitions)
        started = time.monotonic()
        event = event_values(value_bytes)
        producer = self.producer(batch_size=1 << 20, linger_ms=50)
        try:
            for partition in range(self.partitions):
                for sequence in range(per_partition - 1):
                    producer.send(topic, value=event(partition, sequence), partition=partition)
            ends = send_ending_single(producer, topic, {
                p: [(None, event(p, per_partition - 1), [])] for p in range(self.partitions)})
        finally:
            producer.close(timeout=10)
        logger.warning("backlog %s: %d records in %.1fs", topic, sum(ends.values()), time.monotonic() - started)
        return topic, ends

    def producer(self, **settings: Any) -> KafkaProducer:
        return KafkaProducer(**{**settings, **kafkaconf.for_producer(self.client_config)})

    def commit(self, log_topic: str, topic: str, offsets: PartitionEnds) -> float:
        """Publish the leader's commit of `offsets`; returns when the broker acknowledged it."""
        futures = []
        for partition, offset in sorted(offsets.items()):
            key, value = encode_commit(Commit(LEADER_GROUP, topic, partition, offset, orig_message_ts=time.time()))
            futures.append(self._producer.send(log_topic, key=key, value=value, partition=0))
        self._producer.flush(30)
        for future in futures:
            future.get(0)
        return time.time()

    def close(self) -> None:
        self._producer.close(timeout=10)
        if self.created:
            try:
                self._admin.delete(self.created)
            except Exception as exc:  # noqa: BLE001 - cleanup must not hide the results
                logger.warning("could not delete the benchmark topics: %s", exc)
        self._admin.close()


def reference_rate(client_config: Mapping[str, Any], topic: str, ends: PartitionEnds) -> float:
    """msg/s of one plain kafka-python consumer reading the whole backlog."""
    consumer = KafkaConsumer(**partition_reader.consumer_settings(client_config))
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(ends)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        total, count = sum(ends.values()), 0
        started = time.monotonic()
        while count < total:
            for records in consumer.poll(timeout_ms=1000).values():
                count += len(records)
            if time.monotonic() - started > WAIT_TIMEOUT_S:
                raise TimeoutError(f"reference consumer read {count} of {total} records")
        return count / (time.monotonic() - started)
    finally:
        consumer.close()


def librdkafka_rate(client_config: Mapping[str, Any], topic: str, ends: PartitionEnds) -> float:
    """msg/s of one librdkafka consumer (confluent-kafka) reading the whole backlog with batch
    `consume` calls; it checks CRCs, as kafka-python and the forwarder do (librdkafka's default
    does not), and fetches without backing off: by default, once 100,000 messages are queued
    locally, librdkafka postpones the next fetch by fetch.queue.backoff.ms (1 s), which held it
    at 160-190k msg/s here against 480-690k without (same CPU per message)."""
    settings = {librdkafka: client_config[name] for name, librdkafka in LIBRDKAFKA_NAMES.items()
                if client_config.get(name) is not None}
    consumer = confluent_kafka.Consumer({
        **settings, "bootstrap.servers": ",".join(client_config["bootstrap_servers"]),
        "group.id": f"synclib-benchmark-{os.getpid()}", "enable.auto.commit": False,
        "enable.auto.offset.store": False, "check.crcs": True, "fetch.queue.backoff.ms": 0,
    })
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in sorted(ends)])
        total, count = sum(ends.values()), 0
        started = time.monotonic()
        while count < total:
            for message in consumer.consume(num_messages=LIBRDKAFKA_BATCH, timeout=1.0):
                error = message.error()
                if error is not None:
                    raise RuntimeError(f"librdkafka reference consumer: {error}")
                count += 1
            if time.monotonic() - started > WAIT_TIMEOUT_S:
                raise TimeoutError(f"librdkafka reference consumer read {count} of {total} records")
        return count / (time.monotonic() - started)
    finally:
        consumer.close()


# --- the forwarder -------------------------------------------------------------------------

def _stop_between_batches(query: Any, timeout_s: float = 60.0) -> None:
    """Stop the query when no batch is running, so no write is aborted mid-way."""
    deadline = time.monotonic() + timeout_s
    while query.isActive and query.status["isTriggerActive"] and time.monotonic() < deadline:
        time.sleep(0.02)
    query.stop()


class Bench:
    def __init__(self, settings: Settings, config_path: str, overrides: Sequence[str], bootstrap: str,
                 cluster: Cluster, workdir: str, jvm_pid: int, broker_pid: int | None) -> None:
        self.settings = settings
        self.config_path = config_path
        self.overrides = list(overrides)
        self.bootstrap = bootstrap
        self.cluster = cluster
        self.workdir = workdir
        self.jvm_pid = jvm_pid
        self.others = {} if broker_pid is None else {broker_pid: "broker"}

    def config(self, topic: str, log_topic: str, name: str) -> ForwarderConfig:
        root = os.path.join(self.workdir, name)
        return load_config(self.config_path, [
            *self.overrides, f"kafka.bootstrap_servers={self.bootstrap}", "embedded=null", f"source.subscribe={topic}",
            "source.subscribe_pattern=null", "source.assign=null", "source.remote_offsets=commit_log",
            f"source.commit_log_topic={log_topic}", f"source.commit_groups=[{LEADER_GROUP}]",
            "source.starting_offsets=earliest", f"sink.path={root}/table",
            f"checkpoint.location={root}/checkpoint", "logging.progress=false",
            "trigger.available_now=false",
        ])

    @contextmanager
    def forwarder(self, topic: str, log_topic: str, name: str) -> Iterator[tuple[Any, DeltaLogWatcher]]:
        from pyspark.sql import SparkSession

        from synclib.app.job import Forwarder

        config = self.config(topic, log_topic, name)
        status_path = os.path.join(self.workdir, name, "status.json")
        query = Forwarder(config, None)._start(SparkSession.builder.getOrCreate(), self.bootstrap, status_path)
        try:
            with DeltaLogWatcher(config.sink.path) as watcher:
                yield query, watcher
        finally:
            _stop_between_batches(query)

    def throughput(self, topic: str, ends: PartitionEnds, name: str) -> dict[str, Any]:
        """Forwarder rows/s on a committed backlog, after a warm-up slice; peak RSS meanwhile."""
        log_topic = self.cluster.topic(f"{name}-commit-log", 1)
        warm = {p: max(1, int(end * self.settings.warmup)) for p, end in ends.items()}
        self.cluster.commit(log_topic, topic, warm)
        with self.forwarder(topic, log_topic, name) as (query, watcher):
            warm_commit = watcher.wait_for(topic, warm, query)
            with TreeMemory(self.jvm_pid, self.others) as memory:
                self.cluster.commit(log_topic, topic, ends)
                final = watcher.wait_for(topic, ends, query)
            batches = self._progress_until(query, final.batch_id)
        timed = [b for b in batches if b["batchId"] > (warm_commit.batch_id or 0) and b["numInputRows"] > 0]
        started = dt.datetime.fromisoformat(timed[0]["timestamp"].replace("Z", "+00:00")).timestamp()
        rows = sum(ends.values()) - sum(warm.values())
        read = sum(b["numInputRows"] for b in timed)
        if read != rows:
            raise RuntimeError(f"the forwarder read {read} rows after the warm-up, expected {rows}")
        seconds = final.committed_at - started
        return {"rows": rows, "seconds": round(seconds, 3), "rows_per_s": rows / seconds,
                "batches": len(timed), "memory_mib": memory.summary_mib(),
                "cpu_s": memory.cpu_seconds_by_role()}

    @staticmethod
    def _progress_until(query: Any, batch_id: int | None) -> list[dict[str, Any]]:
        deadline = time.monotonic() + 60
        while True:
            progress = [json.loads(p.json) for p in query.recentProgress]
            if batch_id is None or any(p["batchId"] >= batch_id for p in progress) or time.monotonic() > deadline:
                return progress
            time.sleep(0.05)

    def latency(self, name: str) -> dict[str, Any]:
        """Seconds from each leader commit's acknowledgement to its offsets being in the table."""
        settings = self.settings
        topic = self.cluster.topic(f"{name}-live", self.cluster.partitions)
        log_topic = self.cluster.topic(f"{name}-live-commit-log", 1)
        with LiveProducer(self.cluster, topic, settings.latency_rate, settings.value_bytes) as producer, \
                self.forwarder(topic, log_topic, name) as (query, watcher):
            warm = self._wait_produced(producer)
            self.cluster.commit(log_topic, topic, warm)
            watcher.wait_for(topic, warm, query)
            steps = []
            for _ in range(settings.latency_steps):
                time.sleep(random.uniform(0.5, 1.5) * settings.latency_interval_s)
                offsets = producer.produced()
                steps.append((offsets, self.cluster.commit(log_topic, topic, offsets)))
            latencies = [watcher.wait_for(topic, offsets, query).seen_at - published
                         for offsets, published in steps]
            batches = [json.loads(p.json) for p in query.recentProgress]
        return {"steps": len(latencies), "p50_s": _percentile(latencies, 50),
                "p99_s": _percentile(latencies, 99), "max_s": max(latencies),
                "samples_s": [round(x, 3) for x in latencies], "batch_ms": _median_durations(batches)}

    def _wait_produced(self, producer: LiveProducer) -> PartitionEnds:
        deadline = time.monotonic() + 60
        while len(produced := producer.produced()) < self.cluster.partitions:
            if time.monotonic() > deadline:
                raise TimeoutError("the latency phase's producer wrote nothing in 60s")
            time.sleep(0.05)
        return produced


def _median_durations(batches: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Median of each phase of Spark's `durationMs` over the batches that read rows."""
    busy = [b["durationMs"] for b in batches if b.get("numInputRows")]
    return {k: statistics.median(d.get(k, 0) for d in busy) for k in sorted({k for d in busy for k in d})}


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
