"""The embedded default's world: a local broker, and the simulation (the events producer and the
simulated leader, `synclib.embedded.world.simulate`) in a process of its own.

The simulation's Kafka clients run their network loops in Python threads. In the driver they
shared its CPU and GIL with the planner, py4j and Spark's Python machinery, and with hundreds of
partitions kafka-python reported its event loop blocked for 0.1-0.5 s. Its own process gives
them their own interpreter. The process is tied to its starter (`tied_to_this_process`): it gets
SIGTERM when the driver dies, even by SIGKILL, and on SIGTERM it stops the producer and the
leader cleanly. It runs in a session of its own, so Ctrl-C reaches the job, which stops it after
the query. Run as `python -m synclib.embedded.default_world SPEC` (SPEC: `simulate`'s arguments
and the log level, JSON); it prints `READY` on stdout once both topics exist and both simulators
run, and logs to stderr, which it shares with the driver.
"""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from synclib.embedded.broker import EmbeddedBroker, terminate, tied_to_this_process
from synclib.embedded.simulation import SimulationError
from synclib.embedded.world import simulate
from synclib.logs import configure_logging

logger = logging.getLogger(__name__)

READY = "READY"
START_TIMEOUT_S = 120.0  # a Python start, two topics and two clients, on a loaded machine
STOP_TIMEOUT_S = 30.0  # the producer's and the leader's own stop timeouts, and some
CHECK_INTERVAL_S = 1.0


class SimulationProcess:
    """`simulate(**arguments)` in a child process tied to this one."""

    def __init__(self, arguments: dict[str, Any], log_level: str) -> None:
        self._spec = json.dumps({"simulate": arguments, "log_level": log_level})
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError("the embedded simulation is not started")
        return self._process.pid

    def start(self, timeout_s: float = START_TIMEOUT_S) -> SimulationProcess:
        """Start the process and wait until it says it is ready; raise `SimulationError` if it ends or
        stays silent for `timeout_s` first."""
        self._process = subprocess.Popen(
            tied_to_this_process([sys.executable, "-m", __name__, self._spec]),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            start_new_session=True,  # Ctrl-C stops the job gracefully, and the job stops the simulation
            env={**os.environ, "PYTHONPATH": os.pathsep.join(path for path in sys.path if path)},
        )
        assert self._process.stdout is not None
        deadline = time.monotonic() + timeout_s
        line = b""
        while not line.endswith(b"\n") and self._process.poll() is None and time.monotonic() < deadline:
            if select.select([self._process.stdout], [], [], 0.1)[0]:
                line += os.read(self._process.stdout.fileno(), 256)
        if line.strip() != READY.encode():
            code = self._process.poll()
            self.stop()
            what = f"exited with code {code}" if code is not None else f"was not ready in {timeout_s:.0f}s"
            said = f", after printing {line!r}" if line.strip() else ""
            raise SimulationError(f"the embedded simulation (pid {self.pid}) {what}{said}; its error is in the "
                                  "job's log")
        logger.info("embedded simulation (pid %d): producer and leader running", self._process.pid)
        return self

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int | None:
        """Stop the producer and the leader (SIGTERM), SIGKILL after `timeout_s`; a simulation that had
        died is reported. Returns the process's exit code (None: never started)."""
        if self._process is None:
            return None
        code = self._process.poll()
        terminate(self._process, timeout_s)
        if code not in (None, 0):
            logger.warning("the embedded simulation (pid %d) had exited with code %d; its error is in the log "
                           "above", self._process.pid, code)
        return self._process.returncode


class EmbeddedWorld:
    """The embedded default's world: a local broker, the events and commit-log topics, a
    producer at `events_per_second` and a leader group committing with `leader_lag`, the last
    two in a `SimulationProcess`."""

    def __init__(
        self,
        *,
        events_topic: str,
        commit_log_topic: str,
        leader_group: str,
        partitions: int,
        events_per_second: float,
        event_bytes: int,
        leader_lag: float,
        leader_commit_interval: float,
        log_level: str = "INFO",
    ) -> None:
        self.broker = EmbeddedBroker()
        self._simulation_arguments = {
            "events_topic": events_topic, "commit_log_topic": commit_log_topic, "partitions": partitions,
            "rate": events_per_second, "event_bytes": event_bytes, "group": leader_group, "lag": leader_lag,
            "commit_interval": leader_commit_interval,
        }
        self._log_level = log_level
        self.simulation: SimulationProcess | None = None

    @property
    def bootstrap_servers(self) -> str:
        return self.broker.bootstrap_servers

    def start(self) -> EmbeddedWorld:
        self.broker.start()
        try:
            self.simulation = SimulationProcess({"bootstrap_servers": self.bootstrap_servers,
                                                 **self._simulation_arguments}, self._log_level).start()
        except BaseException:
            self.broker.stop()
            raise
        return self

    def stop(self) -> None:
        if self.simulation is not None:
            self.simulation.stop()
        self.broker.stop()

    def __enter__(self) -> EmbeddedWorld:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def main(argv: Sequence[str]) -> int:
    """The child: run the simulation until SIGTERM, then stop it; exit 1 if a simulator dies."""
    spec = json.loads(argv[0])
    configure_logging(spec["log_level"])
    starter = os.getppid()
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    producer, leader = simulate(**spec["simulate"])
    print(READY, flush=True)
    try:
        while not stopping.wait(CHECK_INTERVAL_S):
            producer.check()
            leader.check()
    finally:
        if os.getppid() == starter:  # else the driver died, and its broker with it: nothing to stop cleanly
            for worker in (producer, leader):
                worker.stop()
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
