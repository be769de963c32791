"""Soak: the forwarder for a long run with maintenance on, SIGKILL restarts and a broker pause.

    python -m benchmarks.soak [--minutes 20] [--rate 2000] [--kills 3] [--pause 20] [--keep DIR] [--object-store]
        [--record NAME]

Runs the real job (`spark-submit jobs/forwarder.py`, `harness.job_world.JobRun`) against a
live producer and a simulated leader on an embedded broker, with table maintenance every
30 s. The kills come at 30%, 45% and 60% of the run (the second one in a window: with delta-rs
inside a maintenance commit, `harness.job_files.MAINTENANCE`; with delta-spark between a batch's
Delta commit and Spark's, `DELTA_COMMITTED`; the others wherever the job is), the broker is
frozen (SIGSTOP) for `--pause` seconds at 70%, so the first and the last quarter run
undisturbed. With `--object-store` the table and the checkpoint are on an S3 server (S3Proxy,
started under the files' directory). At the end the producer stops, one `--available-now` run forwards the rest and
the table is checked: every offset below the leader's final commit exactly once, and at
every kill nothing beyond the leader's commit, no duplicate, no gap.

Reported: the exactly-once verdict, live files and versions of the table, maintenance
passes, batch durations (Spark's offset-log write to its commit-log write, from the
checkpoint's file times) p50/p99 and peak RSS per process role (`harness.procmem`) in the
first and the last quarter. Not run in CI; `tests/e2e/test_maintenance.py` runs a short one.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

from benchmarks import records
from harness import procmem
from harness.crash_harness import CrashHarness, Tally
from harness.job_files import DELTA_COMMITTED, MAINTENANCE
from harness.job_world import JobRun, KafkaWorld
from harness.object_store import S3Server
from synclib.background import BackgroundThread
from synclib.settings.values import DELTA_RS, DELTA_SPARK

KILL_AT = (0.30, 0.45, 0.60)  # fractions of the run
PAUSE_AT = 0.70
QUARTER = 0.25
SAMPLE_INTERVAL_S = 1.0


@dataclass
class Window:
    """Figures of one quarter of the run."""

    batches: int = 0
    batch_ms_p50: float | None = None
    batch_ms_p99: float | None = None
    peak_rss_mib: dict[str, float] = field(default_factory=dict)  # per role: the largest process


@dataclass
class SoakReport:
    seconds: float
    rate: float
    kills: int
    broker_pause_s: float
    exactly_once: bool
    duplicates: int
    gaps: int
    beyond_leader: int
    rows: int
    live_files: int
    versions: int
    maintenance_passes: int
    kill_windows: dict[str, int]  # where the kills landed (`harness.job_files.WINDOWS`)
    replays: int  # delta-committed kills whose batch the restarted job ran again
    table: str  # the job's table location
    first: Window
    last: Window
    harness: str

    def text(self) -> str:
        def window(name: str, w: Window) -> str:
            rss = ", ".join(f"{role} {mib:.0f}" for role, mib in w.peak_rss_mib.items())
            return (f"{name}: {w.batches} batches, duration p50 {w.batch_ms_p50} ms, p99 {w.batch_ms_p99} ms; "
                    f"peak RSS MiB: {rss}")
        return "\n".join([
            f"soak: {self.seconds / 60:.1f} min at {self.rate:g} events/s, {self.kills} SIGKILL restarts, "
            f"broker paused {self.broker_pause_s:g}s",
            f"exactly once: {'yes' if self.exactly_once else 'NO'} ({self.rows} rows; duplicates {self.duplicates}, "
            f"gaps {self.gaps}, beyond the leader {self.beyond_leader})",
            f"table: {self.live_files} live files, {self.versions} versions, {self.maintenance_passes} "
            f"maintenance passes reported",
            window("first quarter", self.first),
            window("last quarter", self.last),
            self.harness,
        ])


class _Sampler(BackgroundThread):
    """Every second: batch durations from the checkpoint's file times and the peak RSS of each
    process of the running job (and the broker), kept per quarter of the run."""

    def __init__(self, checkpoint: Path, broker_pid: int | None, started: float, seconds: float) -> None:
        super().__init__("soak-sampler")
        self._checkpoint = checkpoint
        self._broker_pid = broker_pid
        self._started, self._seconds = started, seconds
        self.job: JobRun | None = None
        self._durations: dict[int, tuple[float, float]] = {}  # batch -> (commit time, duration ms)
        self._peaks: dict[str, dict[int, tuple[str, int]]] = {"first": {}, "last": {}}
        self._last_reset = False

    def _work(self) -> None:
        while not self._stopping.wait(SAMPLE_INTERVAL_S):
            self._sample_batches()
            self._sample_memory()

    def _sample_batches(self) -> None:
        for entry in os.scandir(self._checkpoint / "commits") if (self._checkpoint / "commits").exists() else ():
            if not entry.name.isdigit() or int(entry.name) in self._durations:
                continue
            try:
                planned = (self._checkpoint / "offsets" / entry.name).stat().st_mtime
                done = entry.stat().st_mtime
            except FileNotFoundError:
                continue
            self._durations[int(entry.name)] = (done, (done - planned) * 1000)

    def _quarter(self, moment: float) -> str | None:
        elapsed = (moment - self._started) / self._seconds
        return "first" if elapsed < QUARTER else "last" if elapsed >= 1 - QUARTER else None

    def _sample_memory(self) -> None:
        quarter = self._quarter(time.time())
        job = self.job
        if quarter is None or job is None:
            return
        pids = job.pids()
        jvm = job.pid
        driver = next((p for p in pids if _runs_forwarder_in_python(p)), -1)
        roles = {pid: role for pid in pids if (role := procmem.role(pid, jvm, driver)) != procmem.JVM_FORK}
        if self._broker_pid is not None:
            roles[self._broker_pid] = "broker"
        if quarter == "last" and not self._last_reset:
            for pid in roles:
                procmem.reset_peak(pid)
            self._last_reset = True
            return
        for pid, role in roles.items():
            peak = procmem.peak_rss(pid)
            if peak is not None and peak > self._peaks[quarter].get(pid, ("", 0))[1]:
                self._peaks[quarter][pid] = (role, peak)

    def window(self, quarter: str) -> Window:
        durations = sorted(ms for moment, ms in self._durations.values() if self._quarter(moment) == quarter)
        by_role: dict[str, float] = {}
        for role, peak in self._peaks[quarter].values():
            by_role[role] = max(by_role.get(role, 0.0), round(peak / 2**20, 1))
        if not durations:
            return Window(peak_rss_mib=by_role)
        p99 = durations[min(len(durations) - 1, int(len(durations) * 0.99))]
        return Window(len(durations), round(statistics.median(durations)), round(p99), dict(sorted(by_role.items())))


def _runs_forwarder_in_python(pid: int) -> bool:
    command = procmem.argv(pid)
    return bool(command) and os.path.basename(command[0]).startswith("python") and any(
        a.endswith("forwarder.py") for a in command[1:])


def soak(directory: Path, seconds: float, rate: float, kills: int, pause_s: float, event_bytes: int = 256,
         log: Any = print, engine: str = "delta-rs", min_passes: int = 0, store: S3Server | None = None,
         **maintenance: Any) -> SoakReport:
    """Run the soak in `directory` with `sink.engine: engine`, the table and the checkpoint in a
    bucket of `store` if given; `maintenance` overrides keys of `sink.maintenance`. The last run
    goes on past `seconds` until the runs have reported `min_passes` maintenance passes (at most
    `seconds` more): how many fit in the time depends on the machine. The second kill (the only
    one, of one) lands in a window: with delta-rs inside a maintenance commit; with delta-spark
    between a batch's Delta commit and Spark's (the harness cannot tell the files of Delta's
    OPTIMIZE from a batch's before they are committed); the others wherever the job is."""
    settings = {"interval": "30s", "min_age": "30s", "target_file_size_mb": 64, "vacuum_retention": "5m",
                **maintenance}
    kill_at = KILL_AT[:kills] if kills <= len(KILL_AT) else [0.3 + 0.3 * i / kills for i in range(kills)]
    window = MAINTENANCE if engine == DELTA_RS else DELTA_COMMITTED
    targets = [window if i == 1 or kills == 1 else None for i in range(kills)]
    with KafkaWorld(rate=rate, event_bytes=event_bytes, partitions=4) as world:
        harness = CrashHarness(world, directory, seed=1, log=log, store=store,
                               sink={"engine": engine, "maintenance": settings},
                               trigger={"min_interval": "1s"},
                               logging={"level": "INFO", "progress": True, "progress_interval": "1s"})
        started, started_monotonic = time.time(), time.monotonic()
        broker_pid = world.broker.pid if world.broker is not None else None
        with _Sampler(harness.files.checkpoint, broker_pid, started, seconds) as sampler:
            try:
                sampler.job = harness.start("run-00")
                for number, (fraction, target) in enumerate(zip(kill_at, targets, strict=True)):
                    _sleep_until(started + fraction * seconds, sampler.job)
                    harness.kill_in(sampler.job, target, number)
                    sampler.job = harness.start(f"run-{number + 1:02d}")
                if pause_s and broker_pid is not None:
                    _sleep_until(started + PAUSE_AT * seconds, sampler.job)
                    log(f"broker paused for {pause_s:g}s")
                    os.kill(broker_pid, signal.SIGSTOP)
                    try:
                        _sleep_until(time.time() + pause_s, sampler.job)
                    finally:
                        os.kill(broker_pid, signal.SIGCONT)
                _sleep_until(started + seconds, sampler.job)
                _wait_for_passes(directory, min_passes, time.time() + seconds, sampler.job)
                sampler.job.terminate()
                sampler.job.wait(120)
            except BaseException:
                harness.stop_job()
                raise
        tally = harness.finish(started_monotonic)
        passes = _maintenance_passes(directory)  # every run's, the final one's too, once all have ended
        if sampler.failure is not None:
            raise RuntimeError("the soak's sampler died: its windows are incomplete") from sampler.failure
        table = DeltaTable(str(harness.files.table))  # in the S3 server's backing directory: no request
        return _report(tally, table, harness.table, time.time() - started, rate, kills, pause_s, passes, sampler)


def _report(tally: Tally, table: DeltaTable, location: str, seconds: float, rate: float, kills: int,
            pause_s: float, passes: int, sampler: _Sampler) -> SoakReport:
    final = tally.final
    assert final is not None
    return SoakReport(
        seconds=seconds, rate=rate, kills=kills, broker_pause_s=pause_s, exactly_once=tally.ok,
        duplicates=final.duplicates + sum(v.duplicates for v in tally.at_kills),
        gaps=final.gaps + sum(v.gaps for v in tally.at_kills),
        beyond_leader=final.beyond + sum(v.beyond for v in tally.at_kills) + tally.planned_beyond,
        rows=final.rows, live_files=len(table.file_uris()), versions=table.version() + 1,
        maintenance_passes=passes, kill_windows=dict(tally.kills), replays=tally.replays, table=location,
        first=sampler.window("first"), last=sampler.window("last"), harness=tally.report())


def _sleep_until(moment: float, job: JobRun | None) -> None:
    """Wait until `moment`, failing if the job exits meanwhile."""
    while (left := moment - time.time()) > 0:
        if job is not None and job.returncode is not None:
            raise RuntimeError(f"the job exited ({job.returncode})\n{job.tail()}")
        time.sleep(min(left, 1.0))


def _wait_for_passes(directory: Path, passes: int, deadline: float, job: JobRun | None) -> None:
    """Wait until the runs have reported `passes` maintenance passes, or until `deadline`."""
    while _maintenance_passes(directory) < passes and time.time() < deadline:
        _sleep_until(min(deadline, time.time() + SAMPLE_INTERVAL_S), job)


def _maintenance_passes(directory: Path) -> int:
    """Maintenance passes the job runs reported: the maintenance module's log line, once a pass."""
    return sum(path.read_text(errors="replace").count("synclib.delta.maintenance: maintenance: ")
               for pattern in ("*.stdout", "*.stderr") for path in directory.glob(pattern))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--rate", type=float, default=2000.0, help="events/s")
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--pause", type=float, default=20.0, help="broker pause, seconds (0: none)")
    parser.add_argument("--keep", type=Path, default=None, help="write the job's files here and keep them")
    parser.add_argument("--json", type=Path, default=None, help="also write the report as JSON here")
    parser.add_argument("--engine", choices=(DELTA_RS, DELTA_SPARK), default=DELTA_RS, help="sink.engine")
    parser.add_argument("--object-store", action="store_true",
                        help="the table and the checkpoint on an S3 server (S3Proxy) under the files' directory")
    parser.add_argument("--record", metavar="NAME", help="add the run to benchmarks/results/NAME.json, which the "
                        "docs' long-run table is rendered from (benchmarks/records.py)")
    given = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(given)
    started = records.environment()
    directory = args.keep or Path(tempfile.mkdtemp(prefix="synclib-soak-"))
    directory.mkdir(parents=True, exist_ok=True)
    print(f"soak: {args.minutes:g} min at {args.rate:g} events/s, files in {directory}", flush=True)
    with contextlib.ExitStack() as stack:
        store = stack.enter_context(S3Server(directory / "s3")) if args.object_store else None
        report = soak(directory, args.minutes * 60, args.rate, args.kills, args.pause,
                      log=lambda line: print(line, flush=True), engine=args.engine, store=store)
    print(report.text(), flush=True)
    if args.json:
        args.json.write_text(json.dumps(asdict(report), indent=2))
    if args.record:
        print("recorded in " + str(records.record_run(
            args.record, "python -m benchmarks.soak", given, started,
            soak={**{key: value for key, value in asdict(report).items() if key != "table"},  # a machine's path
                  "engine": args.engine, "object_store": args.object_store})))
    return 0 if report.exactly_once else 1


if __name__ == "__main__":
    sys.exit(main())
