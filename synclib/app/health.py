"""The health-check file (`monitoring.healthcheck_file`), for an orchestrator's liveness probe.

The job touches the file while its query is healthy: active, not failed, and its latest trigger
(a micro-batch that made progress, or a planning call that found the leader has committed
nothing new and correctly waits) ended no longer than `stall_after_s` ago. It is checked every
`logging.progress_interval` (1s by default), so a healthy job touches it at least that often
once its first trigger has run. It stops being touched when the query fails, stops, or goes
longer than `stall_after_s` without a trigger (a stuck batch, a planner stalled past the
source's deadlines); a killed job cannot touch it. A probe checks the file's age, e.g.
`test $(( $(date +%s) - $(stat -c %Y FILE) )) -lt 30`.

Evidence of a trigger comes from plain data (Spark's progress JSON, the planner's status), so
this module needs no Spark.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from synclib.source.status import PlannerStatus

logger = logging.getLogger(__name__)


def trigger_end_time(progress: Mapping[str, Any]) -> float | None:
    """When the trigger a progress report describes ended (its start plus its duration), as
    `time.time()`; None when the report has no parsable timestamp."""
    try:
        started = dt.datetime.strptime(str(progress["timestamp"]), "%Y-%m-%dT%H:%M:%S.%f%z")
    except (KeyError, ValueError):
        return None
    duration_ms = (progress.get("durationMs") or {}).get("triggerExecution") or 0
    return started.timestamp() + float(duration_ms) / 1000.0


def last_trigger_time(progresses: Sequence[Mapping[str, Any]], status: PlannerStatus | None) -> float | None:
    """The newest evidence of a trigger: a progress report's end, or the planner's status
    (rewritten at every planning call, so also while the query waits on the leader)."""
    times = [t for t in (trigger_end_time(p) for p in progresses) if t is not None]
    if status is not None and status.updated_at is not None:
        times.append(status.updated_at)
    return max(times, default=None)


class HealthCheck:
    """Touches `path` for each healthy observation; see the module docstring."""

    def __init__(self, path: str, stall_after_s: float, clock: Callable[[], float] = time.time) -> None:
        if stall_after_s <= 0:
            raise ValueError(f"stall_after_s must be positive, not {stall_after_s}")
        self.path = os.path.abspath(path)
        self.stall_after_s = stall_after_s
        self._clock = clock
        self._healthy: bool | None = None

    def start(self) -> None:
        """Remove the file a previous run left (so it cannot look healthy) and make its directory."""
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            os.remove(self.path)

    def observe(self, *, active: bool, trigger_at: float | None) -> bool:
        """Touch the file when the query is `active` (not failed, not stopped) and its latest
        trigger ended at most `stall_after_s` ago; return whether it was touched."""
        stalled_for = None if trigger_at is None else self._clock() - trigger_at
        healthy = active and stalled_for is not None and stalled_for <= self.stall_after_s
        if healthy:
            with open(self.path, "a"):
                pass
            os.utime(self.path)
        elif self._healthy and stalled_for is not None and stalled_for > self.stall_after_s:
            logger.warning("health check: no trigger for %.0fs (limit %.0fs): %s is no longer touched",
                           stalled_for, self.stall_after_s, self.path)
        self._healthy = healthy
        return healthy
