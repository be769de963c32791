"""Crash the forwarder anywhere; prove "exactly the leader's committed events, exactly once".

    python -m tests.crash_harness --kills 20 [--seed N] [--keep DIR]

Runs the real job (`spark-submit jobs/forwarder.py --config <yaml>`) against a live
`EventProducer` and `SimulatedLeader` on its own embedded broker (or on
KAFKA_BOOTSTRAP_SERVERS). For each kill it waits for a target moment, freezes the job's
whole session with SIGSTOP (the spark-submit JVM, the Python driver and the Python
workers, which PySpark's daemon moves to process groups of their own), reads the frozen
state from Spark's checkpoint and the Delta log, and SIGKILLs the session if the state is
the target window (else it resumes the job with SIGCONT and waits for the next chance).
Windows, from the frozen files (`N` the last batch in `offsets/`):

- `planning`: no batch in flight (`commits/N` written): the driver plans the next
  micro-batch (or waits for its trigger, 200ms).
- `reading`: batch N planned, not in Delta: tasks reading Kafka and writing Parquet.
- `delta-committed`: batch N committed to Delta, `commits/N` not written yet: the
  dangerous one, the restarted job replays batch N and the sink must skip it.
- `maintenance`: the job's table maintenance has written a compacted file that no Delta
  commit adds yet: compaction is between rewriting small files and committing the swap
  (the job runs maintenance every second on files older than half a second).

The job is restarted after every kill. At each kill the table must hold nothing at or
beyond the leader's commit at that moment (the leader's commits only grow; it lags the
producer by `LEADER_LAG_S`), no row twice, and exactly the offsets its newest Delta commit
records (no gap), and the newest batch Spark planned must not end beyond the leader's
commit either; at the end (producer
stopped, leader caught up, one `--available-now` run) it must hold every offset below the
leader's final commit exactly once, and no batch may be in two Delta commits.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from deltalake import DeltaTable

from synclib.delta import checkpoint
from synclib.delta.maintenance import COMPACTED_PREFIX
from synclib.delta.table import read_table_offsets
from synclib.embedded.broker import EmbeddedBroker, TopicAdmin
from synclib.embedded.world import EventProducer, SimulatedLeader
from tests.support import wait_until

ROOT = Path(__file__).resolve().parent.parent
PYTHON = Path(sys.executable)  # the venv's: synclib and pyspark are installed there
SPARK_SUBMIT = PYTHON.parent / "spark-submit"
FORWARDER = ROOT / "jobs" / "forwarder.py"
SPARK_CONF = ("spark.ui.enabled=false", "spark.sql.shuffle.partitions=2")

PLANNING, READING, DELTA_COMMITTED, MAINTENANCE = "planning", "reading", "delta-committed", "maintenance"
WINDOWS = (PLANNING, READING, DELTA_COMMITTED, MAINTENANCE)
JOB_START_TIMEOUT_S = 180.0
WINDOW_TIMEOUT_S = 120.0
FINAL_RUN_TIMEOUT_S = 300.0
LEADER_GROUP = "snuba-consumers"
# The leader commits events this long after they arrive: well behind the producer and longer
# than a micro-batch, so a forwarder that ignored it would be caught with rows beyond it.
LEADER_LAG_S = 5.0

_BATCH_FILE = re.compile(r"[0-9]+")
_DELTA_COMMIT_FILE = re.compile(r"[0-9]{20}\.json")

Row = tuple[int, int]  # (partition, offset) of an event in the table


class HarnessError(AssertionError):
    """The harness could not do what it was asked (the job died, a window never came)."""


# --- the job as a process session ---------------------------------------------------------

def _session_pids(sid: int) -> set[int]:
    """Live (not zombie) processes of session `sid`."""
    pids = set()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2:].split()
        if int(fields[3]) == sid and fields[0] not in (b"Z", b"X"):
            pids.add(int(entry.name))
    return pids


def _process_state(pid: int) -> bytes | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return stat[stat.rindex(b")") + 2:].split()[0]


def _signal(pids: Sequence[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def wait_for(condition: Callable[[], Any], timeout_s: float, what: str, job: JobRun | None = None,
             interval_s: float = 0.05) -> Any:
    """`wait_until`, failing at once (with the job's last output) if `job` exits meanwhile."""
    def check() -> Any:
        if job is not None and job.returncode is not None:
            raise HarnessError(f"the job exited ({job.returncode}) while waiting for {what}\n{job.tail()}")
        return condition()
    return wait_until(check, timeout_s, what, interval_s)


class JobRun:
    """One `spark-submit jobs/forwarder.py` process session, output in `<log_dir>/<name>.*`."""

    def __init__(self, config: Path, log_dir: Path, name: str, args: Sequence[str] = (),
                 env: Mapping[str, str] | None = None) -> None:
        self.stdout_path = log_dir / f"{name}.stdout"
        self.stderr_path = log_dir / f"{name}.stderr"
        scratch = log_dir / "tmp"  # Spark's and Python's temporary files, left behind by kills
        scratch.mkdir(exist_ok=True)
        command = [str(SPARK_SUBMIT), "--master", "local[2]"]
        for conf in (*SPARK_CONF, f"spark.local.dir={scratch}"):
            command += ["--conf", conf]
        command += [str(FORWARDER), "--config", str(config), *args]
        environment = {**os.environ, "PYSPARK_PYTHON": str(PYTHON), "PYSPARK_DRIVER_PYTHON": str(PYTHON),
                       "PYTHONPATH": str(ROOT), "TMPDIR": str(scratch), **(env or {})}
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self._process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=err,
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
        wait_until(lambda: all(_process_state(p) in (None, b"T", b"t", b"Z") for p in self._frozen),
                   10.0, "the frozen job to stop", interval_s=0.001)

    def thaw(self) -> None:
        _signal(sorted(self._frozen), signal.SIGCONT)
        self._frozen.clear()

    def kill(self) -> None:
        """SIGKILL the whole session and wait until none of it is left."""
        sid = self._process.pid
        wait_until(lambda: not _kill_all(sid), 30.0, "the killed job to go away", interval_s=0.02)
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


# --- what the checkpoint and the table say ------------------------------------------------

def _last_batch(directory: Path) -> int | None:
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return None
    batches = [int(n) for n in names if _BATCH_FILE.fullmatch(n)]
    return max(batches) if batches else None


def delta_batches(table: Path) -> list[tuple[str, int]]:
    """(app id, batch id) of every Delta commit carrying a synclib transaction, oldest first."""
    log = table / "_delta_log"
    try:
        names = sorted(n for n in os.listdir(log) if _DELTA_COMMIT_FILE.fullmatch(n))
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        for line in (log / name).read_text().splitlines():
            txn = json.loads(line).get("txn") if line.strip() else None
            if txn is not None:
                found.append((txn["appId"], int(txn["version"])))
    return found


@dataclass(frozen=True)
class BatchState:
    """The last batch planned (`offsets/`), checkpointed (`commits/`) and in Delta, and whether
    a compacted file awaits its maintenance commit."""

    planned: int | None
    checkpointed: int | None
    in_delta: int | None
    compacting: bool = False

    @property
    def window(self) -> str | None:
        if self.compacting:
            return MAINTENANCE
        if self.planned is None:
            return None
        if self.planned == self.checkpointed:
            return PLANNING
        return DELTA_COMMITTED if self.in_delta == self.planned else READING


class JobFiles:
    """Fast reads of the job's checkpoint and Delta log (only the newest commit file is parsed)."""

    def __init__(self, checkpoint: Path, table: Path) -> None:
        self.checkpoint = checkpoint
        self.table = table
        self._delta_file: str | None = None
        self._delta_batch: int | None = None
        self._compacted: set[str] = set()  # compacted files that Delta commits added
        self._scanned: set[str] = set()  # commit files read for them
        self._orphans: set[str] = set()  # compacted files of killed maintenance passes, never committed

    def planned_ends(self, topic: str) -> dict[int, int]:
        """The end offsets of `topic` that Spark logged for the newest batch (`offsets/N`)."""
        batch = _last_batch(self.checkpoint / "offsets")
        ends = None if batch is None else checkpoint.batch_offsets(str(self.checkpoint), batch)
        return {int(p): end for p, end in (json.loads(ends).get(topic, {}) if ends else {}).items()}

    def state(self) -> BatchState:
        planned = _last_batch(self.checkpoint / "offsets")
        checkpointed = _last_batch(self.checkpoint / "commits")
        return BatchState(planned, checkpointed, self._last_delta_batch() if planned != checkpointed else None,
                          bool(self.pending_compacted()))

    def _commit_files(self) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.table / "_delta_log") if _DELTA_COMMIT_FILE.fullmatch(n))
        except FileNotFoundError:
            return []

    def _last_delta_batch(self) -> int | None:
        """The transaction version of the newest Delta commit carrying one (maintenance commits carry none)."""
        names = self._commit_files()
        newest = names[-1] if names else None
        if newest is not None and newest != self._delta_file:
            self._delta_file, self._delta_batch = newest, None
            for name in reversed(names):
                versions = [json.loads(line)["txn"]["version"]
                            for line in (self.table / "_delta_log" / name).read_text().splitlines() if '"txn"' in line]
                if versions:
                    self._delta_batch = versions[0]
                    break
        return self._delta_batch

    def pending_compacted(self) -> set[str]:
        """Compacted files in the table directory that no Delta commit adds (yet), orphans left out."""
        try:
            written = {n for n in os.listdir(self.table) if n.startswith(COMPACTED_PREFIX)} - self._orphans
        except FileNotFoundError:
            return set()
        if written <= self._compacted:
            return set()
        for name in self._commit_files():
            if name not in self._scanned:
                self._scanned.add(name)
                for line in (self.table / "_delta_log" / name).read_text().splitlines():
                    add = json.loads(line).get("add") if COMPACTED_PREFIX in line else None
                    if add is not None:
                        self._compacted.add(add["path"])
        return written - self._compacted

    def orphan_pending(self) -> None:
        """After a kill: the pending compacted files will never be committed (vacuum leaves them)."""
        self._orphans |= self.pending_compacted()


def table_rows(table: Path) -> Counter[Row]:
    """How many times each (partition, offset) is in the Delta table."""
    if not DeltaTable.is_deltatable(str(table)):
        return Counter()
    rows = DeltaTable(str(table)).to_pyarrow_table(columns=["partition", "offset"]).to_pydict()
    return Counter(zip(rows["partition"], rows["offset"], strict=True))


@dataclass(frozen=True)
class Verdict:
    """A Delta table against the leader's commits and against the end offsets its newest
    synclib commit records (what it says it holds); every count is 0 when nothing is wrong."""

    rows: int
    duplicates: int  # extra copies of a (partition, offset)
    beyond: int  # rows at or beyond the leader's commit of their partition
    gaps: int  # offsets missing below the recorded end offsets
    unrecorded: int  # rows at or beyond the recorded end offsets
    recorded: dict[int, int]  # the recorded end offset per partition

    @property
    def ok(self) -> bool:
        return self.duplicates == self.beyond == self.gaps == self.unrecorded == 0

    def covers(self, offsets: Mapping[int, int]) -> bool:
        """The table records (so, when `ok`, holds) every offset below `offsets`."""
        return all(self.recorded.get(p, 0) >= end for p, end in offsets.items())

    def holds_exactly(self, committed: Mapping[int, int]) -> bool:
        """`ok`, and it holds exactly the offsets below the leader's `committed` ones."""
        return self.ok and all(self.recorded.get(p, 0) == end for p, end in committed.items())


def verify_table(table: Path, topic: str, committed: Mapping[int, int]) -> Verdict:
    """Check the table's rows of `topic` against the leader's `committed` offsets and its own record."""
    rows = table_rows(table)
    recorded = {int(p): end for p, end in ((read_table_offsets(str(table)) or {}).get(topic) or {}).items()}
    return Verdict(
        rows=sum(rows.values()),
        duplicates=sum(n - 1 for n in rows.values() if n > 1),
        beyond=sum(n for (p, offset), n in rows.items() if offset >= committed.get(p, 0)),
        gaps=sum(1 for p, end in recorded.items() for offset in range(end) if (p, offset) not in rows),
        unrecorded=sum(n for (p, offset), n in rows.items() if offset >= recorded.get(p, 0)),
        recorded=recorded,
    )


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
        admin = TopicAdmin(self.bootstrap)
        try:
            admin.create(self.events, self.partitions)
            admin.create(self.commit_log, 1)
        finally:
            admin.close()
        client = {"bootstrap_servers": [self.bootstrap]}
        self.producer = EventProducer(self.events, client, rate=self.rate, event_bytes=self.event_bytes).start()
        self.leader = SimulatedLeader(self.events, self.commit_log, client, group=self.group,
                                      lag=LEADER_LAG_S, commit_interval=0.5).start()
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
        wait_until(lambda: self.committed() == produced, timeout_s, f"the leader to commit {produced}")
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
        "trigger": {"processing_time": "200ms"},
        "logging": {"level": "INFO", "progress": True, "progress_interval": "500ms"},
    }
    for name, value in sections.items():
        config[name] = {**config.get(name, {}), **value} if isinstance(value, Mapping) else value
    return config


def write_config(path: Path, config: Mapping[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(dict(config), sort_keys=False))
    return path


# --- the harness ---------------------------------------------------------------------------

@dataclass
class Tally:
    kills: Counter[str] = field(default_factory=Counter)
    missed: Counter[str] = field(default_factory=Counter)  # freezes outside their target window (resumed)
    replays: int = 0  # delta-committed kills whose batch the next run re-ran and checkpointed
    at_kills: list[Verdict] = field(default_factory=list)
    planned_beyond: int = 0  # offsets of the newest planned batch beyond the leader's commit, at the kills
    final: Verdict | None = None
    final_committed: dict[int, int] = field(default_factory=dict)
    batches_committed_twice: int = 0
    runs: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return (self.final is not None and self.final.holds_exactly(self.final_committed)
                and all(v.ok for v in self.at_kills) and self.planned_beyond == 0
                and self.batches_committed_twice == 0
                and self.replays == self.kills[DELTA_COMMITTED])

    def report(self) -> str:
        final = self.final or Verdict(0, 0, 0, 0, 0, {})
        kills = ", ".join(f"{w} {self.kills[w]}" for w in WINDOWS)
        missed = ", ".join(f"{w} {self.missed[w]}" for w in WINDOWS)
        at_kills = {name: sum(getattr(v, name) for v in self.at_kills)
                    for name in ("beyond", "duplicates", "gaps", "unrecorded")}
        return "\n".join([
            f"kills: {sum(self.kills.values())} ({kills}); freezes that missed their window and "
            f"were resumed: {missed}",
            f"delta-committed kills whose batch the restarted job replayed: "
            f"{self.replays}/{self.kills[DELTA_COMMITTED]}; batches in two Delta commits: "
            f"{self.batches_committed_twice}",
            f"at the kills: rows beyond the leader {at_kills['beyond']}, duplicates "
            f"{at_kills['duplicates']}, gaps {at_kills['gaps']}, rows beyond the offsets the table "
            f"records {at_kills['unrecorded']}, offsets planned beyond the leader {self.planned_beyond}",
            f"final table: {final.rows} rows, exactly every offset below the leader's final commits "
            f"{self.final_committed}: {'yes' if final.holds_exactly(self.final_committed) else 'NO'} "
            f"(duplicates {final.duplicates}, gaps {final.gaps}, rows beyond the leader {final.beyond})",
            f"job runs: {self.runs} in {self.seconds:.0f}s -> {'OK' if self.ok else 'FAILED'}",
        ])


class CrashHarness:
    """Kill the forwarder `kills` times, cycling through `WINDOWS`, then verify the table.

    The steps are public for longer scenarios (`benchmarks.soak`): `start` a run,
    `kill_in` a window (or anywhere), `finish`. `sections` are merged into the job's config.
    """

    def __init__(self, world: KafkaWorld, directory: Path, seed: int | None = None,
                 log: Callable[[str], None] = lambda line: None, **sections: Any) -> None:
        self.world = world
        self.directory = directory
        self.rng = random.Random(seed)
        self.log = log
        self.config = write_config(directory / "forwarder.yaml", world.config(directory, **sections))
        self.files = JobFiles(directory / "checkpoint", directory / "table")
        self.tally = Tally()
        self._replay: int | None = None  # the batch of the last delta-committed kill
        self._job: JobRun | None = None

    def run(self, kills: int) -> Tally:
        started = time.monotonic()
        try:
            for number in range(kills):
                self._kill_once(WINDOWS[number % len(WINDOWS)], number)
        except BaseException:
            self.stop_job()
            raise
        return self.finish(started)

    def stop_job(self) -> None:
        if self._job is not None and self._job.returncode is None:
            self._job.kill()

    def finish(self, started: float) -> Tally:
        """Stop the producer, forward the rest with one --available-now run, verify the table."""
        try:
            produced = self.world.finish_producing()
            self.log(f"producer stopped at {produced}; final --available-now run")
            final = self._start("final", ["--available-now"])
            code = final.wait(FINAL_RUN_TIMEOUT_S)
            if code != 0:
                raise HarnessError(f"the final --available-now run exited {code}\n{final.tail()}")
        finally:
            self.stop_job()
        self._check_replay()
        self.tally.final_committed = self.world.committed()
        self.tally.final = verify_table(self.files.table, self.world.events, self.tally.final_committed)
        batches = Counter(delta_batches(self.files.table))
        self.tally.batches_committed_twice = sum(1 for n in batches.values() if n > 1)
        self.tally.seconds = time.monotonic() - started
        return self.tally

    def _start(self, name: str, args: Sequence[str] = ()) -> JobRun:
        self.tally.runs += 1
        self._job = JobRun(self.config, self.directory, name, args)
        return self._job

    def start(self, name: str) -> JobRun:
        """Start a run and return once it has checkpointed a batch (the replay of the one killed
        last, if any)."""
        job = self._start(name)
        before = self.files.state()
        wait_for(lambda: _later(self.files.state().checkpointed, before.checkpointed), JOB_START_TIMEOUT_S,
                 "the restarted job to checkpoint a batch", job)
        self._check_replay()
        return job

    def _kill_once(self, target: str, number: int) -> None:
        self.kill_in(self.start(f"run-{number:02d}"), target, number)

    def kill_in(self, job: JobRun, target: str | None, number: int) -> None:
        """SIGKILL `job` in window `target` (None: at once, whatever it is doing) and check the table."""
        deadline = time.monotonic() + WINDOW_TIMEOUT_S
        while True:
            if target is not None:
                self._approach(target, job, deadline)
            job.freeze()
            state = self.files.state()
            if target is None or state.window == target:
                break
            job.thaw()
            self.tally.missed[target] += 1
        committed = self.world.committed()  # the leader's commits only grow: taken after the freeze
        job.kill()
        self.files.orphan_pending()
        if state.window == DELTA_COMMITTED:
            self._replay = state.planned
        verdict = verify_table(self.files.table, self.world.events, committed)
        planned_beyond = sum(max(0, end - committed.get(p, 0))
                             for p, end in self.files.planned_ends(self.world.events).items())
        self.tally.kills[state.window or PLANNING] += 1
        self.tally.at_kills.append(verdict)
        self.tally.planned_beyond += planned_beyond
        self.log(f"kill {number + 1}: {state.window} (batch {state.planned}, checkpointed "
                 f"{state.checkpointed}, in Delta {state.in_delta}); table {verdict.rows} rows, "
                 f"{'OK' if verdict.ok else f'WRONG: {verdict}'}; planned {planned_beyond} beyond the leader")

    def _check_replay(self) -> None:
        """After a delta-committed kill, the next run must have re-run (and checkpointed) that batch."""
        if self._replay is not None and _later(self.files.state().checkpointed, self._replay - 1):
            self.tally.replays += 1
        self._replay = None

    def _approach(self, target: str, job: JobRun, deadline: float) -> None:
        """Return at a moment that should be in `target`: at once for delta-committed, after a
        random delay into the window for the others."""
        interval = 0.001 if target in (DELTA_COMMITTED, MAINTENANCE) else 0.005
        wait_for(lambda: self.files.state().window == target, max(0.0, deadline - time.monotonic()),
                 f"a {target} window", job, interval)
        if target == READING:
            time.sleep(self.rng.uniform(0.0, 0.4))
        elif target == PLANNING:
            time.sleep(self.rng.uniform(0.0, 0.05))


def _later(batch: int | None, than: int | None) -> bool:
    return batch is not None and (than is None or batch > than)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.crash_harness", description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--keep", type=Path, default=None, help="write the job's files here and keep them")
    args = parser.parse_args(argv)
    directory = args.keep or Path(tempfile.mkdtemp(prefix="synclib-crash-"))
    directory.mkdir(parents=True, exist_ok=True)
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    print(f"crash harness: {args.kills} kills, files in {directory}, broker "
          f"{external or 'embedded'}", flush=True)
    with KafkaWorld(external) as world:
        tally = CrashHarness(world, directory, args.seed, log=lambda line: print(line, flush=True)).run(args.kills)
    print(tally.report(), flush=True)
    return 0 if tally.ok else 1


if __name__ == "__main__":
    sys.exit(main())
