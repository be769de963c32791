"""The forwarder's peer in Spark: Spark's own Kafka source (spark-sql-kafka-0-10, ungated),
writing the forwarder's table shape into Delta with either engine, as a Spark user would
without synclib:

- `delta-spark`: `readStream.format("kafka")` -> `writeStream.format("delta")` (Delta's
  streaming sink);
- `delta-rs`: `readStream.format("kafka")` -> synclib's `synclib_delta` sink
  (`synclib.delta.stream.start_delta_stream`, engine delta-rs).

Timed like the forwarder: a first query reads a warm-up slice (`maxOffsetsPerTrigger`, one
batch, then a one-hour trigger holds it until it is stopped between batches); a second query
on the same checkpoint and table reads the rest of the backlog at the forwarder's trigger.
rows/s from the start of its first batch to the Delta commit of its last; CPU seconds per
process role meanwhile.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from benchmarks.cluster import WAIT_TIMEOUT_S, PartitionEnds
from benchmarks.phases import STOP_TIMEOUT_S, DeltaLogWatcher
from harness.procmem import TreeMemory
from synclib.delta.table import DATE_COLUMN
from synclib.settings.values import DELTA_RS, DELTA_SPARK

KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")
HOLD_TRIGGER = "1 hour"  # the warm-up query's trigger: its first batch runs at once, no second one


def _offsets(value: Any) -> dict[str, dict[str, int]]:
    return json.loads(value) if isinstance(value, str) else dict(value or {})


def reaches(progress: Mapping[str, Any], topic: str, ends: PartitionEnds) -> bool:
    """Whether a progress event's source end offsets reach `ends` on every partition."""
    have = _offsets(progress["sources"][0]["endOffset"]).get(topic, {}) if progress.get("sources") else {}
    return all(int(have.get(str(p), -1)) >= end for p, end in ends.items())


def last_commit_time(table: str) -> float:
    """The commitInfo timestamp (s) of the table's newest version."""
    log = os.path.join(table, "_delta_log")
    newest = max(name for name in os.listdir(log) if name.endswith(".json") and name[:20].isdigit())
    with open(os.path.join(log, newest)) as commit:
        for line in commit:
            info = json.loads(line).get("commitInfo") if line.strip() else None
            if info is not None:
                return float(info["timestamp"]) / 1000
    raise RuntimeError(f"{newest} of {table} has no commitInfo")


def _wait_progress(query: Any, done: Any, what: str, timeout_s: float = WAIT_TIMEOUT_S) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while True:
        progress = [json.loads(p.json) for p in query.recentProgress]
        if any(done(p) for p in progress):
            return progress
        if not query.isActive:
            raise RuntimeError(f"Spark's Kafka source query stopped: {query.exception()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not done in {timeout_s:.0f}s")
        time.sleep(0.02)


class SparkKafkaPeer:
    """Spark's Kafka source into Delta, on one cluster; one table and checkpoint per phase."""

    def __init__(self, spark: Any, kafka_options: Mapping[str, str], root: Callable[[str], str],
                 local: Callable[[str], str], trigger_s: float, partition_by_date: bool,
                 usage: Callable[[], TreeMemory]) -> None:
        """`root(name)`: where phase `name` keeps its table and checkpoint (`Bench.root`); `local`:
        that location as a path on this machine (`Bench.local`), where its log is watched."""
        self.spark = spark
        # No client telemetry (KIP-714), as the forwarder's kafka-python has none: its consumers,
        # pooled by Spark until the session stops, otherwise warn once each when the broker is gone.
        self.kafka_options = {**kafka_options, "kafka.enable.metrics.push": "false"}
        self.root, self.local = root, local
        self.trigger = f"{int(trigger_s * 1000)} milliseconds"
        self.partition_by_date = partition_by_date
        self.usage = usage  # `Bench.usage`: what a phase measures

    @contextmanager
    def live(self, topic: str, name: str, trigger: str) -> Iterator[tuple[Any, DeltaLogWatcher]]:
        """Spark's Kafka source on `topic` into delta-rs (its commits carry the batch's offsets
        in synclib's metadata, which `DeltaLogWatcher` reads), as the micro-batch floor needs."""
        query = self._start(topic, DELTA_RS, name, trigger, None)
        try:
            with DeltaLogWatcher(self.local(self._table(name))) as watcher:
                yield query, watcher
        finally:
            self._stop(query)

    def _stop(self, query: Any) -> None:
        from synclib.app.signals import stop_after_batch_in_flight  # imports pyspark

        stop_after_batch_in_flight(self.spark, query, STOP_TIMEOUT_S)

    def _table(self, name: str) -> str:
        return f"{self.root(name)}/table"

    def _start(self, topic: str, engine: str, name: str, trigger: str, max_offsets: int | None) -> Any:
        from synclib.delta.stream import DeltaStream, start_delta_stream, utc_date  # it imports pyspark

        reader = (self.spark.readStream.format("kafka").options(**self.kafka_options)
                  .option("subscribe", topic).option("startingOffsets", "earliest")
                  .option("failOnDataLoss", "true"))
        if max_offsets is not None:
            reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
        df = reader.load().select(*KAFKA_COLUMNS)
        table, checkpoint = self._table(name), f"{self.root(name)}/checkpoint"
        if engine != DELTA_SPARK:
            target = DeltaStream(table, checkpoint, engine, partition_by_date=self.partition_by_date,
                                 trigger={"processingTime": trigger}, query_name=f"spark_kafka_{name}")
            return start_delta_stream(df, target)
        writer = df
        if self.partition_by_date:
            writer = df.withColumn(DATE_COLUMN, utc_date(df["timestamp"]))
        stream = (writer.writeStream.format("delta").option("checkpointLocation", checkpoint)
                  .trigger(processingTime=trigger).queryName(f"spark_kafka_{name}"))
        if self.partition_by_date:
            stream = stream.partitionBy(DATE_COLUMN)
        return stream.start(table)

    def throughput(self, topic: str, ends: PartitionEnds, warm: PartitionEnds, engine: str,
                   name: str) -> dict[str, Any]:
        """rows/s of the second query over the backlog after the warm-up slice."""
        warm_query = self._start(topic, engine, name, HOLD_TRIGGER, sum(warm.values()))
        try:
            warm_progress = _wait_progress(warm_query, lambda p: p["batchId"] == 0 and p["numInputRows"] > 0,
                                           f"{name}: the warm-up batch")
        finally:
            self._stop(warm_query)
        warm_rows = sum(p["numInputRows"] for p in warm_progress)
        with self.usage() as usage:
            query = self._start(topic, engine, name, self.trigger, None)
            try:
                progress = _wait_progress(query, lambda p: reaches(p, topic, ends), f"{name}: the backlog")
            finally:
                self._stop(query)
        timed = [p for p in progress if p["numInputRows"] > 0]
        rows = sum(p["numInputRows"] for p in timed)
        if rows + warm_rows != sum(ends.values()):
            raise RuntimeError(f"{name}: read {warm_rows} + {rows} rows, expected {sum(ends.values())}")
        started = dt.datetime.fromisoformat(timed[0]["timestamp"].replace("Z", "+00:00")).timestamp()
        seconds = last_commit_time(self.local(self._table(name))) - started
        return {"rows": rows, "seconds": round(seconds, 3), "rows_per_s": rows / seconds,
                "batches": len(timed), "cpu_s": usage.cpu_seconds_by_role(),
                "memory_mib": usage.summary_mib(), "batch_ms": [p["durationMs"] for p in timed]}
