"""S3's failure modes under a running forwarder, a window at a time (issue 46).

The job runs continuously with its table and checkpoint on the S3 server (S3Proxy) behind the
fault proxy (`harness.fault_proxy`), a producer and a leader group live on an embedded broker.
Each fault gets a window (20 s by default) in which a random 30% of the requests meet it (delayed
answers: 50%); between windows the job runs clean until the table has moved. Per window: the
requests that met the fault, whether the job exited (its code and last line; it is then started
again), and how long after the window's end the table took its next batch. Then every request is
refused (503 SlowDown) for well past the retry deadline (`storage.s3.retry_deadline`, 30 s here:
S3A's backoff is not a hard deadline, so the outage is 2.5 times it): the job must end with one line
and exit code 4, and a restart resumes. At the end every offset the leader committed is in the
table exactly once.

    python -m benchmarks.s3_faults [--engines delta-rs,delta-spark] [--window 20] [--deadline 30]
        [--outage 75] [--record s3-faults]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks import record_tables, records
from harness.fault_proxy import DELAY, INTERNAL, RESET_AFTER, RESET_BEFORE, SLOW_DOWN, FaultProxy
from harness.job_files import delta_batches, verify_table
from harness.job_world import JobRun, KafkaWorld, wait_for, write_config
from harness.object_store import S3Server
from synclib.exit_codes import ExitCode
from synclib.settings.values import DELTA_RS, DELTA_SPARK

WINDOW_FAULTS = (SLOW_DOWN, INTERNAL, RESET_BEFORE, RESET_AFTER, DELAY)
FRACTIONS = {DELAY: 0.5}  # of the requests in a window; the others 30% (`--fraction`)
DELAY_S = 3.0  # a delayed answer's wait (the 2-5 s)
MOVES_WITHIN_S = 10.0  # the table must move again this soon after a window
START_TIMEOUT_S = 600.0  # a (re)started job's first batch: minutes on a loaded two-core machine
SETTLE_TIMEOUT_S = 300.0


@dataclass
class Window:
    fault: str
    fraction: float
    seconds: float
    requests_faulted: int = 0
    exits: list[str] = field(default_factory=list)  # "exit N: last line" of each run that ended
    moved_after_s: float | None = None  # from the window's end to the table's next batch


@dataclass
class Outage:
    seconds: float
    exit_code: int | None = None
    line: str = ""
    ended_after_s: float | None = None  # from the outage's start to the job's exit
    resumed_after_s: float | None = None  # from the outage's end to the restarted job's first batch


@dataclass
class EngineRun:
    engine: str
    windows: list[Window] = field(default_factory=list)
    outage: Outage | None = None
    rows: int = 0
    exactly_once: bool = False
    verdict: str = ""

    def rode_out(self) -> bool:
        return all(not w.exits and w.moved_after_s is not None and w.moved_after_s <= MOVES_WITHIN_S
                   for w in self.windows)


class Job:
    """The forwarder's runs on one config, each started again when it ends."""

    def __init__(self, config: Path, directory: Path, table: Path) -> None:
        self.config, self.directory, self.table = config, directory, table
        self.runs = 0
        self.current = self._start()

    def _start(self) -> JobRun:
        self.runs += 1
        return JobRun(self.config, self.directory, f"run-{self.runs:02d}")

    def batches(self) -> int:
        return len(delta_batches(self.table))

    def ended(self) -> str | None:
        """If the current run has ended: "exit N: its one line" (its first `forwarder: ` line, else
        its last), and a new run is started."""
        code = self.current.returncode
        if code is None:
            return None
        lines = [line for line in self.current.output().splitlines() if line.strip()]
        said = next((line for line in lines if line.startswith("forwarder: ")), lines[-1] if lines else "")
        self.current = self._start()
        return f"exit {code}: {said[:300]}"

    def wait_to_move(self, since: int, timeout_s: float, exits: list[str]) -> float:
        """Seconds until the table holds more batches than `since` (runs that end meanwhile are
        noted in `exits` and started again)."""
        started = time.monotonic()
        while self.batches() <= since:
            if (ended := self.ended()) is not None:
                exits.append(ended)
            if time.monotonic() - started > timeout_s:
                raise RuntimeError(f"the table did not move for {timeout_s:.0f}s\n{self.current.tail()}")
            time.sleep(0.1)
        return time.monotonic() - started


def run_engine(engine: str, directory: Path, window_s: float, fraction: float, deadline_s: float, outage_s: float,
               rate: float, log: Callable[[str], None]) -> EngineRun:
    result = EngineRun(engine)
    directory.mkdir(parents=True, exist_ok=True)
    with S3Server(directory / "s3") as server, FaultProxy(server.port, delay_s=DELAY_S, seed=1) as proxy, \
            KafkaWorld(rate=rate, partitions=4) as world:
        bucket = server.bucket()
        table = Path(server.local_path(f"s3://{bucket}/table"))
        config = write_config(directory / "forwarder.yaml", world.config(
            directory, sink={"path": f"s3://{bucket}/table", "engine": engine},
            checkpoint={"location": f"s3a://{bucket}/checkpoint"},
            storage={"s3": {**server.behind(proxy.port).storage_settings(), "retry_deadline": f"{deadline_s:g}s"}}))
        job = Job(config, directory, table)
        try:
            wait_for(lambda: job.batches() > 0, START_TIMEOUT_S, "the first batch", job.current)
            for fault in WINDOW_FAULTS:
                share = FRACTIONS.get(fault, fraction)
                window = Window(fault, share, window_s)
                job.wait_to_move(job.batches(), SETTLE_TIMEOUT_S, window.exits)  # a clean batch first
                before = len(proxy.faults())
                proxy.outage(fault, window_s, fraction=share)
                deadline = time.monotonic() + window_s
                while time.monotonic() < deadline:
                    if (ended := job.ended()) is not None:
                        window.exits.append(ended)
                    time.sleep(0.1)
                proxy.clear()
                window.requests_faulted = len(proxy.faults()) - before
                window.moved_after_s = round(job.wait_to_move(job.batches(), SETTLE_TIMEOUT_S, window.exits), 2)
                log(f"{engine}: {fault} window: {window.requests_faulted} requests faulted, "
                    f"{len(window.exits)} exits, moved {window.moved_after_s} s after")
                result.windows.append(window)
            if outage_s > 0:
                result.outage = _outage(job, proxy, outage_s)
                log(f"{engine}: outage: {result.outage}")
            committed = world.finish_producing()
            wait_for(lambda: verify_table(table, world.events, committed).covers(committed), SETTLE_TIMEOUT_S,
                     "the table to cover the leader's commits", job.current)
            job.current.terminate()
            job.current.wait(120.0)
            verdict = verify_table(table, world.events, committed)
            result.rows, result.verdict = verdict.rows, str(verdict)
            result.exactly_once = verdict.holds_exactly(committed)
        finally:
            if job.current.returncode is None:
                job.current.kill()
    return result


def _outage(job: Job, proxy: FaultProxy, seconds: float) -> Outage:
    """Every request refused for `seconds`: the run must end (exit 4, one line); once the store
    answers again a new run resumes."""
    outage = Outage(seconds)
    job.wait_to_move(job.batches(), SETTLE_TIMEOUT_S, [])
    proxy.outage(SLOW_DOWN, seconds)
    started = time.monotonic()
    run = job.current
    with contextlib.suppress(Exception):
        wait_for(lambda: run.returncode is not None, seconds, "the run to end in the outage")
    if run.returncode is not None:
        outage.ended_after_s = round(time.monotonic() - started, 1)
        ended = job.ended() or ""  # starts the next run, which meets the rest of the outage
        code, _, outage.line = ended.partition(": ")
        outage.exit_code = int(code.removeprefix("exit "))
    time.sleep(max(0.0, started + seconds - time.monotonic()))
    proxy.clear()
    since = job.batches()
    outage.resumed_after_s = round(job.wait_to_move(since, START_TIMEOUT_S, []), 1)
    return outage


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.s3_faults", description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default=f"{DELTA_RS},{DELTA_SPARK}")
    parser.add_argument("--window", type=float, default=20.0, help="seconds of each fault")
    parser.add_argument("--fraction", type=float, default=0.3, help="of the requests in a window")
    parser.add_argument("--deadline", type=float, default=30.0, help="storage.s3.retry_deadline, seconds")
    parser.add_argument("--outage", type=float, default=75.0, help="seconds of every request refused (0: none)")
    parser.add_argument("--rate", type=float, default=300.0, help="events/s")
    parser.add_argument("--keep", type=Path, default=None, help="write the runs' files here and keep them")
    parser.add_argument("--record", metavar="NAME", help="add the run to benchmarks/results/NAME.json, which "
                        "the object-storage page's fault table is rendered from (benchmarks/records.py)")
    given = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(given)
    started = records.environment()
    directory = args.keep or Path(tempfile.mkdtemp(prefix="synclib-s3-faults-"))
    runs = [run_engine(engine, directory / engine, args.window, args.fraction, args.deadline, args.outage,
                       args.rate, lambda line: print(line, flush=True)) for engine in args.engines.split(",")]
    figures = [asdict(r) for r in runs]
    print(record_tables.s3_faults_table({"runs": [{"s3_faults": figures}]}), flush=True)
    if args.record:
        print("recorded in " + str(records.record_run(args.record, "python -m benchmarks.s3_faults", given, started,
                                                      s3_faults=figures)))
    ok = all(r.exactly_once and r.rode_out() and (r.outage is None or r.outage.exit_code == ExitCode.STORAGE)
             for r in runs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
