"""A Spark standalone cluster on this machine, started from PySpark's own jars as a user deploys
one: a master and `workers` workers (`spark-class org.apache.spark.deploy.master.Master` and
`...deploy.worker.Worker spark://...`), on free localhost ports, each worker with `cores` cores
and `memory` for its executor.

    with standalone_cluster(2, logs_dir) as cluster:
        spark = SparkSession.builder.config(map=cluster.session_conf()).getOrCreate()

`jobs/benchmark.py --standalone-workers 2` does this: the benchmark's Spark work then runs in
executors (one per worker) instead of local[2] threads. Start-up is bounded: the master's web UI
JSON is polled until every worker is ALIVE, and a daemon that exits or a deadline that passes
raises with the tail of its log. The daemons are stopped on leaving the block, on any failure
or Ctrl-C, and die with this process if it is killed (synclib.embedded.broker.tied_to_this_process). Their logs, and the
executors' (each worker's --work-dir), stay under `logs_dir`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.procmem import descendants, stat_fields
from synclib.embedded.broker import LOOPBACK, free_port, tied_to_this_process

logger = logging.getLogger(__name__)

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
START_TIMEOUT_S = 90.0  # JVM start-up of three daemons on a busy two-core machine
STOP_TIMEOUT_S = 20.0
POLL_S = 0.25
REPOSITORY = str(Path(__file__).resolve().parent.parent)  # synclib/, harness/ and benchmarks/ live here


def spark_home() -> str:
    """SPARK_HOME of the installed PySpark (bin/spark-class, jars/): the one spark-submit or
    spark-submit.sh set (the latter's links to it, without python/lib/pyspark.zip), else pip's
    package directory."""
    import pyspark

    return os.environ.get("SPARK_HOME") or os.path.dirname(os.path.abspath(pyspark.__file__))


def master_command(home: str, port: int, ui_port: int) -> list[str]:
    return [os.path.join(home, "bin", "spark-class"), MASTER_CLASS,
            "--host", LOOPBACK, "--port", str(port), "--webui-port", str(ui_port)]


def worker_command(home: str, master_url: str, ui_port: int, cores: int, memory: str, work_dir: str) -> list[str]:
    """A worker offering `cores` and `memory` to executors; they run (and log) in `work_dir`."""
    return [os.path.join(home, "bin", "spark-class"), WORKER_CLASS,
            "--host", LOOPBACK, "--webui-port", str(ui_port), "--cores", str(cores), "--memory", memory,
            "--work-dir", work_dir, master_url]


def daemon_env(home: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """The daemons' environment: this PySpark as SPARK_HOME, localhost only."""
    env = dict(os.environ if base is None else base)
    env.update(SPARK_HOME=home, SPARK_LOCAL_IP=LOOPBACK)
    return env


def session_conf(master_url: str, workers: int, cores: int, memory: str, python: str = sys.executable,
                 python_path: str = REPOSITORY) -> dict[str, str]:
    """The Spark session's settings for the cluster.

    Executors are children of the workers, not of this process: they get the venv's Python
    (`python`, which has pyarrow, kafka-python and deltalake) for their Python workers and the
    repository (`python_path`) on PYTHONPATH, so the executors import the same synclib as the
    driver (spark-submit.sh also ships it as a zip). One executor per worker takes all its cores
    and memory, and the session waits for every executor before its first job (bounded by
    Spark's own wait), so no phase is timed while executors still register.
    """
    return {
        "spark.master": master_url,
        "spark.driver.host": LOOPBACK,
        "spark.pyspark.python": python,
        "spark.executorEnv.PYTHONPATH": python_path,
        "spark.executor.cores": str(cores),
        "spark.executor.memory": memory,
        "spark.cores.max": str(workers * cores),
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s",
    }


def _started(pid: int) -> str | None:
    """The start time of a running process (/proc/<pid>/stat), which tells it from a later one
    with the same pid; None when it is gone or a zombie (spark-class's launcher subshell)."""
    fields = stat_fields(pid)
    return None if fields is None or fields[0] == "Z" else fields[19]


def _tail(path: str, lines: int = 20) -> str:
    try:
        with open(path, errors="replace") as log:
            return "".join(log.readlines()[-lines:])
    except OSError:
        return ""


@dataclass
class Daemon:
    name: str  # master, worker-1, ...
    process: subprocess.Popen[bytes]
    log_path: str

    def check(self) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(f"the standalone {self.name} exited with {self.process.returncode}; "
                               f"{self.log_path}:\n{_tail(self.log_path)}")


@dataclass
class StandaloneCluster:
    master_url: str
    ui_url: str
    workers: int
    cores: int
    memory: str
    logs_dir: str
    daemons: list[Daemon] = field(default_factory=list)

    def session_conf(self) -> dict[str, str]:
        return session_conf(self.master_url, self.workers, self.cores, self.memory)

    def roots(self) -> dict[int, str]:
        """pid -> role of the daemons: the roots of the process trees procmem counts beside the
        driver's (the executors and their Python workers are the workers' children)."""
        return {d.process.pid: "standalone-master" if d.name == "master" else "standalone-worker"
                for d in self.daemons}

    def state(self) -> dict[str, object]:
        """The master's view (its web UI's JSON): status, aliveworkers, workers, ..."""
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=5) as response:
            state: dict[str, object] = json.load(response)
            return state

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Until the master is ALIVE with every worker registered; raises if a daemon exits or
        `timeout_s` passes."""
        deadline = time.monotonic() + timeout_s
        seen: object = "no answer"
        while True:
            for daemon in self.daemons:
                daemon.check()
            with contextlib.suppress(OSError, ValueError):  # not listening yet / half-written JSON
                state = self.state()
                seen = {k: state.get(k) for k in ("status", "aliveworkers")}
                if state.get("status") == "ALIVE" and state.get("aliveworkers") == self.workers:
                    return
            if time.monotonic() > deadline:
                logs = "\n".join(f"{d.log_path}:\n{_tail(d.log_path, 8)}" for d in self.daemons)
                raise TimeoutError(f"the standalone cluster was not ready in {timeout_s:.0f}s "
                                   f"(master: {seen}); logs:\n{logs}")
            time.sleep(POLL_S)

    def start(self, name: str, command: Sequence[str], env: dict[str, str]) -> None:
        log_path = os.path.join(self.logs_dir, f"{name}.log")
        with open(log_path, "ab") as log:  # the child keeps its own descriptor
            process = subprocess.Popen(tied_to_this_process(command), stdin=subprocess.DEVNULL, stdout=log,
                                       stderr=subprocess.STDOUT, env=env)
        self.daemons.append(Daemon(name, process, log_path))

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Workers first (each kills its executors on SIGTERM), then the master; whatever is left
        of their process trees after `timeout_s` is killed."""
        own = {d.process.pid for d in self.daemons}
        left = {pid: _started(pid) for daemon in self.daemons for pid in descendants(daemon.process.pid)
                if pid not in own}
        for daemon in sorted(self.daemons, key=lambda d: d.name == "master"):
            if daemon.process.poll() is None:
                daemon.process.terminate()
                try:
                    daemon.process.wait(timeout_s)
                except subprocess.TimeoutExpired:
                    logger.warning("standalone %s did not stop in %.0fs: killed", daemon.name, timeout_s)
                    daemon.process.kill()
                    daemon.process.wait()
        for pid, started in left.items():  # executors or their Python workers left over, if any
            if started is not None and _started(pid) == started:  # the same process, still running
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
                    logger.warning("killed pid %d, left over by the standalone cluster", pid)


@contextlib.contextmanager
def standalone_cluster(workers: int, logs_dir: str, cores: int = 1, memory: str = "1g",
                       timeout_s: float = START_TIMEOUT_S) -> Iterator[StandaloneCluster]:
    """A running master with `workers` registered workers; stopped on leaving, however."""
    home = spark_home()
    os.makedirs(logs_dir, exist_ok=True)
    port, ui_port = free_port(), free_port()
    cluster = StandaloneCluster(f"spark://{LOOPBACK}:{port}", f"http://{LOOPBACK}:{ui_port}", workers, cores, memory,
                                logs_dir)
    env = daemon_env(home)
    try:
        cluster.start("master", master_command(home, port, ui_port), env)
        for index in range(1, workers + 1):
            work_dir = os.path.join(logs_dir, f"worker-{index}")
            os.makedirs(work_dir, exist_ok=True)
            cluster.start(f"worker-{index}", worker_command(home, cluster.master_url, free_port(), cores, memory,
                                                            work_dir), env)
        cluster.wait_ready(timeout_s)
        logger.warning("standalone cluster %s: %d workers x %d cores, %s; logs in %s",
                       cluster.master_url, workers, cores, memory, logs_dir)
        yield cluster
    finally:
        cluster.stop()
