"""The forwarder phases: the job's own `Forwarder` (`synclib.app.forwarder`) on a backlog the leader's
commit log releases (throughput, peak memory) and on a live topic (gate latency), timed by
watching the Delta table's log."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import statistics
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from benchmarks.cluster import LEADER_GROUP, WAIT_TIMEOUT_S, Cluster, LiveProducer, PartitionEnds
from harness.procmem import TreeMemory
from synclib.background import BackgroundThread
from synclib.delta.table import META_BATCH_ID, parse_offsets, synclib_metadata
from synclib.offsets import PartitionOffsets
from synclib.settings import ForwarderConfig, load_config

if TYPE_CHECKING:
    from harness.object_store import S3Server
    from synclib.app.forwarder import Forwarder

LOG_POLL_S = 0.01
STOP_TIMEOUT_S = 60.0  # a query still in its batch after this is stopped mid-batch


@dataclass(frozen=True)
class Settings:
    """The phases' sizes; the defaults are the benchmark's (`jobs/benchmark.py run`)."""
    partitions: int = 4
    messages: int = 250_000  # per partition: the backlog N
    value_bytes: int = 200
    warmup: float = 0.2  # fraction of the backlog released first, not timed
    memory_messages: int = 50_000  # per partition: the memory phase's N
    memory_scale: int = 10  # the memory phase reads N, then memory_scale * N; 0 skips it
    latency_steps: int = 20
    latency_interval_s: float = 1.0  # mean time between leader commits; each wait is uniform in [0.5x, 1.5x]
    latency_rate: float = 5000.0  # events/s produced during the latency phase
    runs: int = 3


def _percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))]


# --- the Delta table's log, as a reader sees it --------------------------------------------

@dataclass(frozen=True)
class SeenCommit:
    version: int
    seen_at: float  # time.time() when the poller first saw the log file
    committed_at: float  # the commit's own timestamp
    batch_id: int | None
    offsets: PartitionOffsets


def _reaches(offsets: PartitionOffsets, topic: str, wanted: PartitionEnds) -> bool:
    return all(offsets.get((topic, p), -1) >= end for p, end in wanted.items())


class DeltaLogWatcher(BackgroundThread):
    """Polls `<table>/_delta_log` and records every commit carrying synclib offsets."""

    def __init__(self, table_path: str) -> None:
        super().__init__("delta-log-watcher")
        self._log_dir = os.path.join(table_path, "_delta_log")
        self._lock = threading.Lock()
        self._commits: list[SeenCommit] = []

    def commits(self) -> list[SeenCommit]:
        with self._lock:
            return list(self._commits)

    def _work(self) -> None:
        version = 0
        while not self._stopping.wait(LOG_POLL_S):
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
            meta = synclib_metadata(info)
            offsets = parse_offsets(meta)
            if meta is None or offsets is None:
                return None
            batch_id = meta.get(META_BATCH_ID)
            return SeenCommit(version, seen_at, info["timestamp"] / 1000,
                              None if batch_id is None else int(batch_id), offsets)
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


# --- the forwarder -------------------------------------------------------------------------

class Bench:
    def __init__(self, settings: Settings, config_path: str, overrides: Sequence[str], bootstrap: str,
                 cluster: Cluster, workdir: str, jvm_pid: int, broker_pid: int | None,
                 roots: Mapping[int, str] | None = None, store: S3Server | None = None,
                 bucket: str = "") -> None:
        """`store`: the phases' tables and checkpoints go to `bucket` on this S3 server instead of
        under `workdir` (as a cluster without a shared disk needs); the session must be configured
        for it (`synclib.app.session.use_storage`)."""
        self.settings = settings
        self.config_path = config_path
        self.overrides = list(overrides)
        self.bootstrap = bootstrap
        self.cluster = cluster
        self.workdir = workdir
        self.jvm_pid = jvm_pid
        self.others = {} if broker_pid is None else {broker_pid: "broker"}
        self.roots = dict(roots or {})  # a standalone cluster's daemons: their trees run the executors
        self.job: Forwarder | None = None  # the forwarder phase's job, while one runs
        self.store, self.bucket = store, bucket

    def root(self, name: str) -> str:
        """Where the phase `name` keeps its table and checkpoint."""
        return f"s3://{self.bucket}/{name}" if self.store is not None else os.path.join(self.workdir, name)

    def local(self, location: str) -> str:
        """A location as this machine's path: on the S3 server, its backend's directory (so
        watching a table's log sends no request)."""
        return self.store.local_path(location) if self.store is not None else location

    def usage(self) -> TreeMemory:
        """Peak RSS and CPU time of every process doing the benchmark's Spark work (a phase's `with`)."""
        return TreeMemory(self.jvm_pid, self.others, roots=self.roots)

    def config(self, topic: str, log_topic: str, name: str, extra: Sequence[str] = ()) -> ForwarderConfig:
        root = self.root(name)
        storage = self.store.overrides() if self.store is not None else []
        return load_config(self.config_path, [
            *self.overrides, *storage, *extra, f"kafka.bootstrap_servers={self.bootstrap}", "embedded=null",
            f"source.subscribe={topic}",
            "source.subscribe_pattern=null", "source.assign=null", "source.remote_offsets=commit_log",
            f"source.commit_log_topic={log_topic}", f"source.commit_groups=[{LEADER_GROUP}]",
            "source.starting_offsets=earliest", f"sink.path={root}/table",
            f"checkpoint.location={root}/checkpoint", "logging.progress=false",
        ])

    @contextmanager
    def forwarder(self, topic: str, log_topic: str, name: str,
                  extra: Sequence[str] = ()) -> Iterator[tuple[Any, DeltaLogWatcher]]:
        """The job's forwarder on `topic`; `extra`: more config overrides (sink.engine, trigger)."""
        from pyspark.sql import SparkSession

        from synclib.app.forwarder import Forwarder
        from synclib.app.signals import stop_after_batch_in_flight

        config = self.config(topic, log_topic, name, extra)
        status_path = os.path.join(self.workdir, name, "status.json")
        os.makedirs(os.path.dirname(status_path), exist_ok=True)
        self.job = Forwarder(config, None)
        spark = SparkSession.builder.getOrCreate()
        query = self.job.start(spark, self.bootstrap, status_path)
        try:
            with DeltaLogWatcher(self.local(config.sink.path)) as watcher:
                yield query, watcher
        finally:
            stop_after_batch_in_flight(spark, query, STOP_TIMEOUT_S)

    def throughput(self, topic: str, ends: PartitionEnds, name: str, extra: Sequence[str] = ()) -> dict[str, Any]:
        """Forwarder rows/s on a committed backlog, after a warm-up slice; peak RSS meanwhile."""
        log_topic = self.cluster.topic(f"{name}-commit-log", 1)
        warm = {p: max(1, int(end * self.settings.warmup)) for p, end in ends.items()}
        self.cluster.commit(log_topic, topic, warm)
        with self.forwarder(topic, log_topic, name, extra) as (query, watcher):
            warm_commit = watcher.wait_for(topic, warm, query)
            with self.usage() as memory:
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
                "cpu_s": memory.cpu_seconds_by_role(), "batch_ms": [b["durationMs"] for b in timed]}

    def forwarder_progress(self, query: Any) -> list[dict[str, Any]]:
        """The forwarder's progress reports, `numInputRows` counting the Kafka records read."""
        assert self.job is not None, "no forwarder phase running"
        return self.job.progress(query)

    def _progress_until(self, query: Any, batch_id: int | None) -> list[dict[str, Any]]:
        deadline = time.monotonic() + 60
        while True:
            progress = self.forwarder_progress(query)
            if batch_id is None or any(p["batchId"] >= batch_id for p in progress) or time.monotonic() > deadline:
                return progress
            time.sleep(0.05)

    def memory(self, extra: Sequence[str] = ()) -> dict[str, Any]:
        """The forwarder on a backlog of N and of `memory_scale` N: peak RSS per role at each, and their ratio."""
        settings, phases = self.settings, {}
        for label, scale in (("N", 1), (f"{settings.memory_scale}N", settings.memory_scale)):
            topic, ends = self.cluster.backlog(f"memory-{label}", settings.memory_messages * scale,
                                               settings.value_bytes)
            phases[label] = self.throughput(topic, ends, f"memory-{label}", extra)
        (_, at_n), (_, at_large) = phases.items()
        return {
            "rows": {label: phase["rows"] for label, phase in phases.items()},
            "rows_per_s": {label: phase["rows_per_s"] for label, phase in phases.items()},
            "peak_mib": {label: phase["memory_mib"] for label, phase in phases.items()},
            "ratio": {role: round(at_large["memory_mib"][role] / mib, 3)
                      for role, mib in at_n["memory_mib"].items() if mib and role in at_large["memory_mib"]},
        }

    def latency(self, name: str, extra: Sequence[str] = ()) -> dict[str, Any]:
        """Seconds from each leader commit's acknowledgement to its offsets being in the table."""
        settings = self.settings
        topic = self.cluster.topic(f"{name}-live", self.cluster.partitions)
        log_topic = self.cluster.topic(f"{name}-live-commit-log", 1)
        with LiveProducer(self.cluster, topic, settings.latency_rate, settings.value_bytes) as producer, \
                self.forwarder(topic, log_topic, name, extra) as (query, watcher):
            warm = self._wait_produced(producer)
            self.cluster.commit(log_topic, topic, warm)
            watcher.wait_for(topic, warm, query)
            steps, last = [], warm
            with self.usage() as usage:
                started = time.monotonic()
                for _ in range(settings.latency_steps):
                    time.sleep(random.uniform(0.5, 1.5) * settings.latency_interval_s)
                    offsets = producer.produced()
                    if offsets == last:  # no new event (the producer stalled): the table may hold them already
                        continue
                    steps.append((offsets, self.cluster.commit(log_topic, topic, offsets)))
                    last = offsets
                if not steps:
                    raise RuntimeError("the latency phase's producer wrote no new event at any step")
                latencies = [watcher.wait_for(topic, offsets, query).seen_at - published
                             for offsets, published in steps]
                elapsed = time.monotonic() - started
            batches = self.forwarder_progress(query)
        return {"steps": len(latencies), "p50_s": _percentile(latencies, 50),
                "p99_s": _percentile(latencies, 99), "max_s": max(latencies),
                "samples_s": [round(x, 3) for x in latencies], "batch_ms": _median_durations(batches),
                "batches_per_s": len([b for b in batches if b.get("numInputRows")]) / elapsed,
                # the query's processes; `driver` also runs this benchmark's producer and watcher
                "cpu_s_per_s": {role: round(cpu / elapsed, 3) for role, cpu in usage.cpu_seconds_by_role().items()}}

    def _wait_produced(self, producer: LiveProducer) -> PartitionEnds:
        """What the producer has written once it writes at its rate (each step then commits new events)."""
        deadline = time.monotonic() + 120
        while not producer.steady():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the latency phase's producer not at its rate after 120s: {producer.produced()}")
            time.sleep(0.05)
        return producer.produced()


def _median_durations(batches: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Median of each phase of Spark's `durationMs` over the batches that read rows."""
    busy = [b["durationMs"] for b in batches if b.get("numInputRows")]
    return {k: statistics.median(d.get(k, 0) for d in busy) for k in sorted({k for d in busy for k in d})}
