"""Prometheus metrics of the forwarder, served by the driver (`monitoring.metrics_port`).

Per partition (labels `topic`, `partition`), from the planner's status as of its latest
planning call (every offset is a next offset, as in Kafka):

- `synclib_partition_follower_offset`, `synclib_partition_leader_offset` (the minimum over the
  leader groups), `synclib_partition_high_watermark`;
- `synclib_partition_lag_offsets`: high watermark - follower;
- `synclib_partition_held_back_offsets`: high watermark - leader (what the gate holds back);
- `synclib_partition_state{state}`: 1 for the current state, 0 for the three others;
- `synclib_partition_stale`: 1 while the leader is reported stale.

Over all partitions, so dashboards and alerts need not aggregate a series per partition:
`synclib_partitions{state}` (partitions in each state), `synclib_partitions_stale`,
`synclib_held_back_offsets` and `synclib_lag_offsets` (sums over the partitions).

Cardinality: 10 series per partition, 10,240 at 1,024 partitions (a scrape of 0.75 MB, built in
0.26 s on a 2-core machine at load 25). They stay per partition, as Kafka's lag exporters keep
them: an alert must name the one partition whose leader is stale or whose lag grows, and a
Prometheus server holds millions of series. The aggregates are for graphs and fleet alerts.

Per leader group: `synclib_leader_commit_age_seconds{group}`, seconds since the forwarder last
received a commit of the group (after a restart, counted from the replay of the commit log).

Counters: `synclib_commit_log_skipped_total` (malformed commit-log messages skipped by the
running query), `synclib_batches_total` and `synclib_rows_written_total` (micro-batches and
rows this run wrote), `synclib_maintenance_runs_total` (table maintenance passes, see
`maintenance_run`), `synclib_dead_letters_total{topic}` (rows this run wrote to the dead-letter
table, `sink.dead_letters`; no sample before the first); histograms
`synclib_batch_duration_seconds` (micro-batch times, `batch_duration_ms`) and `synclib_gate_latency_seconds`
(from a leader's commit to the Delta commit holding its offsets, one observation per partition
the commit released: `synclib.app.gate_latency`); `synclib_object_store_errors_total{kind}` and
`synclib_object_store_retries_total{kind}`: transient failures of the object-store requests synclib
sends itself from the driver (the run marker, checkpoint reads, the Delta log entries it appends),
and how many of them were retried (`synclib.store_retry`: kinds `slow-down`, `503`, `5xx`,
`timeout`, `connection`); an error not retried ended the job at the retry deadline.

A figure that is unknown (no high watermark yet, a group that has not committed) has no sample.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from synclib import store_retry
from synclib.source.state import SynchronizedPartitionState
from synclib.source.status import PartitionStatus, PlannerStatus

logger = logging.getLogger(__name__)

BATCH_DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
GATE_LATENCY_BUCKETS = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
_PARTITION_LABELS = ("topic", "partition")
_PARTITION_GAUGES: tuple[tuple[str, str, Callable[[PartitionStatus], int | None]], ...] = (
    ("synclib_partition_follower_offset", "The follower's next offset (what the Delta table holds up to)",
     lambda p: p.follower_offset),
    ("synclib_partition_leader_offset", "The leader groups' committed next offset (minimum over the groups)",
     lambda p: p.leader_offset),
    ("synclib_partition_high_watermark", "The partition's high watermark", lambda p: p.high_watermark),
    ("synclib_partition_lag_offsets", "High watermark - follower offset", lambda p: p.lag),
    ("synclib_partition_held_back_offsets", "High watermark - leader offset: events the gate holds back",
     lambda p: p.held_back),
)


class _StatusCollector(Collector):
    """Partition and leader-group series from the latest planner status, built at each scrape."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.status: PlannerStatus | None = None
        self._clock = clock

    def collect(self) -> Iterator[Metric]:
        status = self.status
        partitions = status.partitions if status is not None else ()
        for name, documentation, value in _PARTITION_GAUGES:
            gauge = GaugeMetricFamily(name, documentation, labels=_PARTITION_LABELS)
            for p in partitions:
                figure = value(p)
                if figure is not None:
                    gauge.add_metric([p.topic, str(p.partition)], figure)
            yield gauge
        states = GaugeMetricFamily("synclib_partition_state", "1 for the partition's current state, 0 for the others",
                                   labels=(*_PARTITION_LABELS, "state"))
        stale = GaugeMetricFamily("synclib_partition_stale", "1 while the leader is reported stale for the partition",
                                  labels=_PARTITION_LABELS)
        for p in partitions:
            for state in SynchronizedPartitionState:
                states.add_metric([p.topic, str(p.partition), state.value], 1 if state is p.state else 0)
            stale.add_metric([p.topic, str(p.partition)], 1 if p.stale else 0)
        yield states
        yield stale
        yield from _aggregates(partitions)
        age = GaugeMetricFamily("synclib_leader_commit_age_seconds",
                                "Seconds since the forwarder last received a commit of the leader group",
                                labels=("group",))
        skipped = CounterMetricFamily("synclib_commit_log_skipped",
                                      "Malformed commit-log messages skipped by the running query")
        if status is not None:
            now = self._clock()
            for group, received_at in sorted(status.commit_log.last_commit_time.items()):
                age.add_metric([group], max(0.0, now - received_at))
            skipped.add_metric([], status.commit_log.skipped_malformed)
        yield age
        yield skipped


def _aggregates(partitions: Sequence[PartitionStatus]) -> Iterator[Metric]:
    """The series over all partitions: partitions per state, stale partitions, offsets held back and lag."""
    per_state = GaugeMetricFamily("synclib_partitions", "Partitions in each state", labels=("state",))
    for state in SynchronizedPartitionState:
        per_state.add_metric([state.value], sum(p.state is state for p in partitions))
    yield per_state
    yield GaugeMetricFamily("synclib_partitions_stale", "Partitions whose leader is reported stale",
                            value=sum(bool(p.stale) for p in partitions))
    yield GaugeMetricFamily("synclib_held_back_offsets", "Offsets the gate holds back, over all partitions",
                            value=sum(p.held_back or 0 for p in partitions))
    yield GaugeMetricFamily("synclib_lag_offsets", "High watermark - follower offset, over all partitions",
                            value=sum(p.lag or 0 for p in partitions))


class _DeadLettersCollector(Collector):
    """`synclib_dead_letters_total{topic}` from the dead-letter sink's running totals."""

    def __init__(self) -> None:
        self.totals: Mapping[str, int] = {}

    def collect(self) -> Iterator[Metric]:
        letters = CounterMetricFamily("synclib_dead_letters", "Rows this run wrote to the dead-letter table",
                                      labels=("topic",))
        for topic, count in sorted(self.totals.items()):
            letters.add_metric([topic], count)
        yield letters


class _ObjectStoreCollector(Collector):
    """The object-store error and retry counters of this process (`synclib.store_retry.counts`)."""

    def collect(self) -> Iterator[Metric]:
        errors, retries = store_retry.counts()
        for name, documentation, counts in (
                ("synclib_object_store_errors", "Transient failures of synclib's own object-store requests", errors),
                ("synclib_object_store_retries", "Retries of synclib's own object-store requests", retries)):
            family = CounterMetricFamily(name, documentation, labels=("kind",))
            for kind, count in sorted(counts.items()):
                family.add_metric([kind], count)
            yield family


class ForwarderMetrics:
    """The forwarder's series in a registry of their own; `observe` feeds them, `serve` exposes them."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # no `*_created` series beside the counters
        self.registry = CollectorRegistry()
        self._status = _StatusCollector(clock)
        self.registry.register(self._status)
        self._dead_letters = _DeadLettersCollector()
        self.registry.register(self._dead_letters)
        self.registry.register(_ObjectStoreCollector())
        self._batches = Counter("synclib_batches", "Micro-batches written by this run", registry=self.registry)
        self._rows = Counter("synclib_rows_written", "Rows written to Delta by this run", registry=self.registry)
        self._durations = Histogram("synclib_batch_duration_seconds", "Micro-batch duration after planning",
                                    buckets=BATCH_DURATION_BUCKETS, registry=self.registry)
        self._gate_latency = Histogram("synclib_gate_latency_seconds",
                                       "From a leader's commit to the Delta commit holding its offsets",
                                       buckets=GATE_LATENCY_BUCKETS, registry=self.registry)
        self._maintenance = Counter("synclib_maintenance_runs", "Table maintenance passes run by this job",
                                    registry=self.registry)
        self._seen: tuple[str, int] = ("", -1)
        self._server: Any = None

    def serve(self, port: int, address: str = "0.0.0.0") -> bool:
        """Serve `/metrics` on `address:port` from a daemon thread; False (logged) when the port
        cannot be bound, so a busy port costs the metrics, not the job."""
        try:
            self._server, _ = start_http_server(port, address, registry=self.registry)
        except OSError as exc:
            logger.warning("metrics: cannot serve on %s:%d (%s); continuing without metrics", address, port, exc)
            return False
        logger.info("metrics: serving Prometheus metrics on http://%s:%d/metrics", address, port)
        return True

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def observe(self, progresses: Sequence[Mapping[str, Any]], status: PlannerStatus | None,
                dead_letters: Mapping[str, int] | None = None,
                gate_latencies: Sequence[tuple[float, int]] = ()) -> None:
        """Count the micro-batches of progress reports not seen yet (oldest first; Spark's
        reports of idle triggers are not batches), observe their `gate_latencies` (seconds, how
        many), and keep `status` for the partition series and `dead_letters` (this run's dead
        letters by topic) for theirs."""
        for seconds, count in gate_latencies:
            for _ in range(count):
                self._gate_latency.observe(seconds)
        if status is not None:
            self._status.status = status
        if dead_letters is not None:
            self._dead_letters.totals = dict(dead_letters)
        for progress in progresses:
            key = (str(progress["timestamp"]), int(progress["batchId"]))
            if key <= self._seen:
                continue
            self._seen = key
            durations = progress.get("durationMs") or {}
            if "addBatch" not in durations:
                continue
            self._batches.inc()
            self._rows.inc(rows_written(progress))
            self._durations.observe(batch_duration_ms(progress) / 1000.0)

    def maintenance_run(self) -> None:
        """Count one table maintenance pass (the maintenance thread's hook)."""
        self._maintenance.inc()


def batch_duration_ms(progress: Mapping[str, Any]) -> int:
    """A micro-batch's time from its offsets' planning to its end: the trigger's time without
    `latestOffset`, where `trigger.mode: leader` waits for the leader's commits."""
    durations = progress.get("durationMs") or {}
    return int(durations.get("triggerExecution") or 0) - int(durations.get("latestOffset") or 0)


def rows_written(progress: Mapping[str, Any]) -> int:
    """The sink's output rows of a micro-batch, or its input rows when the sink reports none
    (foreachBatch reports -1)."""
    output = (progress.get("sink") or {}).get("numOutputRows")
    if isinstance(output, int) and output >= 0:
        return output
    return int(progress.get("numInputRows") or 0)
