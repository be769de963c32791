"""The forwarder job: config -> SparkSession -> synchronized_kafka source -> transform -> Delta.

Run as `spark-submit jobs/forwarder.py --config FILE [--set key=value ...] [--available-now]`.
Exit codes: 0 done or stopped by SIGTERM/SIGINT, 1 the query failed, 2 invalid configuration
(nothing started).
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import signal
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from typing import Any, Callable, Optional, Sequence

from synclib.config import ConfigError, ForwarderConfig, load_config

logger = logging.getLogger("synclib.forwarder")

EXIT_OK, EXIT_FAILED, EXIT_CONFIG = 0, 1, 2
DEFAULT_CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf", "local.yaml")
GRACEFUL_STOP_TIMEOUT_S = 120.0

Transform = Callable[[Any], Any]


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="forwarder.py", description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="YAML config (default: %(default)s)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set source.max_offsets_per_trigger=1000")
    parser.add_argument("--available-now", action="store_true",
                        help="forward what is releasable now, then stop (Trigger.AvailableNow)")
    return parser.parse_args(argv)


def load_transform(spec: str, config_path: str) -> Transform:
    """Import `module:function`; a typo is a configuration error, found before Spark starts."""
    module_name, _, function_name = spec.partition(":")
    try:
        function = getattr(importlib.import_module(module_name), function_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{config_path}: transform: cannot load {spec!r}: {exc}") from None
    if not callable(function):
        raise ConfigError(f"{config_path}: transform: {spec!r} is not callable")
    return function


def configure_logging(level: str) -> None:
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(max(logging.WARNING, logging.getLevelName(level)))
    logging.getLogger("py4j").setLevel(logging.WARNING)


class StopRequest:
    """Set by SIGTERM/SIGINT: the query stops after the batch in flight."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def install(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: object) -> None:
        logger.warning("%s received: stopping after the batch in flight", signal.Signals(signum).name)
        self.event.set()


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    overrides = list(args.overrides) + (["trigger.available_now=true"] if args.available_now else [])
    try:
        config = load_config(args.config, overrides)
        transform = load_transform(config.transform, args.config) if config.transform else None
    except ConfigError as exc:
        print(f"forwarder: invalid configuration: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    configure_logging(config.logging.level)
    logger.info("configuration %s: %s", args.config, json.dumps(config.redacted(), default=str))
    stop = StopRequest()
    stop.install()
    with ExitStack() as resources:
        bootstrap = config.kafka.bootstrap_servers
        run_for: Optional[float] = None
        if config.kafka.embedded:
            bootstrap = resources.enter_context(_embedded_world(config)).bootstrap_servers
            from synclib.status import advertise_embedded_broker  # `python -m synclib status` finds it
            resources.enter_context(advertise_embedded_broker(config.checkpoint.location, bootstrap))
            run_for = config.embedded.run_for
        status_dir = resources.enter_context(tempfile.TemporaryDirectory(prefix="synclib-status-"))
        return Forwarder(config, bootstrap, transform, os.path.join(status_dir, "status.json")).run(stop, run_for)


def _embedded_world(config: ForwarderConfig) -> Any:
    from synclib.simulation import EmbeddedWorld

    embedded = config.embedded
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
    """One run of the streaming query, with progress output and a graceful stop."""

    def __init__(self, config: ForwarderConfig, bootstrap: str, transform: Optional[Transform],
                 status_path: str) -> None:
        self.config = config
        self.bootstrap = bootstrap
        self.transform = transform
        self.status_path = status_path

    def source_options(self) -> dict[str, str]:
        from synclib import checkpoint, sink

        options = self.config.source_options(self.bootstrap)
        options["statusFile"] = self.status_path
        if self.config.sink.resume_from_table and checkpoint.query_id(self.config.checkpoint.location) is None:
            recorded = sink.read_table_offsets(self.config.sink.path)
            if recorded:
                logger.info("new checkpoint on an existing table: resuming from the table's offsets %s",
                            json.dumps(recorded))
                options["startingOffsets"] = json.dumps(recorded)
        return options

    def start(self) -> Any:
        from pyspark.sql import SparkSession

        from synclib import sink, source

        spark = SparkSession.builder.appName("synclib-forwarder").getOrCreate()
        spark.sparkContext.setLogLevel("WARN")
        source.register(spark)
        df = spark.readStream.format(source.FORMAT_NAME).options(**self.source_options()).load()
        if self.transform is not None:
            df = self.transform(df)
        trigger = self.config.trigger
        return sink.start_delta_stream(
            df,
            path=self.config.sink.path,
            checkpoint_location=self.config.checkpoint.location,
            engine=self.config.sink.engine,
            partition_by=self.config.sink.partition_by,
            partition_by_date=self.config.sink.partition_by_date,
            trigger={"availableNow": True} if trigger.available_now
            else {"processingTime": f"{int(trigger.processing_time * 1000)} milliseconds"},
            query_name="synclib_forwarder",
        )

    def run(self, stop: StopRequest, run_for: Optional[float]) -> int:
        from pyspark.errors import StreamingQueryException

        query = self.start()
        deadline = None if run_for is None else time.monotonic() + run_for
        printed = -1
        try:
            while query.isActive:
                if query.awaitTermination(self.config.logging.progress_interval):
                    break
                printed = self._print_progress(query, printed)
                if stop.event.is_set() or (deadline is not None and time.monotonic() >= deadline):
                    self._stop_gracefully(query)
            query.awaitTermination()
        except StreamingQueryException as exc:
            print(f"forwarder: the query failed: {exc.getMessage() if hasattr(exc, 'getMessage') else exc}",
                  file=sys.stderr)
            return EXIT_FAILED
        self._print_progress(query, printed)
        self._print_summary()
        return EXIT_OK

    def _status(self) -> Optional[dict[str, Any]]:
        try:
            with open(self.status_path) as status:
                return json.load(status)
        except (FileNotFoundError, ValueError):
            return None

    def _print_progress(self, query: Any, printed: int) -> int:
        from synclib.progress import format_batch

        if not self.config.logging.progress:
            return printed
        status = self._status()
        for progress in query.recentProgress:
            if progress.batchId > printed and progress.numInputRows is not None:
                print(format_batch(json.loads(progress.json), status), flush=True)
                printed = progress.batchId
        return printed

    @staticmethod
    def _stop_gracefully(query: Any) -> None:
        """Let the batch in flight finish (its Delta commit is atomic either way), then stop."""
        deadline = time.monotonic() + GRACEFUL_STOP_TIMEOUT_S
        while query.status["isTriggerActive"] and time.monotonic() < deadline:
            time.sleep(0.05)
        query.stop()

    def _print_summary(self) -> None:
        from synclib.progress import format_summary
        from synclib.sink import table_summary

        print(format_summary(self.config.sink.path, table_summary(self.config.sink.path), self._status()),
              flush=True)
