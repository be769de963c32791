"""One run of the forwarder's streaming query: start it, report progress, stop it gracefully
on a signal (or at the end of an embedded run), and sum it up or name the batch it failed in."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager, ExitStack
from typing import Any

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from synclib.app.gate_latency import GateLatency
from synclib.app.monitoring import Monitoring
from synclib.app.progress import ProgressReporter, dead_letters_note, format_summary
from synclib.app.resume import initial_offsets_file, starting_offsets_from_table
from synclib.app.session import checkpoint_manager, job_session
from synclib.app.signals import StopRequest, stop_after_batch_in_flight
from synclib.app.status import advertise_embedded_broker
from synclib.compat.pyspark import failed_batch_offsets, progress_since
from synclib.dead_letters.sink import SCHEMA as DEAD_LETTER_SCHEMA
from synclib.dead_letters.sink import DeadLetterBatches, Limits, start_with_dead_letters
from synclib.dead_letters.source_rows import MicroBatchSourceRows
from synclib.dead_letters.transformed import Transform
from synclib.delta import catalog, features, maintenance, spark_maintenance
from synclib.delta.engine import resolve_engine
from synclib.delta.stream import DeltaStream, start_delta_stream
from synclib.delta.table import table_summary
from synclib.direct import source as direct_source
from synclib.embedded.default_world import EmbeddedWorld
from synclib.exit_codes import ExitCode
from synclib.locations import read_text
from synclib.offsets import OffsetRange, parse_offsets_json
from synclib.settings import ForwarderConfig
from synclib.settings.values import DELTA_SPARK
from synclib.source.datasource import FORMAT_NAME, register
from synclib.source.events import EventReplay
from synclib.source.status import PlannerStatus
from synclib.spark_checkpoint import RunMarker, TableRecord, record_tables, start_run, superseded
from synclib.store_retry import ObjectStoreUnavailable, storage_failure

logger = logging.getLogger("synclib.forwarder")

GRACEFUL_STOP_TIMEOUT_S = 120.0
QUERY_NAME = "synclib_forwarder"


class Forwarder:
    """One run of the streaming query, with progress output, a graceful stop and a summary."""

    def __init__(self, config: ForwarderConfig, transform: Transform | None) -> None:
        self.config = config
        self.transform = transform
        self.dead_letters: DeadLetterBatches | None = None  # with sink.dead_letters
        self.dead_letters_path = config.sink.dead_letters_path  # by name: the catalog's location, once created
        self.left_to_platform = False  # a table by name that predictive optimization maintains
        self.direct_initial: str | None = None  # on the direct write path: the initial offsets file
        self._initial_offsets_text: str | None = None  # its contents, once read
        self._progress: list[dict[str, Any]] = []  # the query's recent progress reports, parsed
        self._newest_progress: tuple[str, str] | None = None  # the run id and timestamp of the newest
        self.run_marker = RunMarker.new()  # this run's claim on the checkpoint, written as its query starts
        self.table_path = config.sink.path  # a table by name: its location, once the catalog gave it
        self.gate_latency = GateLatency()
        self.planner_events = EventReplay()  # the planner's log lines, from its status file
        source = config.source  # past the source's deadlines a query fails: a longer wait is a stall
        self.monitoring = Monitoring(config.monitoring.healthcheck_file, config.monitoring.metrics_port,
                                     stall_after_s=max(source.broker_timeout, source.commit_log_timeout,
                                                       source.read_stall_timeout) + config.trigger.longest_pause)

    def run(self) -> int:
        """The job's exit code (an object store failing past the retry deadline: one line, exit 4)."""
        try:
            return self._run()
        except ObjectStoreUnavailable as exc:
            print(f"forwarder: {exc}", file=sys.stderr, flush=True)
            return ExitCode.STORAGE

    def _run(self) -> int:
        spark = job_session(self.config, "synclib-forwarder")
        stop = StopRequest()
        stop.install(spark)
        with ExitStack() as resources:
            resources.enter_context(self.monitoring)
            bootstrap = self.config.kafka.bootstrap_servers
            run_for: float | None = None
            if self.config.kafka.embedded:
                assert self.config.embedded is not None
                bootstrap = resources.enter_context(embedded_world(self.config)).bootstrap_servers
                # `synclib status` finds the embedded broker there
                resources.enter_context(advertise_embedded_broker(self.config.checkpoint.location, bootstrap))
                run_for = self.config.embedded.run_for
            status_dir = resources.enter_context(tempfile.TemporaryDirectory(prefix="synclib-status-"))
            status_path = os.path.join(status_dir, "status.json")
            if stop.event.is_set():
                return self._finish(status_path, f"{stop.reason} before the query started")
            query = self.start(spark, bootstrap, status_path)
            resources.enter_context(self._maintenance(spark))
            return self._watch(spark, query, stop, run_for, status_path)

    def source_options(self, bootstrap: str, status_path: str) -> dict[str, str]:
        options = self.config.source_options(bootstrap)
        options["statusFile"] = status_path
        options["initialOffsetsFile"] = initial_offsets_file(self.config.checkpoint.location)
        options["runId"] = self.run_marker.run_id
        options["runCheckpoint"] = self.config.checkpoint.location
        starting = starting_offsets_from_table(self.config, self.table_path)
        if starting is not None:
            options["startingOffsets"] = starting
        return options

    def start(self, spark: SparkSession, bootstrap: str, status_path: str) -> StreamingQuery:
        """Start the query: the `synchronized_kafka` source, the transform, the Delta sink; first
        this run's marker, so that a run still writing to the checkpoint stops at its next batch."""
        start_run(self.config.checkpoint.location, self.run_marker)
        logger.info("%s owns checkpoint %s", self.run_marker.describe(), self.config.checkpoint.location)
        sink = self.config.sink
        if sink.table is not None:  # an existing table's offsets to resume from
            self.table_path = catalog.locate(spark, sink.table)
        with checkpoint_manager(spark, self.config.checkpoint.location):
            query = self._start_query(spark, bootstrap, status_path)
        if sink.table is not None:  # created by now: where `status` and `maintain` find it
            self.table_path = catalog.locate(spark, sink.table)
            assert self.table_path is not None
            record = TableRecord(sink.table, self.table_path, sink.dead_letters_table, self.dead_letters_path,
                                 sink.maintenance.leave_to_platform and catalog.left_to_platform(spark, sink.table))
            record_tables(self.config.checkpoint.location, record)
            self.left_to_platform = record.left_to_platform
        return query

    def _start_query(self, spark: SparkSession, bootstrap: str, status_path: str) -> StreamingQuery:
        register(spark)
        options = self.source_options(bootstrap, status_path)
        df = spark.readStream.format(FORMAT_NAME).options(**options).load()
        if self.config.sink.dead_letters.enabled:
            return self._start_with_dead_letters(df, MicroBatchSourceRows(options, self.config.checkpoint.location))
        if self.transform is not None:
            return start_delta_stream(self.transform(df), self._delta_stream())

        def direct(table: Mapping[str, str]) -> DataFrame:  # nothing between source and sink
            direct_source.register(spark)
            self.direct_initial = options["initialOffsetsFile"]  # only once start_delta_stream takes the path
            return spark.readStream.format(direct_source.FORMAT_NAME).options(**options, **table).load()

        return start_delta_stream(df, self._delta_stream(), direct=direct)

    def _start_with_dead_letters(self, df: DataFrame, source_rows: MicroBatchSourceRows) -> StreamingQuery:
        """`sink.dead_letters`: rows the transform rejects or raises on go to a second table (by
        name: created here, beside the main one unless `sink.dead_letters.path` or `.table` says)."""
        sink = self.config.sink
        options = sink.dead_letters
        name = sink.dead_letters_table
        self.dead_letters_path = sink.dead_letters_path or catalog.ensure_table(
            df.sparkSession, DEAD_LETTER_SCHEMA, catalog.TableLayout(), name=name, setting="sink.dead_letters.table")
        query, self.dead_letters = start_with_dead_letters(
            df, self.transform, self._delta_stream(), dead_letters_path=self.dead_letters_path,
            error_column=options.error_column, source_rows=source_rows,
            limits=Limits(max_fraction=options.max_fraction, max_rows=options.max_rows), dead_letters_table=name)
        return query

    def _delta_stream(self) -> DeltaStream:
        """The sink's table, checkpoint, engine, partitioning, trigger and query name, from the config."""
        sink, trigger = self.config.sink, self.config.trigger
        maintained = spark_maintenance.table_properties(sink.maintenance) if sink.maintenance.enabled else {}
        return DeltaStream(
            path=sink.path or "", checkpoint_location=self.config.checkpoint.location, engine=sink.engine,
            partition_by=tuple(sink.partition_by), partition_by_date=sink.partition_by_date,
            trigger=trigger.spark_trigger,
            query_name=QUERY_NAME, run_id=self.run_marker.run_id,  # the batch commits write the log checkpoints
            table=sink.table, cluster_by=tuple(sink.cluster_by), table_properties=sink.table_properties,
            maintained_properties=maintained)

    def _maintenance(self, spark: SparkSession) -> AbstractContextManager[object]:
        """The sink's maintenance thread (`sink.maintenance`; a no-op context when disabled), each
        pass counted in the metrics and reported once, by the maintenance module's log line."""
        options, path = self.config.sink.maintenance, self.table_path
        if not options.enabled or path is None:
            return contextlib.nullcontext()
        if self.left_to_platform:
            logger.info("%s: maintenance left to the platform (predictive optimization; "
                        "sink.maintenance.leave_to_platform)", self.config.sink.table)
            return contextlib.nullcontext()
        on_pass = [lambda report: self.monitoring.maintenance_run()]
        spark_pass = None
        if resolve_engine(spark, self.config.sink.engine) == DELTA_SPARK:
            spark_pass = functools.partial(spark_maintenance.run_pass, spark, path, options)
        return maintenance.MaintenanceThread(path, options, on_pass=on_pass, pass_function=spark_pass)

    def _watch(self, spark: SparkSession, query: StreamingQuery, stop: StopRequest, run_for: float | None,
               status_path: str) -> int:
        reporter = ProgressReporter(table_rows=self.config.logging.partition_table_rows)
        started = time.monotonic()
        reason = "Trigger.AvailableNow: everything releasable at the start was forwarded"
        try:
            # PySpark takes fractional seconds (it waits int(timeout * 1000) ms); its annotation says int.
            while not query.awaitTermination(self.config.logging.progress_interval):  # type: ignore[arg-type]
                self._report(query, reporter, status_path)
                if stop.event.is_set():
                    reason = stop.reason or "stop requested"
                elif run_for is not None and time.monotonic() - started >= run_for:
                    reason = f"embedded.run_for ({run_for:g}s) elapsed"
                else:
                    continue
                stop_after_batch_in_flight(spark, query, GRACEFUL_STOP_TIMEOUT_S)
                break
            query.awaitTermination()
        except StreamingQueryException as exc:
            self._report(query, reporter, status_path)
            if (storage := storage_failure(str(exc))) is not None:  # the store, not the run, failed
                print(f"forwarder: {storage}", file=sys.stderr, flush=True)
                return ExitCode.STORAGE
            taken_over = superseded(self.config.checkpoint.location, self.run_marker.run_id)
            if taken_over is not None:  # the planner or the sink stopped it: that is the one line to say
                print(f"forwarder: {taken_over}", file=sys.stderr, flush=True)
                return ExitCode.SUPERSEDED
            message = exc.getMessage() if hasattr(exc, "getMessage") else str(exc)
            unwritable = features.unwritable_in(message)
            if unwritable is not None:  # the table changed under the job: nothing of the batch committed
                print(f"forwarder: {unwritable}", file=sys.stderr, flush=True)
                return ExitCode.CONFIG
            print(f"forwarder: the query failed: {message}", file=sys.stderr, flush=True)
            failed = failed_batch(exc)
            if failed:
                print(f"forwarder: the failed micro-batch covers {failed}", file=sys.stderr, flush=True)
            return ExitCode.FAILED
        self._report(query, reporter, status_path)
        headline = (f"forwarder stopped ({reason}) after {time.monotonic() - started:.1f}s: "
                    f"{reporter.batches} batches, {reporter.rows} rows forwarded in this run")
        if self.dead_letters is not None:
            headline += dead_letters_note(sum(self.dead_letters.total.values()),
                                          self.config.sink.dead_letters_table or self.dead_letters_path or "")
        return self._finish(status_path, headline)

    def _report(self, query: StreamingQuery, reporter: ProgressReporter, status_path: str) -> None:
        letters = self.dead_letters
        progresses = self.progress(query)
        status = PlannerStatus.read(status_path)
        if status is not None:
            self.planner_events.replay(status.events)
        latencies = self.gate_latency.observe(progresses, status)
        self.monitoring.observe(query.isActive, progresses, status, None if letters is None else letters.total,
                                latencies)
        if not self.config.logging.progress:
            return
        for line in reporter.update(progresses, status, None if letters is None else letters.by_batch,
                                    gate_latency=self.gate_latency.quantiles()):
            print(line, flush=True)

    def progress(self, query: StreamingQuery) -> list[dict[str, Any]]:
        """The query's recent progress reports (those Spark keeps), `numInputRows` (and on the
        direct write path the sink's `numOutputRows`) counting the Kafka records read; each report
        read from the JVM and parsed once (at 1,024 partitions a report is three offset maps of
        1,024 entries, and Spark keeps 100)."""
        since = progress_since(query, self._newest_progress)
        if since is None:  # Spark Connect: every report, each time
            return [self._counted(json.loads(p.json)) for p in query.recentProgress]
        fresh, kept = since
        self._progress = (self._progress + [self._counted(json.loads(text)) for text in fresh])[-kept:] if kept else []
        if self._progress:
            self._newest_progress = (str(self._progress[-1]["runId"]), str(self._progress[-1]["timestamp"]))
        return list(self._progress)

    def _counted(self, report: dict[str, Any]) -> dict[str, Any]:
        report["numInputRows"] = self._input_rows(report)
        if self.direct_initial is not None and isinstance(report.get("sink"), dict):
            report["sink"]["numOutputRows"] = report["numInputRows"]  # the sink's output rows are files there too
        return report

    def _input_rows(self, report: Mapping[str, Any]) -> int:
        """A batch's Kafka records: Spark's count of the source's rows (the sources' sum: Spark
        Connect's report lacks the aggregate), or on the direct write path, where those rows are
        the files written, the offsets the batch advanced (records and any transaction markers or
        compacted-away offsets between them)."""
        sources = report.get("sources") or [{}]
        counted = int(report.get("numInputRows", sum(int(s.get("numInputRows") or 0) for s in sources)))
        if self.dead_letters is not None:
            return self.dead_letters.input_rows(int(report["batchId"]), counted)
        if self.direct_initial is None:
            return counted
        start, end = sources[0].get("startOffset"), sources[0].get("endOffset")
        if start in (None, "null"):
            start = self._direct_initial_offsets()
        if not start or end in (None, "null"):
            return 0
        first, last = parse_offsets_json(start), parse_offsets_json(end)
        return sum(max(0, offset - first.get(tp, offset)) for tp, offset in last.items())

    def _direct_initial_offsets(self) -> str | None:
        """The first batch's start offsets (the source's kept file, which never changes while the
        query runs): read once, not at every progress report (each read is two requests on S3)."""
        if self._initial_offsets_text is None and self.direct_initial is not None:
            self._initial_offsets_text = read_text(self.direct_initial)
        return self._initial_offsets_text

    def _finish(self, status_path: str, headline: str) -> int:
        path = self.table_path
        print(format_summary(self.config.sink.address, None if path is None else table_summary(path),
                             PlannerStatus.read(status_path), headline, self.config.logging.partition_table_rows),
              flush=True)
        return ExitCode.OK


def embedded_world(config: ForwarderConfig) -> EmbeddedWorld:
    """The embedded broker, producer and simulated leader of `config.embedded` (not started)."""
    embedded = config.embedded
    assert embedded is not None
    world = EmbeddedWorld(
        events_topic=config.source.topics[0],
        commit_log_topic=config.source.commit_log_topic or "commit-log",
        leader_group=config.source.commit_groups[0],
        partitions=embedded.partitions,
        events_per_second=embedded.events_per_second,
        event_bytes=embedded.event_bytes,
        leader_lag=embedded.leader_lag,
        leader_commit_interval=embedded.leader_commit_interval,
        log_level=config.logging.level,
    )
    logger.info("embedded world: broker, producer at %s events/s, leader %r lagging %.1fs",
                embedded.events_per_second, config.source.commit_groups[0], embedded.leader_lag)
    return world


def failed_batch(exc: BaseException) -> str | None:
    """The Kafka offsets of the micro-batch a query failed in, e.g. `events[0] offsets [5, 9)`,
    from the JVM's StreamingQueryException (one JSON, or `-`, per source in `[...]`); None
    when unknown (Spark Connect, or a failure outside a batch)."""
    offsets = failed_batch_offsets(exc)
    if offsets is None:
        return None
    try:
        start, end = (text[1:-1] for text in offsets)
        first = {} if start == "-" else parse_offsets_json(start)
        last = parse_offsets_json(end)
    except ValueError:  # any other shape (several sources, not Kafka's): nothing to add to the error
        return None
    ranges = []
    for (topic, partition), stop in sorted(last.items()):
        begin = first.get((topic, partition))
        if begin is None:
            ranges.append(f"{topic}[{partition}] offsets below {stop}")
        elif begin != stop:
            ranges.append(str(OffsetRange(topic, partition, begin, stop)))
    return ", ".join(ranges) or None
