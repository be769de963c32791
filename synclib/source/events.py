"""The planner's log records, carried to the job through the status file.

Spark runs a Python source's planning in a process of its own, where nothing configures logging:
the gate's state changes, new partitions and the initial offsets would be dropped (INFO) or
printed bare (WARNING). `EventLog` keeps synclib's records of that process, numbered, for the
status file (`PlannerStatus.events`); `replay` logs the ones not seen yet again in the job's
driver, with their own time, logger and level, so they appear wherever the planner runs.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Sequence

from synclib.source.status import PlannerEvent

EVENTS_KEPT = 200  # the job reads the status file every second: a planner logs far fewer lines in one


class EventLog(logging.Handler):
    """A handler keeping the last `EVENTS_KEPT` records of INFO and above, numbered."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self._events: deque[PlannerEvent] = deque(maxlen=EVENTS_KEPT)
        self._seq = 0
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self._guard:
            self._seq += 1
            self._events.append(PlannerEvent(self._seq, record.created, record.levelname, record.name,
                                             record.getMessage()))

    def events(self) -> tuple[PlannerEvent, ...]:
        with self._guard:
            return tuple(self._events)

    @classmethod
    def install(cls, logger_name: str = "synclib") -> EventLog:
        """Keep the records of `logger_name` and its children in this process (INFO and above, not
        passed on to handlers above it, so Python's last-resort handler does not print them too)."""
        log = cls()
        logger = logging.getLogger(logger_name)
        logger.addHandler(log)
        if logger.getEffectiveLevel() > logging.INFO:
            logger.setLevel(logging.INFO)
        logger.propagate = False
        return log


class EventReplay:
    """Logs planner events once each, in order (a new planner numbers from 1 again)."""

    def __init__(self) -> None:
        self._last: PlannerEvent | None = None

    def replay(self, events: Sequence[PlannerEvent]) -> None:
        last = self._last
        if events and last is not None and not any(e == last for e in events) and events[-1].seq < last.seq:
            last = None  # a planner started afresh
        for event in events:
            if last is not None and event.seq <= last.seq:
                continue
            logger = logging.getLogger(event.logger)
            level = logging.getLevelName(event.level)
            if isinstance(level, int) and logger.isEnabledFor(level):
                record = logger.makeRecord(event.logger, level, "(planner)", 0, "%s", (event.message,), None)
                record.created = event.at
                record.msecs = (event.at % 1) * 1000
                logger.handle(record)
            last = event
        self._last = last
