"""Stopping a query after the batch in flight: on SIGTERM/SIGINT (in Python and the JVM), or when asked."""

from __future__ import annotations

import logging
import signal
import threading
import time

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from synclib.compat import pyspark as spark_compat
from synclib.compat.py4j import JvmSignalHandler

logger = logging.getLogger("synclib.forwarder")


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
        self._jvm_handler: JvmSignalHandler | None = None

    def install(self, spark: SparkSession) -> None:
        """Call after the SparkSession exists (SparkContext installs its own SIGINT handler)."""
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._handle)
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


def stop_after_batch_in_flight(spark: SparkSession, query: StreamingQuery, timeout_s: float) -> None:
    """Stop `query` once the batch in flight has finished (at once between triggers), or after
    `timeout_s` whatever runs.

    A query falling behind its trigger starts the next batch right away; that one is then
    interrupted before its Delta commit and replayed, exactly once, at the next start.
    """
    def last() -> tuple[int, str] | None:
        progress = query.lastProgress
        return None if progress is None else (progress.batchId, progress.timestamp)

    in_flight = last()
    deadline = time.monotonic() + timeout_s
    while query.isActive and query.status["isTriggerActive"] and last() == in_flight and time.monotonic() < deadline:
        time.sleep(0.02)
    # Stopping between batches cancels the query's job group with no job in it, which Spark's
    # DAGScheduler reports as a warning ("Failed to cancel job group ... Cannot find active
    # jobs for it") at every clean stop: only that logger, only now, says errors alone.
    view = spark_compat.jvm(spark, "a clean stop without DAGScheduler's warning about an empty job group")
    if view is not None:
        log4j = view.org.apache.logging.log4j
        log4j.core.config.Configurator.setLevel("org.apache.spark.scheduler.DAGScheduler", log4j.Level.ERROR)
    query.stop()
