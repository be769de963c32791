"""Crash the forwarder anywhere; prove "exactly the leader's committed events, exactly once".

    python -m harness.crash_harness --kills 20 [--seed N] [--keep DIR] [--object-store]

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

With `--object-store` the table and the checkpoint are on an S3 server (S3Proxy, started by the
harness): the job writes them through the S3 API, and the harness reads the same files in the
server's backing directory, which adds no request and no latency to the job's.

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
import os
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.job_files import (
    DELTA_COMMITTED,
    MAINTENANCE,
    PLANNING,
    READING,
    WINDOWS,
    JobFiles,
    Verdict,
    delta_batches,
    verify_table,
)
from harness.job_world import HarnessError, JobRun, KafkaWorld, wait_for, write_config
from harness.object_store import S3Server

# A bound, not a timing (the wait ends at the first checkpointed batch): at load 18-20 on 2 cores a
# restarted run on S3 (the delta-rs soak's, after its kill) took 100 s to start its stream and had
# not checkpointed a batch after 180 s.
JOB_START_TIMEOUT_S = 600.0
WINDOW_TIMEOUT_S = 120.0
FINAL_RUN_TIMEOUT_S = 300.0


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
    With `store`, the table and the checkpoint are in a new bucket of that S3 server, read in its
    backing directory; else under `directory`, which holds the config and the runs' output.
    """

    def __init__(self, world: KafkaWorld, directory: Path, seed: int | None = None,
                 log: Callable[[str], None] = lambda line: None, store: S3Server | None = None,
                 **sections: Any) -> None:
        self.world = world
        self.directory = directory
        self.rng = random.Random(seed)
        self.log = log
        files = directory
        if store is not None:
            bucket = store.bucket("crash")
            files = Path(store.local_path(f"s3://{bucket}"))
            sections = {**sections, "sink": {**sections.get("sink", {}), "path": f"s3://{bucket}/table"},
                        "checkpoint": {"location": f"s3a://{bucket}/checkpoint"},
                        "storage": {"s3": store.storage_settings()}}
        config = world.config(directory, **sections)
        self.table: str = config["sink"]["path"]  # the job's table location (s3://... with `store`)
        self.config = write_config(directory / "forwarder.yaml", config)
        self.files = JobFiles(files / "checkpoint", files / "table")
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
    parser = argparse.ArgumentParser(prog="python -m harness.crash_harness", description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--keep", type=Path, default=None, help="write the job's files here and keep them")
    parser.add_argument("--object-store", action="store_true",
                        help="the table and the checkpoint on an S3 server (S3Proxy) under the files' directory")
    args = parser.parse_args(argv)
    directory = args.keep or Path(tempfile.mkdtemp(prefix="synclib-crash-"))
    directory.mkdir(parents=True, exist_ok=True)
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    print(f"crash harness: {args.kills} kills, files in {directory}, broker "
          f"{external or 'embedded'}{', table and checkpoint on S3' if args.object_store else ''}", flush=True)
    with KafkaWorld(external) as world, contextlib.ExitStack() as stack:
        store = stack.enter_context(S3Server(directory / "s3")) if args.object_store else None
        tally = CrashHarness(world, directory, args.seed, log=lambda line: print(line, flush=True),
                             store=store).run(args.kills)
    print(tally.report(), flush=True)
    return 0 if tally.ok else 1


if __name__ == "__main__":
    sys.exit(main())
