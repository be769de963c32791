"""SIGTERM/SIGINT for the forwarder: stop after the batch in flight, in Python and the JVM."""

from __future__ import annotations

import logging
import signal
import threading

from pyspark.sql import SparkSession

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
