"""The fixed cost of a forwarder micro-batch: one-row batches and idle triggers.

On a quiet topic, the leader commits one new event at a time (every 0.5-1.5x `interval_s`):
each commit becomes a one-row micro-batch. Per step, from the commit-log message being
acknowledged to the Delta commit holding it appearing in the table's log, split at the moment
the batch's offsets are planned (its trigger's start plus its latestOffset): before it, the wait
(for a timer trigger the next trigger; with `trigger.mode: leader` the commit log's way to the
planner and the planning), after it the batch's own time, from Spark's `durationMs` of the
query's progress events: latestOffset (the planner's round trip to the leader's offsets and the
broker; with `leader` also its wait for the commit), walCommit (Spark's offset log), getBatch and queryPlanning,
addBatch (task launch, Python worker read and write, the Delta commit), commitOffsets (Spark's
commit log). Idle triggers report progress too (`noDataProgressEventInterval` 0 for this
query): their latestOffset is what the planner costs every trigger.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from benchmarks.cluster import PartitionEnds
from benchmarks.phases import Bench, DeltaLogWatcher, _percentile

NO_DATA_INTERVAL = "spark.sql.streaming.noDataProgressEventInterval"
IDLE_S = 5.0  # idle time after the steps (at most steps x interval): CPU per second of idle triggers


def _start_time(progress: Mapping[str, Any]) -> float:
    return dt.datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()


def _medians(events: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    keys = sorted({k for e in events for k in e["durationMs"]})
    return {k: statistics.median(e["durationMs"].get(k, 0) for e in events) for k in keys}


Starter = Callable[[str, str], AbstractContextManager[tuple[Any, DeltaLogWatcher]]]


def floor(bench: Bench, name: str, extra: Sequence[str], steps: int, interval_s: float,
          peer: Starter | None = None) -> dict[str, Any]:
    """One-row batches and idle triggers of the forwarder configured by `extra` overrides, or
    of `peer(topic, name)` (Spark's Kafka source into delta-rs: no gate, each step's time is
    its record's acknowledgement)."""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    cluster = bench.cluster
    topic = cluster.topic(f"{name}-quiet", cluster.partitions)
    log_topic = cluster.topic(f"{name}-quiet-commit-log", 1)
    producer = cluster.producer(linger_ms=0)
    events: dict[tuple[int, str], dict[str, Any]] = {}

    def produce_one(partition: int, ends: PartitionEnds) -> PartitionEnds:
        metadata = producer.send(topic, value=b'{"floor": %d}' % partition, partition=partition).get(30)
        return {**ends, partition: metadata.offset + 1}

    def release(ends: PartitionEnds) -> float:
        return time.time() if peer is not None else cluster.commit(log_topic, topic, ends)

    def collect(query: Any) -> None:
        # the forwarder's numInputRows counts Kafka records (on the direct write path Spark's counts files)
        reports = ([json.loads(p.json) for p in query.recentProgress] if peer is not None
                   else bench.forwarder_progress(query))
        for event in reports:
            events[(event["batchId"], event["timestamp"])] = event

    previous = spark.conf.get(NO_DATA_INTERVAL, None)
    spark.conf.set(NO_DATA_INTERVAL, "0")  # read when the query starts
    try:
        ends: PartitionEnds = {}
        for partition in range(cluster.partitions):
            ends = produce_one(partition, ends)
        started = bench.forwarder(topic, log_topic, name, extra) if peer is None else peer(topic, name)
        with started as (query, watcher):
            if previous is None:
                spark.conf.unset(NO_DATA_INTERVAL)
            else:
                spark.conf.set(NO_DATA_INTERVAL, previous)
            release(ends)
            watcher.wait_for(topic, ends, query)
            published = []
            for step in range(steps):
                time.sleep(random.uniform(0.5, 1.5) * interval_s)
                ends = produce_one(step % cluster.partitions, ends)
                published.append((dict(ends), release(ends)))
                collect(query)
            seen = [watcher.wait_for(topic, offsets, query) for offsets, _ in published]
            idle_s = min(IDLE_S, steps * interval_s)
            with bench.usage() as idle_usage:  # what idle triggers cost
                time.sleep(idle_s)
            collect(query)
    finally:
        producer.close(timeout=5)
        if spark.conf.get(NO_DATA_INTERVAL, None) == "0":
            if previous is None:
                spark.conf.unset(NO_DATA_INTERVAL)
            else:
                spark.conf.set(NO_DATA_INTERVAL, previous)
    by_batch = {e["batchId"]: e for e in events.values() if e["numInputRows"] > 0}
    one_row = [e for e in by_batch.values() if e["numInputRows"] == 1]
    stepped = [by_batch[b] for b in sorted({c.batch_id for c in seen if c.batch_id in by_batch})]
    idle = [e for e in events.values() if e["numInputRows"] == 0]
    latencies = [commit.seen_at - at for commit, (_, at) in zip(seen, published, strict=True)]
    waits, batch_s = [], []
    for commit, (_, at) in zip(seen, published, strict=True):
        batch = by_batch.get(commit.batch_id) if commit.batch_id is not None else None
        if batch is not None:
            planned = _start_time(batch) + batch["durationMs"].get("latestOffset", 0) / 1000
            waits.append(planned - at)
            batch_s.append(commit.seen_at - planned)
    return {
        "steps": steps,
        "latency": {"p50_s": _percentile(latencies, 50), "p99_s": _percentile(latencies, 99),
                    "max_s": max(latencies), "samples_s": [round(x, 3) for x in latencies]},
        "until_planned_s": {"p50": _percentile(waits, 50), "max": max(waits)} if waits else None,
        "planned_to_table_s": {"p50": _percentile(batch_s, 50), "max": max(batch_s)} if batch_s else None,
        "one_row_batches": len(one_row), "one_row_ms": _medians(one_row),
        # the batches that carried the steps: one row each unless a slow batch let steps pile up
        "step_batches": len(stepped), "step_rows": [e["numInputRows"] for e in stepped],
        "step_ms": _medians(stepped),
        "idle_triggers": len(idle), "idle_ms": _medians(idle),
        "idle_cpu_s_per_s": {role: round(cpu / idle_s, 4) for role, cpu in idle_usage.cpu_seconds_by_role().items()},
    }
