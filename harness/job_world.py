"""The forwarder job under test and the Kafka world it runs against, for the crash harness, the
soak and job-level fault tests: `JobRun`, one `spark-submit jobs/forwarder.py` process session that can
be frozen, resumed and killed whole; `KafkaWorld`, an events topic with a live `EventProducer`
and a `SimulatedLeader` on its own embedded broker (or on a given one); the job's YAML config."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

from harness import jvm
from harness.procmem import stat_fields
from synclib.embedded.broker import EmbeddedBroker, tied_to_this_process
from synclib.embedded.leader import SimulatedLeader
from synclib.embedded.world import EventProducer, simulate
from synclib.settings.storage import is_s3

ROOT = Path(__file__).resolve().parent.parent
PYTHON = Path(sys.executable)  # the venv's: synclib and pyspark are installed there
SPARK_SUBMIT = PYTHON.parent / "spark-submit"
FORWARDER = ROOT / "jobs" / "forwarder.py"
DEAD_LETTERS = ROOT / "jobs" / "dead_letters.py"
SPARK_CONF = ("spark.ui.enabled=false", "spark.sql.shuffle.partitions=2")

T = TypeVar("T")

LEADER_GROUP = "snuba-consumers"
# The leader commits events this long after they arrive: well behind the producer and longer
# than a micro-batch, so a forwarder that ignored it would be caught with rows beyond it.
LEADER_LAG_S = 5.0


class HarnessError(AssertionError):
    """The harness could not do what it was asked (the job died, a window never came)."""


# --- the job as a process session ---------------------------------------------------------

def _session_pids(sid: int) -> set[int]:
    """Live (not zombie) processes of session `sid`."""
    pids = set()
    for entry in os.scandir("/proc"):
        fields = stat_fields(int(entry.name)) if entry.name.isdigit() else None
        if fields is not None and int(fields[3]) == sid and fields[0] not in ("Z", "X"):
            pids.add(int(entry.name))
    return pids


def _process_state(pid: int) -> str | None:
    fields = stat_fields(pid)
    return None if fields is None else fields[0]


def _signal(pids: Sequence[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def wait_for(condition: Callable[[], T], timeout_s: float = 30.0, what: str = "condition",
             job: JobRun | None = None, interval_s: float = 0.05) -> T:
    """Poll `condition` until it returns something truthy; fail with `what` at the deadline, or
    at once (with the job's last output) if `job` exits meanwhile."""
    deadline = time.monotonic() + timeout_s
    while True:
        if job is not None and job.returncode is not None:
            raise HarnessError(f"the job exited ({job.returncode}) while waiting for {what}\n{job.tail()}")
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise HarnessError(f"timed out after {timeout_s}s waiting for {what}; last value {result!r}")
        time.sleep(interval_s)


def classpath_options(config: Path) -> list[str]:
    """spark-submit options for the jars `config` needs beyond PySpark's, as ./spark-submit.sh
    always gives them: Delta's jars and session extension for `sink.engine: delta-spark` or a
    `sink.table` (none
    otherwise, so `auto` resolves to delta-rs as on a bare spark-submit), S3A's for an `s3://` or
    `s3a://` table or checkpoint."""
    try:
        loaded = yaml.safe_load(config.read_text())
    except (OSError, yaml.YAMLError):  # the tests of missing and invalid configs
        return []
    if not isinstance(loaded, dict):
        return []
    sink, checkpoint = (loaded.get(key) if isinstance(loaded.get(key), dict) else {} for key in ("sink", "checkpoint"))
    jars, options = [], []
    if sink.get("engine") == "delta-spark" or sink.get("table"):  # a table by name: Delta's catalog creates it
        jars += jvm.jars(jvm.DELTA)
        for key, value in jvm.DELTA_SESSION_CONF.items():
            options += ["--conf", f"{key}={value}"]
    if any(is_s3(str(location)) for location in (sink.get("path"), checkpoint.get("location"))):
        jars += jvm.jars(jvm.S3A)
    return (["--jars", ",".join(jars)] if jars else []) + options


class JobRun:
    """One `spark-submit jobs/forwarder.py` (or another synclib job file, `job`) process session,
    output in `<log_dir>/<name>.*`, working directory `log_dir` (what Spark makes in it, as a
    catalog's default `spark-warehouse`, stays with the run, out of the checkout)."""

    def __init__(self, config: Path, log_dir: Path, name: str, args: Sequence[str] = (),
                 env: Mapping[str, str] | None = None, job: Path = FORWARDER) -> None:
        self.stdout_path = log_dir / f"{name}.stdout"
        self.stderr_path = log_dir / f"{name}.stderr"
        scratch = log_dir / "tmp"  # Spark's and Python's temporary files, left behind by kills
        scratch.mkdir(exist_ok=True)
        command = [str(SPARK_SUBMIT), "--master", "local[2]"]
        for conf in (*SPARK_CONF, f"spark.local.dir={scratch}"):
            command += ["--conf", conf]
        command += [*classpath_options(config), str(job), "--config", str(config), *args]
        environment = {**os.environ, "PYSPARK_PYTHON": str(PYTHON), "PYSPARK_DRIVER_PYTHON": str(PYTHON),
                       "PYTHONPATH": str(ROOT), "TMPDIR": str(scratch), **(env or {})}
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self._process = subprocess.Popen(tied_to_this_process(command), cwd=log_dir, stdout=out, stderr=err,
                                             stdin=subprocess.DEVNULL, env=environment,
                                             start_new_session=True)
        self._frozen: set[int] = set()

    @property
    def pid(self) -> int:
        """The session leader: the spark-submit JVM."""
        return self._process.pid

    def pids(self) -> set[int]:
        """The live processes of the job's session."""
        return _session_pids(self._process.pid)

    @property
    def returncode(self) -> int | None:
        return self._process.poll()

    def wait(self, timeout_s: float) -> int:
        try:
            return self._process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise HarnessError(f"the job did not finish within {timeout_s:.0f}s\n{self.tail()}") from None

    def output(self) -> str:
        return self.stdout_path.read_text(errors="replace") + self.stderr_path.read_text(errors="replace")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.output().splitlines()[-lines:])

    def freeze(self) -> None:
        """SIGSTOP every process of the session, and wait until all of them are stopped."""
        while new := _session_pids(self._process.pid) - self._frozen:
            _signal(sorted(new), signal.SIGSTOP)
            self._frozen |= new
        wait_for(lambda: all(_process_state(p) in (None, "T", "t", "Z") for p in self._frozen),
                 10.0, "the frozen job to stop", interval_s=0.001)

    def thaw(self) -> None:
        _signal(sorted(self._frozen), signal.SIGCONT)
        self._frozen.clear()

    def kill(self) -> None:
        """SIGKILL the whole session and wait until none of it is left."""
        sid = self._process.pid
        wait_for(lambda: not _kill_all(sid), 30.0, "the killed job to go away", interval_s=0.02)
        self._process.wait(30)
        self._frozen.clear()

    def terminate(self) -> None:
        """SIGTERM the JVM (a graceful stop for the forwarder)."""
        if self.returncode is None:
            self._process.send_signal(signal.SIGTERM)


def _kill_all(sid: int) -> set[int]:
    pids = _session_pids(sid)
    _signal(sorted(pids), signal.SIGKILL)
    return pids


# --- the world: broker, topics, producer, leader ------------------------------------------

class KafkaWorld:
    """An events topic with a live producer and a leader group publishing its commit log."""

    group = LEADER_GROUP

    def __init__(self, bootstrap: str | None = None, rate: float = 150, event_bytes: int = 256,
                 partitions: int = 2) -> None:
        """On the broker at `bootstrap`, or on an `EmbeddedBroker` of its own; the producer
        writes `rate` events/s of `event_bytes` each."""
        self.broker = None if bootstrap else EmbeddedBroker()
        self._bootstrap = bootstrap
        self.rate, self.event_bytes, self.partitions = rate, event_bytes, partitions
        suffix = uuid.uuid4().hex[:8]
        self.events, self.commit_log = f"events-{suffix}", f"commit-log-{suffix}"
        self.producer: EventProducer | None = None
        self.leader: SimulatedLeader | None = None

    @property
    def bootstrap(self) -> str:
        if self.broker is not None:
            return self.broker.bootstrap_servers
        assert self._bootstrap is not None
        return self._bootstrap

    def start(self) -> KafkaWorld:
        if self.broker is not None:
            self.broker.start()
        self.producer, self.leader = simulate(self.bootstrap, self.events, self.commit_log, self.partitions,
                                              rate=self.rate, event_bytes=self.event_bytes, group=self.group,
                                              lag=LEADER_LAG_S, commit_interval=0.5)
        return self

    def config(self, directory: Path, **sections: Any) -> dict[str, Any]:
        return job_config(self.bootstrap, self.events, self.commit_log, directory, self.group, **sections)

    def committed(self) -> dict[int, int]:
        assert self.leader is not None
        self.leader.check()
        return self.leader.committed()

    def finish_producing(self, timeout_s: float = 60.0) -> dict[int, int]:
        """Stop the producer and wait until the leader has committed everything it produced."""
        assert self.producer is not None
        self.producer.stop()
        self.producer.check()
        produced = self.producer.produced()
        wait_for(lambda: self.committed() == produced, timeout_s, f"the leader to commit {produced}")
        return produced

    def stop(self) -> None:
        for worker in (self.producer, self.leader):
            if worker is not None:
                worker.stop()
        if self.broker is not None:
            self.broker.stop()

    def __enter__(self) -> KafkaWorld:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def job_config(bootstrap: str, events: str, commit_log: str, directory: Path, group: str = LEADER_GROUP,
               **sections: Any) -> dict[str, Any]:
    """A forwarder config (as YAML data) writing under `directory`; `sections` are merged in."""
    config: dict[str, Any] = {
        "kafka": {"bootstrap_servers": bootstrap},
        "source": {"subscribe": events, "commit_log_topic": commit_log, "commit_groups": [group],
                   "starting_offsets": "earliest"},
        "sink": {"path": str(directory / "table"), "engine": "delta-rs", "partition_by_date": False,
                 "maintenance": {"interval": "1s", "min_age": "500ms", "vacuum_retention": "0s"}},
        "checkpoint": {"location": str(directory / "checkpoint")},
        "trigger": {"min_interval": "200ms"},
        "logging": {"level": "INFO", "progress": True, "progress_interval": "500ms"},
    }
    for name, value in sections.items():
        config[name] = {**config.get(name, {}), **value} if isinstance(value, Mapping) else value
    return config


def write_config(path: Path, config: Mapping[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(dict(config), sort_keys=False))
    return path


