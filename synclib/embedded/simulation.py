"""What the embedded world's simulators share: a worker thread that reports its death, and a
way of sending records after which the embedded broker reports exact high watermarks."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import TypeVar

from kafka import KafkaProducer

logger = logging.getLogger(__name__)

Headers = list[tuple[str, bytes]]
Record = tuple[bytes | None, bytes, Headers]
SEND_TIMEOUT_S = 60.0

W = TypeVar("W", bound="Worker")


class SimulationError(RuntimeError):
    """A simulator thread died, or did not do what was asked in time."""


def send_ending_single(
    producer: KafkaProducer, topic: str, records: Mapping[int, Sequence[Record]], timeout_s: float = SEND_TIMEOUT_S
) -> dict[int, int]:
    """Send records per partition and wait for all of them, the last of each partition alone
    in its own batch. Returns the next offset of each partition, as acknowledged."""
    failures: list[BaseException] = []
    for partition, items in records.items():
        for key, value, headers in items[:-1]:
            producer.send(topic, key=key, value=value, partition=partition, headers=headers).add_errback(
                failures.append
            )
    producer.flush(timeout_s)
    if failures:
        raise failures[0]
    futures = [
        producer.send(topic, key=items[-1][0], value=items[-1][1], partition=partition, headers=items[-1][2])
        for partition, items in records.items()
        if items
    ]
    producer.flush(timeout_s)
    ends: dict[int, int] = {}
    for future in futures:
        metadata = future.get(0)
        ends[metadata.partition] = metadata.offset + 1
    return ends


class Worker:
    """A daemon thread running `_work`; a failure is kept and raised by `check()`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None

    def start(self: W) -> W:
        if self._thread is not None:
            raise RuntimeError(f"{self.name} already started")
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Ask the thread to stop and wait for it; raise `SimulationError` if it does not."""
        self._stopping.set()
        if self._thread is not None and not self.join(timeout_s):
            raise SimulationError(f"{self.name} did not stop within {timeout_s}s")

    def join(self, timeout_s: float | None = None) -> bool:
        """Wait for the thread to end; True if it has."""
        if self._thread is None:
            raise RuntimeError(f"{self.name} not started")
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    @property
    def error(self) -> BaseException | None:
        return self._failure

    def check(self) -> None:
        """Raise `SimulationError` if the thread has died."""
        failure = self._failure
        if failure is not None:
            raise SimulationError(f"{self.name} died: {type(failure).__name__}: {failure}") from failure

    def __enter__(self: W) -> W:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            self._work()
        except BaseException as exc:  # noqa: BLE001 - any death must surface to callers
            logger.error("%s died: %r", self.name, exc)
            self._failure = exc

    def _work(self) -> None:
        raise NotImplementedError
