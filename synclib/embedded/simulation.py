"""What the embedded world's simulators share: a worker thread that reports its death, and a
way of sending records after which the embedded broker reports exact high watermarks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kafka import KafkaProducer

from synclib.background import BackgroundThread

Headers = list[tuple[str, bytes]]
Record = tuple[bytes | None, bytes, Headers]
SEND_TIMEOUT_S = 60.0


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


class Worker(BackgroundThread):
    """A `BackgroundThread` running `_work`; a failure is raised by `check()`, and by `stop()` if the
    thread does not end within `stop_timeout_s`."""

    stop_timeout_s = 10.0

    def stop(self) -> bool:
        """Ask the thread to stop and wait for it; raise `SimulationError` if it does not."""
        if not super().stop():
            raise SimulationError(f"{self.name} did not stop within {self.stop_timeout_s}s")
        return True

    def check(self) -> None:
        """Raise `SimulationError` if the thread has died."""
        failure = self.failure
        if failure is not None:
            raise SimulationError(f"{self.name} died: {type(failure).__name__}: {failure}") from failure
