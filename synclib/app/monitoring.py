"""What the running job exposes to operators (`monitoring` in the config): the health-check
file (`synclib.app.health`) and the Prometheus endpoint (`synclib.app.metrics`), both fed from
the job's progress loop with plain data (Spark's progress JSON, the planner's status)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

from synclib.app.health import HealthCheck, last_trigger_time
from synclib.app.metrics import ForwarderMetrics
from synclib.source.status import PlannerStatus


class Monitoring:
    """A context for one run: `__enter__` prepares the health-check file and serves the metrics
    (each only when configured), `observe` updates both, `__exit__` stops serving."""

    def __init__(self, healthcheck_file: str | None, metrics_port: int | None, stall_after_s: float) -> None:
        self.health = None if healthcheck_file is None else HealthCheck(healthcheck_file, stall_after_s)
        self.metrics = None if metrics_port is None else ForwarderMetrics()
        self._port = metrics_port

    def __enter__(self) -> Monitoring:
        if self.health is not None:
            self.health.start()
        if self.metrics is not None and self._port is not None:
            self.metrics.serve(self._port)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self.metrics is not None:
            self.metrics.close()

    def observe(self, active: bool, progresses: Sequence[Mapping[str, Any]], status: PlannerStatus | None,
                dead_letters: Mapping[str, int] | None = None,
                gate_latencies: Sequence[tuple[float, int]] = ()) -> None:
        """One look at the query: whether it is `active`, its recent progress reports, the
        planner's status (None when not readable, e.g. a Spark Connect server elsewhere), this
        run's dead letters by topic (with `sink.dead_letters`), the gate latencies of the batches
        new since the last look (`synclib.app.gate_latency`)."""
        if self.health is not None:
            self.health.observe(active=active, trigger_at=last_trigger_time(progresses, status))
        if self.metrics is not None:
            self.metrics.observe(progresses, status, dead_letters, gate_latencies)

    def maintenance_run(self) -> None:
        """Count a table maintenance pass (the maintenance thread's hook)."""
        if self.metrics is not None:
            self.metrics.maintenance_run()
