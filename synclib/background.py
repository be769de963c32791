"""`BackgroundThread`: the start/stop lifecycle of a daemon thread, shared by the leader trackers,
the embedded simulators, Delta maintenance and the benchmarks' samplers."""

from __future__ import annotations

import logging
import threading
from typing import TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T", bound="BackgroundThread")


class BackgroundThread:
    """Runs `_work` on a daemon thread from `start()` (or entering a `with` block). `stop()` (or
    leaving the block) sets `_stopping`, which `_work` watches, and waits `stop_timeout_s` at most
    (None: until the thread ends). What kills the thread is logged and passed to `_died`."""

    stop_timeout_s: float | None = None

    def __init__(self, name: str) -> None:
        self.name = name
        self.failure: BaseException | None = None  # what killed the thread
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self: T) -> T:
        if self._thread is not None:
            raise RuntimeError(f"{self.name} already started")
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> bool:
        """Ask the thread to end and wait for it; True if it has ended (or never started)."""
        self._stopping.set()
        return self._thread is None or self.join(self.stop_timeout_s)

    def join(self, timeout_s: float | None = None) -> bool:
        """Wait for the thread to end; True if it has."""
        if self._thread is None:
            raise RuntimeError(f"{self.name} not started")
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def __enter__(self: T) -> T:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _work(self) -> None:
        raise NotImplementedError

    def _died(self, failure: BaseException) -> None:
        """On the dying thread: keep what killed it in `failure`."""
        self.failure = failure

    def _run(self) -> None:
        try:
            self._work()
        except BaseException as exc:  # noqa: BLE001 - any death must surface to callers
            logger.error("%s died: %r", self.name, exc)
            self._died(exc)
