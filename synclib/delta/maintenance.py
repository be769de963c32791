"""Delta table maintenance: compaction, vacuum, log checkpoints and expired-log cleanup.

A forwarder adds one Delta version and a few small files per micro-batch. `run_pass` keeps
its table healthy with delta-rs (no Spark), with deltalake's own operations where they keep
our guarantees, so the table's history says what happened (`OPTIMIZE`, `VACUUM START`/`END`):

- compaction (`DeltaTable.optimize.compact`, history `OPTIMIZE`): per partition, files
  smaller than the target size are bin-packed into files of about the target size, in one
  commit whose actions have `dataChange=false` (Delta streaming readers skip it). Delta's
  OPTIMIZE selects files by partition, not by age, so `min_age` applies per partition: a
  partition is compacted once it holds a bin of at least two small files older than
  `min_age` (its younger small files are compacted with them); in closed dates (the `date`
  partition column below today, UTC) every small file counts as old;
- vacuum (`DeltaTable.vacuum`, history `VACUUM START`/`VACUUM END`) of the files compaction
  removed, once older than `vacuum_retention` (tombstones only: files of a batch still being
  written are never touched), only when there is one to delete;
- a log checkpoint (`create_checkpoint`) every `checkpoint_interval` versions, and
  expired-log cleanup: log entries older than `log_retention` below the newest checkpoint
  and the newest synclib commit are deleted (every update of a table lists its log on local
  and HDFS storage: a long log makes every batch commit slower).

Exactly once is unaffected: batch commits are blind appends, which delta-rs retries past an
OPTIMIZE commit (and the OPTIMIZE past a batch commit), so neither is lost; compaction keeps
every row and the application transactions live in the table state (kept by checkpoints).
The offsets resume-from-table reads are the newest synclib commit's metadata
(`synclib.delta.table.latest_synclib_commit`): maintenance commits carry none and are passed
over, and log cleanup never removes that commit's log entry.

Two compactions of the same files must not both commit (the rows would be doubled), e.g. a
cron `maintain` next to the job's own thread: delta-rs 1.6 finds no conflict between two
OPTIMIZE commits removing the same files, and drops the application transactions given to
`optimize.compact` (both measured). So a compaction first *claims* the table with an empty
commit carrying the maintenance application transaction (`synclib-maintenance`, version
n + 1; two claims of the same n conflict, and the later one gives up) and its OPTIMIZE commit
names the claim it closes; a pass that finds a claim neither closed nor expired (a pass
that died holds it until `time_budget` + `CLAIM_MARGIN_S`, unless it ran on this host in a
process that no longer exists, e.g. a job killed mid-compaction and restarted) compacts nothing.
On an object store each step that writes the log (compaction with its claim and release, vacuum,
checkpoint and log cleanup) holds the table's host-wide commit lock (`synclib.delta.commit_lock`),
as the batch commits do: the batch commits wait while a compaction rewrites files.
With `sink.engine: delta-spark` the job's passes run Delta's own OPTIMIZE, VACUUM, checkpoints
and log cleanup instead (`synclib.delta.spark_maintenance`).

The settings are `sink.maintenance` (`MaintenanceConfig`). `MaintenanceThread` runs passes
in the forwarder's driver on a low-priority thread of its own, each pass under a time
budget; `synclib maintain` runs one pass.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import PostCommitHookProperties
from pyarrow import fs

from synclib import locations, processes
from synclib.background import BackgroundThread
from synclib.delta import column_mapping, commit_lock, parquet
from synclib.delta.table import DATE_COLUMN, latest_synclib_commit, open_table
from synclib.locations import read_text
from synclib.settings.job import MaintenanceConfig

logger = logging.getLogger(__name__)

META_MAINTENANCE = "synclib.maintenance"
MAINTENANCE_APP_ID = "synclib-maintenance"  # the application transaction of compaction claims
# The names deltalake's optimize gives the files it writes (batch files are `part-<uuid>...`).
COMPACTED_FILE = re.compile(r"part-[0-9]{5}-[0-9a-f-]{36}-c[0-9]{3}\.[a-z0-9]+\.parquet")
CLAIM_MARGIN_S = 600.0  # a claim expires this long after its pass's time budget
_NO_HOOKS = PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)
_VACUUM_CHECK_LIMIT = 10_000  # vacuum candidates looked up one by one (more: vacuum runs anyway)
_LOG_ENTRY = re.compile(r"([0-9]{20})\.(json|crc|checkpoint(\.[0-9]+\.[0-9]+)?\.parquet)")
_CLAIM_SEARCH = (64, 1024)  # history entries searched for an open claim


@dataclass
class PassReport:
    """What one maintenance pass did."""

    seconds: float = 0.0
    version: int | None = None  # the table's version after the pass; None: no table
    compacted_files: int = 0  # small files replaced
    compacted_bytes: int = 0
    written_files: int = 0  # files they were replaced by
    deferred_files: int = 0  # small files left for a later pass (too young, or out of time)
    vacuumed_files: int = 0
    checkpoint: int | None = None  # version of the log checkpoint written
    log_entries_removed: int = 0
    live_files: int = 0
    notes: list[str] = field(default_factory=list)  # conflicts, skipped steps

    @property
    def did_work(self) -> bool:
        """Whether the pass changed the table or has something to say (a conflict, a skipped step)."""
        return bool(self.compacted_files or self.vacuumed_files or self.checkpoint is not None
                    or self.log_entries_removed or self.notes)

    def summary(self) -> str:
        if self.version is None:
            return "maintenance: no table yet"
        parts = [f"compacted {self.compacted_files} files ({self.compacted_bytes / (1 << 20):.1f} MiB) "
                 f"into {self.written_files}"]
        if self.deferred_files:
            parts.append(f"{self.deferred_files} small files left for later")
        parts.append(f"vacuumed {self.vacuumed_files}")
        if self.checkpoint is not None:
            parts.append(f"checkpoint at version {self.checkpoint}")
        if self.log_entries_removed:
            parts.append(f"{self.log_entries_removed} expired log entries removed")
        parts += self.notes
        return (f"maintenance: {'; '.join(parts)}; {self.live_files} live files, version {self.version} "
                f"({self.seconds:.1f}s)")


def timed_pass(path: str, now: float | None, work: Callable[[DeltaTable, float, PassReport], None]) -> PassReport:
    """`work(table, now, report)` on the Delta table at `path` (an empty report when there is none),
    timed and its report logged (at debug level when it did nothing); `now` defaults to the current time."""
    started = time.monotonic()
    report = PassReport()
    table = open_table(path)
    if table is None:
        return report
    work(table, time.time() if now is None else now, report)
    report.seconds = time.monotonic() - started
    logger.log(logging.INFO if report.did_work else logging.DEBUG, "%s", report.summary())
    return report


def run_pass(path: str, options: MaintenanceConfig, now: float | None = None) -> PassReport:
    """One maintenance pass over the Delta table at `path` (compaction, vacuum, checkpoint,
    log cleanup); a compaction that loses a conflict is noted in the report and logged, and
    retried by the next pass."""
    return timed_pass(path, now, functools.partial(_pass, path, options, time.monotonic() + options.time_budget))


def _pass(path: str, options: MaintenanceConfig, deadline: float, table: DeltaTable, now: float,
          report: PassReport) -> None:
    # Each step that writes the log holds the table's commit lock (object stores: the batch commits wait).
    with commit_lock.held(path):
        compact(table, options, now, report, deadline=deadline)
    _vacuum(path, table, options, report)
    with commit_lock.held(path):
        _checkpoint(table, options, report)
        if options.log_cleanup:
            cleanup_log(table, options, now, report)
    report.version = table.version()
    report.live_files = len(table.file_uris())


# --- which partitions are due ----------------------------------------------------------------

Partition = dict[str, str | None]


def due_partitions(table: DeltaTable, options: MaintenanceConfig, now: float) -> tuple[list[Partition], int, bool]:
    """The partitions to compact, how many small files are left alone (in partitions not due),
    and whether every partition holding small files is due.

    A partition is due when bin-packing its small files that are old enough (all of them in
    closed dates), oldest first, into bins of at most the target size gives a bin of two or
    more files: Delta's OPTIMIZE compacts no single-file bin."""
    columns = list(table.metadata().partition_columns)
    adds = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    today = time.strftime("%Y-%m-%d", time.gmtime(now))
    young_after_ms = (now - options.min_age) * 1000
    small: dict[tuple[str | None, ...], list[dict[str, Any]]] = {}
    for add in adds:
        if add["size_bytes"] < options.target_file_size:
            values = tuple(parquet.partition_value(add[f"partition.{c}"]) for c in columns)
            small.setdefault(values, []).append(add)
    due: list[Partition] = []
    deferred = 0
    for values, files in sorted(small.items(), key=lambda item: tuple(v or "" for v in item[0])):
        closed = DATE_COLUMN in columns and (values[columns.index(DATE_COLUMN)] or today) < today
        old = sorted((a for a in files if closed or a["modification_time"] <= young_after_ms),
                     key=lambda a: (a["modification_time"], unquote(a["path"])))
        if _has_bin(old, options.target_file_size):
            due.append(dict(zip(columns, values, strict=True)))
        else:
            deferred += len(files)
    return due, deferred, len(due) == len(small)


def _has_bin(files: Sequence[dict[str, Any]], target: int) -> bool:
    count = size = 0
    for add in files:
        if count and size + add["size_bytes"] > target:
            if count >= 2:
                return True
            count = size = 0
        count += 1
        size += add["size_bytes"]
    return count >= 2


# --- compaction (delta-rs) -------------------------------------------------------------------

def _claim_state(table: DeltaTable, serial: int, now: float) -> str:
    """`open`, `closed` or `expired`: the state of maintenance claim `serial` in the history."""
    for limit in _CLAIM_SEARCH:
        for commit in table.history(limit):
            note = _maintenance_note(commit)
            if note is None or note.get("claim") != serial:
                continue
            if note.get("operation") != "claim":
                return "closed"
            if _owner_gone(note):
                return "expired"
            return "open" if now < float(note.get("expires", 0)) else "expired"
    return "expired"  # its commit left the searched history (or the log): long past its expiry


def _owner_gone(note: dict[str, Any]) -> bool:
    """Whether the claim's pass ran on this host in a process that no longer exists (a job killed
    during a compaction and restarted): its claim need not wait out its expiry. A pass on another
    host cannot be seen from here and keeps its claim until it expires."""
    if note.get("host") != socket.gethostname() or not isinstance(note.get("pid"), int):
        return False
    return not processes.alive(note["pid"])


def _maintenance_note(commit: dict[str, Any]) -> dict[str, Any] | None:
    raw = commit.get(META_MAINTENANCE)
    try:
        note = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
    return note if isinstance(note, dict) else None


def _claim(table: DeltaTable, options: MaintenanceConfig, report: PassReport, now: float) -> int | None:
    """Claim the table for one compaction; None (noted in `report`) when another holds it."""
    current = table.transaction_version(MAINTENANCE_APP_ID)
    if current is not None and _claim_state(table, current, now) == "open":
        report.notes.append(f"compaction skipped: maintenance claim {current} is held by another pass")
        return None
    serial = (current or 0) + 1
    note = {"operation": "claim", "claim": serial, "owner": str(uuid.uuid4()),
            "host": socket.gethostname(), "pid": os.getpid(),
            "expires": now + options.time_budget + CLAIM_MARGIN_S}
    try:
        table.create_write_transaction([], mode="append", schema=table.schema(),
                                       partition_by=list(table.metadata().partition_columns),
                                       commit_properties=CommitProperties(
                                           custom_metadata={META_MAINTENANCE: json.dumps(note)},
                                           app_transactions=[Transaction(MAINTENANCE_APP_ID, serial)]),
                                       post_commithook_properties=_NO_HOOKS)
    except CommitFailedError as exc:  # another pass claimed `serial` first
        report.notes.append(f"compaction not committed (conflict: {exc})")
        logger.warning("maintenance of %s: compaction claim lost, retried next pass: %s", table.table_uri, exc)
        return None
    table.update_incremental()
    return serial


def _filters(partition: Partition) -> list[tuple[str, str, Any]] | None:
    """deltalake's partition filter for one partition; None when it cannot express it (null)."""
    if any(value is None for value in partition.values()):
        return None
    return [(column, "=", value) for column, value in partition.items()]


def compact(table: DeltaTable, options: MaintenanceConfig, now: float, report: PassReport,
            deadline: float = math.inf) -> None:
    """Compact `table` (as of its loaded version) into `report` with deltalake's optimize; no new
    partition is started after `deadline` (monotonic). A lost claim is noted, not raised."""
    due, report.deferred_files, everything = due_partitions(table, options, now)
    if not due:
        return
    if column_mapping.mode(table) != "none":  # deltalake 1.6 refuses it ("not supported ... yet")
        report.notes.append("compaction skipped: deltalake cannot compact a column-mapped table (Delta's OPTIMIZE "
                            "can: sink.engine delta-spark runs it)")
        return
    serial = _claim(table, options, report, now)
    if serial is None:
        report.deferred_files += len(due)
        return
    # One OPTIMIZE for the whole table when every partition with small files is due, else one
    # per due partition (deltalake's filters are one conjunction, and cannot name a null value).
    targets: list[list[tuple[str, str, Any]] | None] = [None] if everything else []
    if not everything:
        for partition in due:
            filters = _filters(partition)
            if filters is None:
                report.notes.append(f"partition {partition} not compacted: deltalake's optimize "
                                    "cannot select a null partition value")
            else:
                targets.append(filters)
    for number, filters in enumerate(targets):
        if number and time.monotonic() > deadline:  # the first always runs: every pass makes progress
            report.notes.append(f"{len(targets) - number} partitions left for the next pass (time budget)")
            break
        last = number == len(targets) - 1
        note = {"operation": "compaction", "claim": serial, "closes": last}
        metrics = table.optimize.compact(
            partition_filters=filters, target_size=options.target_file_size, max_concurrent_tasks=1,
            commit_properties=CommitProperties(custom_metadata={META_MAINTENANCE: json.dumps(note)}),
            post_commithook_properties=_NO_HOOKS)
        report.compacted_files += int(metrics["numFilesRemoved"])
        report.compacted_bytes += int(json.loads(metrics["filesRemoved"])["totalSize"])
        report.written_files += int(metrics["numFilesAdded"])
    table.update_incremental()
    if _claim_state(table, serial, now) != "closed":  # nothing was committed: release the claim
        _release(table, serial)


def _release(table: DeltaTable, serial: int) -> None:
    note = {"operation": "release", "claim": serial}
    properties = CommitProperties(custom_metadata={META_MAINTENANCE: json.dumps(note)})
    table.create_write_transaction([], mode="append", schema=table.schema(),
                                   partition_by=list(table.metadata().partition_columns),
                                   commit_properties=properties, post_commithook_properties=_NO_HOOKS)
    table.update_incremental()


# --- vacuum, checkpoints, log cleanup ---------------------------------------------------------

def _vacuum(path: str, table: DeltaTable, options: MaintenanceConfig, report: PassReport) -> None:
    """Delete the files removed longer than `vacuum_retention` ago (delta-rs counts whole hours,
    rounded up here). Their tombstones stay in the table state for the table's
    `delta.deletedFileRetentionDuration` (7 days), so vacuum runs (and adds its two commits)
    only while one of them still exists. The candidates are looked up without the commit lock, the
    vacuum's commits made with it."""
    hours = math.ceil(options.vacuum_retention / 3600)
    candidates = table.vacuum(retention_hours=hours, dry_run=True, enforce_retention_duration=False)
    if len(candidates) <= _VACUUM_CHECK_LIMIT:
        filesystem, root = locations.filesystem(table.table_uri)
        infos = filesystem.get_file_info([f"{root}/{path}" for path in candidates])
        candidates = [info.path for info in infos if info.type != fs.FileType.NotFound]
    if not candidates:
        return
    with commit_lock.held(path):
        table.vacuum(retention_hours=hours, dry_run=False, enforce_retention_duration=False,
                     post_commithook_properties=_NO_HOOKS)
        table.update_incremental()
    report.vacuumed_files = len(candidates)


def _last_checkpoint(table: DeltaTable) -> int | None:
    text = read_text(f"{table.table_uri.rstrip('/')}/_delta_log/_last_checkpoint")
    return None if text is None else int(json.loads(text)["version"])


def _checkpoint(table: DeltaTable, options: MaintenanceConfig, report: PassReport) -> None:
    last = _last_checkpoint(table)
    if last is None or table.version() - last >= options.checkpoint_interval:
        table.create_checkpoint()
        report.checkpoint = table.version()


def cleanup_log(table: DeltaTable, options: MaintenanceConfig, now: float, report: PassReport) -> None:
    """Delete the log entries older than `log_retention` of versions below both the newest
    checkpoint (which replaces them) and the newest synclib commit (whose metadata holds the
    offsets a resume from the table needs).

    Hand-written rather than deltalake's `cleanup_metadata`: that one deletes every entry below
    the newest checkpoint older than the table's `delta.logRetentionDuration`, the newest
    synclib commit's included when the table was idle longer than that (maintenance commits
    and a checkpoint above it), and a resume from the table would then find no offsets."""
    below = _last_checkpoint(table)
    newest = latest_synclib_commit(table)
    if below is None:
        return
    if newest is not None:
        below = min(below, int(newest["version"]))
    filesystem, root = locations.filesystem(table.table_uri)
    cutoff_ns = (now - options.log_retention) * 1e9
    for info in filesystem.get_file_info(fs.FileSelector(f"{root}/_delta_log")):
        match = _LOG_ENTRY.fullmatch(info.base_name)
        if match and int(match.group(1)) < below and info.mtime_ns is not None and info.mtime_ns < cutoff_ns:
            filesystem.delete_file(info.path)
            report.log_entries_removed += 1


# --- the forwarder's background thread ------------------------------------------

class MaintenanceThread(BackgroundThread):
    """Runs `run_pass` every `options.interval` on a daemon thread of low CPU priority (Linux
    `setpriority` on the thread); `on_pass` receives each report (the metrics)."""

    def __init__(self, path: str, options: MaintenanceConfig,
                 on_pass: Sequence[Callable[[PassReport], None]] = (),
                 pass_function: Callable[[], PassReport] | None = None) -> None:
        super().__init__("synclib-maintenance")
        self.stop_timeout_s = options.time_budget + 30
        self._pass = pass_function or (lambda: run_pass(path, options))
        self._path = path
        self._options = options
        self._on_pass = list(on_pass)

    def _work(self) -> None:
        with contextlib.suppress(AttributeError, OSError):  # Linux only: elsewhere it would be the process
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        while not self._stopping.wait(self._options.interval):
            try:
                report = self._pass()
            except Exception:
                logger.exception("maintenance pass over %s failed; retried in %gs", self._path,
                                 self._options.interval)
                continue
            for callback in self._on_pass:
                callback(report)
