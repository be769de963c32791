"""The forwarder job: config -> SparkSession -> synchronized_kafka source -> transform -> Delta.

Run as `spark-submit jobs/forwarder.py --config FILE [--set key=value ...] [--available-now]`.
Exit codes: 0 done, or stopped by SIGTERM/SIGINT after the batch in flight; 1 the query
failed; 2 invalid configuration (checked before Spark starts); 3 Kafka cannot be reached or
used with these settings, or a topic is missing (checked before Spark starts); 130 a second signal stopped
the job at once (the interrupted batch is replayed, exactly once, on restart).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any, cast

from synclib.app.monitoring import Monitoring
from synclib.app.preflight import EXIT_KAFKA, KafkaUnavailable, check_job_kafka
from synclib.settings import ConfigError, ForwarderConfig, load_config
from synclib.source.status import PlannerStatus

if TYPE_CHECKING:  # pyspark, deltalake: imported only once the configuration is valid
    from synclib.app.progress import ProgressReporter

logger = logging.getLogger("synclib.forwarder")

EXIT_OK, EXIT_FAILED, EXIT_CONFIG, EXIT_INTERRUPTED = 0, 1, 2, 130
GRACEFUL_STOP_TIMEOUT_S = 120.0
SPARK_LOG_LEVEL = "WARN"  # unless spark.log.level is set
EMBEDDED_MARKER = ".synclib-embedded"  # in the checkpoint and table of an embedded run

Transform = Callable[[Any], Any]


def parse_args(argv: Sequence[str], default_config: str | None = None) -> argparse.Namespace:
    """The job's arguments; `--config` is required unless the job file supplies a default."""
    parser = argparse.ArgumentParser(prog="forwarder.py", description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=default_config, required=default_config is None,
                        help="YAML config" + (" (default: %(default)s)" if default_config else ""))
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set source.max_offsets_per_trigger=1000")
    parser.add_argument("--available-now", action="store_true",
                        help="forward what is releasable now, then stop (Trigger.AvailableNow)")
    parser.add_argument("--healthcheck-file", metavar="PATH",
                        help="touch PATH while the query is healthy (monitoring.healthcheck_file)")
    return parser.parse_args(argv)


def load_transform(spec: str, config_path: str) -> Transform:
    """Import `module:function`; a typo is a configuration error, found before Spark starts."""
    module_name, _, function_name = spec.partition(":")
    try:
        function: object = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{config_path}: transform: cannot load {spec!r}: {exc}") from None
    if not callable(function):
        raise ConfigError(f"{config_path}: transform: {spec!r} is not callable")
    return cast(Transform, function)


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(max(logging.WARNING, logging.getLevelName(level)))
    logging.getLogger("py4j").setLevel(logging.WARNING)


class StopRequest:
    """SIGTERM/SIGINT: stop after the batch in flight; the same signal again stops at once.

    Under `spark-submit` the JVM (SparkSubmit) is the parent of this Python driver: `kill
    <pid>` reaches the JVM, whose default handler would shut Spark down under the query.
    `install` therefore also replaces the JVM's handlers (a py4j callback into Python; not on
    Spark Connect, whose client has no JVM). A second signal finds the previous handlers in
    place: Python raises KeyboardInterrupt, the JVM shuts down.
    """

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reason: str | None = None
        self._jvm_handler: Any | None = None  # a synclib.compat.py4j.JvmSignalHandler

    def install(self, spark: Any) -> None:
        """Call after the SparkSession exists (SparkContext installs its own SIGINT handler)."""
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._handle)
        from synclib.compat import pyspark as spark_compat
        from synclib.compat.py4j import JvmSignalHandler

        jvm = spark_compat.jvm(spark, "JVM signal handlers not installed (a signal to the JVM stops Spark at once)",
                               callbacks=True)
        if jvm is not None:
            self._jvm_handler = JvmSignalHandler.install(jvm, lambda name: self.request(f"SIG{name} received"))

    def request(self, reason: str) -> None:
        if not self.event.is_set():
            self.reason = reason
            logger.warning("%s: stopping after the batch in flight (again to stop at once)", reason)
        self.event.set()

    def _handle(self, signum: int, frame: object) -> None:
        signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)
        self.request(f"{signal.Signals(signum).name} received")


def main(argv: Sequence[str] | None = None, default_config: str | None = None) -> int:
    """Run the forwarder; `default_config` is the job file's own default (the repository's
    conf/local.yaml), since an installed package cannot know where a checkout is."""
    args = parse_args(sys.argv[1:] if argv is None else argv, default_config)
    overrides = list(args.overrides) + (["trigger.available_now=true"] if args.available_now else [])
    if args.healthcheck_file:
        overrides.append(f"monitoring.healthcheck_file={json.dumps(args.healthcheck_file)}")  # a YAML string
    try:
        config = load_config(args.config, overrides)
        transform = load_transform(config.transform, args.config) if config.transform else None
        replaced = start_embedded_afresh(config, args.config) if config.kafka.embedded else []
    except ConfigError as exc:
        print(f"forwarder: invalid configuration: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    configure_logging(config.logging.level)
    logger.info("configuration %s: %s", args.config, json.dumps(config.redacted(), default=str))
    if replaced:
        logger.info("embedded: a new world each run; removed the previous embedded run's %s", " and ".join(replaced))
    if not config.kafka.embedded:
        try:
            check_job_kafka(config)
        except KafkaUnavailable as exc:
            print(f"forwarder: {exc}", file=sys.stderr, flush=True)
            return EXIT_KAFKA
    try:
        return Forwarder(config, transform).run()
    except KeyboardInterrupt:
        print("forwarder: stopped at once by a second signal; the batch in flight is replayed "
              "on restart", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED


def start_embedded_afresh(config: ForwarderConfig, config_path: str) -> list[str]:
    """Prepare an embedded run's checkpoint and table; return what was removed.

    The embedded broker keeps its topics in memory, so every embedded run is a new world
    whose offsets restart at 0: a previous embedded run's checkpoint and table (recognised
    by the marker this leaves in them) are removed; any other existing location is refused.
    """
    locations = {"checkpoint.location": config.checkpoint.location, "sink.path": config.sink.path}
    for key, location in locations.items():
        if not os.path.isabs(location):
            raise ConfigError(f"{config_path}: {key}: embedded runs write to local paths, not {location!r}")
        if os.path.exists(location) and not os.path.exists(os.path.join(location, EMBEDDED_MARKER)):
            raise ConfigError(f"{config_path}: {key}: {location} exists and was not written by an embedded "
                              "run; embedded runs start afresh and replace their locations, so give them "
                              "their own (e.g. under data/)")
    removed = [location for location in locations.values() if os.path.exists(location)]
    for location in removed:
        shutil.rmtree(location, ignore_errors=True)  # one may hold the other
    for location in locations.values():
        os.makedirs(location, exist_ok=True)
        open(os.path.join(location, EMBEDDED_MARKER), "w").close()
    return removed


def _embedded_world(config: ForwarderConfig) -> Any:
    from synclib.embedded.world import EmbeddedWorld

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
    )
    logger.info("embedded world: broker, producer at %s events/s, leader %r lagging %.1fs",
                embedded.events_per_second, config.source.commit_groups[0], embedded.leader_lag)
    return world


class Forwarder:
    """One run of the streaming query, with progress output, a graceful stop and a summary."""

    def __init__(self, config: ForwarderConfig, transform: Transform | None) -> None:
        self.config = config
        self.transform = transform
        self.dead_letters: Any = None  # synclib.delta.dead_letters.DeadLetterBatches with sink.dead_letters
        source = config.source  # past the source's deadlines a query fails: a longer wait is a stall
        self.monitoring = Monitoring(config.monitoring.healthcheck_file, config.monitoring.metrics_port,
                                     stall_after_s=max(source.broker_timeout, source.commit_log_timeout,
                                                       source.read_stall_timeout) + config.trigger.processing_time)

    def run(self) -> int:
        spark = self._session()
        stop = StopRequest()
        stop.install(spark)
        with ExitStack() as resources:
            resources.enter_context(self.monitoring)
            bootstrap = self.config.kafka.bootstrap_servers
            run_for: float | None = None
            if self.config.kafka.embedded:
                assert self.config.embedded is not None
                bootstrap = resources.enter_context(_embedded_world(self.config)).bootstrap_servers
                from synclib.app.status import advertise_embedded_broker  # `python -m synclib status` finds it
                resources.enter_context(advertise_embedded_broker(self.config.checkpoint.location, bootstrap))
                run_for = self.config.embedded.run_for
            status_dir = resources.enter_context(tempfile.TemporaryDirectory(prefix="synclib-status-"))
            status_path = os.path.join(status_dir, "status.json")
            if stop.event.is_set():
                return self._finish(status_path, f"{stop.reason} before the query started")
            query = self._start(spark, bootstrap, status_path)
            resources.enter_context(self._maintenance(spark))
            return self._watch(query, stop, run_for, status_path)

    def _session(self) -> Any:
        from pyspark.sql import SparkSession

        from synclib.compat.pyspark import is_connect

        spark = SparkSession.builder.appName("synclib-forwarder").getOrCreate()
        if is_connect(spark):
            logger.info("Spark Connect session: Spark's log level is the server's (spark.log.level there)")
        elif not spark.sparkContext.getConf().contains("spark.log.level"):
            spark.sparkContext.setLogLevel(SPARK_LOG_LEVEL)
        return spark

    def source_options(self, bootstrap: str, status_path: str) -> dict[str, str]:
        from synclib.delta import checkpoint, table

        options = self.config.source_options(bootstrap)
        options["statusFile"] = status_path
        if self.config.sink.resume_from_table and checkpoint.query_id(self.config.checkpoint.location) is None:
            recorded = table.read_table_offsets(self.config.sink.path)
            if recorded:
                logger.info("new checkpoint on an existing table: resuming from the table's offsets %s",
                            json.dumps(recorded))
                options["startingOffsets"] = json.dumps(recorded)
        return options

    def _start(self, spark: Any, bootstrap: str, status_path: str) -> Any:
        from synclib.delta.writer import start_delta_stream
        from synclib.source.datasource import FORMAT_NAME, register

        register(spark)
        df = (spark.readStream.format(FORMAT_NAME)
              .options(**self.source_options(bootstrap, status_path)).load())
        if self.config.sink.dead_letters.enabled:  # the transform is applied per batch there
            return self._start_with_dead_letters(df)
        if self.transform is not None:
            df = self.transform(df)
        trigger = self.config.trigger
        return start_delta_stream(
            df,
            path=self.config.sink.path,
            checkpoint_location=self.config.checkpoint.location,
            engine=self.config.sink.engine,
            partition_by=self.config.sink.partition_by,
            partition_by_date=self.config.sink.partition_by_date,
            trigger={"availableNow": True} if trigger.available_now
            else {"processingTime": f"{int(trigger.processing_time * 1000)} milliseconds"},
            query_name="synclib_forwarder",
            log_checkpoints=not self.config.sink.maintenance.enabled,
        )

    def _start_with_dead_letters(self, df: Any) -> Any:
        """`sink.dead_letters`: rows the transform rejects or raises on go to a second table."""
        from synclib.delta.dead_letters import Limits, start_with_dead_letters

        sink, trigger = self.config.sink, self.config.trigger
        options = sink.dead_letters
        query, self.dead_letters = start_with_dead_letters(
            df, self.transform, path=sink.path, dead_letters_path=sink.dead_letters_path,
            checkpoint_location=self.config.checkpoint.location, error_column=options.error_column,
            limits=Limits(max_fraction=options.max_fraction, max_rows=options.max_rows),
            engine=sink.engine, partition_by=sink.partition_by, partition_by_date=sink.partition_by_date,
            trigger={"availableNow": True} if trigger.available_now
            else {"processingTime": f"{int(trigger.processing_time * 1000)} milliseconds"},
            query_name="synclib_forwarder", log_checkpoints=not sink.maintenance.enabled)
        return query

    def _maintenance(self, spark: Any) -> Any:
        """The sink's maintenance thread (`sink.maintenance`; a no-op context when disabled),
        each pass reported in the progress output and the log."""
        from synclib.delta import maintenance
        from synclib.delta.writer import DELTA_SPARK, resolve_engine

        options, path = self.config.sink.maintenance, self.config.sink.path
        if not options.enabled:
            return contextlib.nullcontext()
        on_pass = [lambda report: self.monitoring.maintenance_run()]
        if self.config.logging.progress:
            on_pass.append(lambda report: print(report.summary(), flush=True))
        spark_pass = None
        if resolve_engine(spark, self.config.sink.engine) == DELTA_SPARK:
            spark_pass = lambda: maintenance.spark_pass(spark, path, options)  # noqa: E731
        return maintenance.MaintenanceThread(path, options, on_pass=on_pass, pass_function=spark_pass)

    def _watch(self, query: Any, stop: StopRequest, run_for: float | None, status_path: str) -> int:
        from pyspark.errors import StreamingQueryException

        from synclib.app.progress import ProgressReporter

        reporter = ProgressReporter()
        started = time.monotonic()
        reason = "Trigger.AvailableNow: everything releasable at the start was forwarded"
        try:
            while not query.awaitTermination(self.config.logging.progress_interval):
                self._report(query, reporter, status_path)
                if stop.event.is_set():
                    reason = stop.reason or "stop requested"
                elif run_for is not None and time.monotonic() - started >= run_for:
                    reason = f"embedded.run_for ({run_for:g}s) elapsed"
                else:
                    continue
                self._stop_gracefully(query)
                break
            query.awaitTermination()
        except StreamingQueryException as exc:
            self._report(query, reporter, status_path)
            print(f"forwarder: the query failed: {exc.getMessage() if hasattr(exc, 'getMessage') else exc}",
                  file=sys.stderr, flush=True)
            failed = failed_batch(exc)
            if failed:
                print(f"forwarder: the failed micro-batch covers {failed}", file=sys.stderr, flush=True)
            return EXIT_FAILED
        self._report(query, reporter, status_path)
        headline = (f"forwarder stopped ({reason}) after {time.monotonic() - started:.1f}s: "
                    f"{reporter.batches} batches, {reporter.rows} rows forwarded in this run")
        if self.dead_letters is not None:
            from synclib.app.progress import dead_letters_note

            headline += dead_letters_note(sum(self.dead_letters.total.values()), self.config.sink.dead_letters_path)
        return self._finish(status_path, headline)

    def _report(self, query: Any, reporter: ProgressReporter, status_path: str) -> None:
        # numInputRows from the property: Spark Connect's progress JSON lacks the aggregate
        progresses = [{**json.loads(p.json), "numInputRows": p.numInputRows} for p in query.recentProgress]
        status = PlannerStatus.read(status_path)
        letters = self.dead_letters
        self.monitoring.observe(query.isActive, progresses, status, None if letters is None else letters.total)
        if not self.config.logging.progress:
            return
        for line in reporter.update(progresses, status, None if letters is None else letters.by_batch):
            print(line, flush=True)

    @staticmethod
    def _stop_gracefully(query: Any) -> None:
        """Stop once the batch in flight has finished (or at once between triggers).

        A query falling behind its trigger starts the next batch right away; that one is then
        interrupted before its Delta commit and replayed, exactly once, at the next start.
        """
        def last() -> tuple[int, str] | None:
            progress = query.lastProgress
            return None if progress is None else (progress.batchId, progress.timestamp)

        in_flight = last()
        deadline = time.monotonic() + GRACEFUL_STOP_TIMEOUT_S
        while (query.status["isTriggerActive"] and last() == in_flight
               and time.monotonic() < deadline):
            time.sleep(0.05)
        query.stop()

    def _finish(self, status_path: str, headline: str) -> int:
        from synclib.app.progress import format_summary
        from synclib.delta.table import table_summary

        path = self.config.sink.path
        print(format_summary(path, table_summary(path), PlannerStatus.read(status_path), headline), flush=True)
        return EXIT_OK


def failed_batch(exc: Any) -> str | None:
    """The Kafka offsets of the micro-batch a query failed in, e.g. `events[0] offsets [5, 9)`,
    from the JVM's StreamingQueryException (one JSON, or `-`, per source in `[...]`); None
    when unknown (Spark Connect, or a failure outside a batch)."""
    from synclib.compat.pyspark import failed_batch_offsets

    offsets = failed_batch_offsets(exc)
    if offsets is None:
        return None
    try:
        start, end = (text[1:-1] for text in offsets)
        first = {} if start == "-" else json.loads(start)
        last = json.loads(end)
    except Exception:  # noqa: BLE001 - any other shape: nothing to add to the error
        return None
    ranges = []
    for topic, partitions in sorted(last.items()):
        for partition, stop in sorted(partitions.items(), key=lambda item: int(item[0])):
            begin = first.get(topic, {}).get(partition)
            if begin is None:
                ranges.append(f"{topic}[{partition}] offsets below {stop}")
            elif begin != stop:
                ranges.append(f"{topic}[{partition}] offsets [{begin}, {stop})")
    return ", ".join(ranges) or None
