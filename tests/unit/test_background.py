import threading

import pytest

from synclib.background import BackgroundThread


class Ticker(BackgroundThread):
    """Counts until stopped; dies with `fail` once `ticks` reach `die_at`."""

    def __init__(self, die_at: int | None = None) -> None:
        super().__init__("ticker")
        self.ticks = 0
        self.ticked = threading.Event()
        self._die_at = die_at

    def _work(self) -> None:
        while not self._stopping.wait(0.001):
            self.ticks += 1
            self.ticked.set()
            if self.ticks == self._die_at:
                raise ValueError("fail")


def test_runs_between_start_and_stop() -> None:
    with Ticker() as ticker:
        assert ticker.ticked.wait(5)
        with pytest.raises(RuntimeError, match="ticker already started"):
            ticker.start()
    assert ticker.join(0) and ticker.failure is None
    assert Ticker().stop()  # never started: nothing to wait for


def test_what_kills_the_thread_is_kept() -> None:
    ticker = Ticker(die_at=3).start()

    assert ticker.join(5)
    assert isinstance(ticker.failure, ValueError) and ticker.ticks == 3
