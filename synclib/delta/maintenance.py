"""Delta table maintenance: compaction, vacuum, log checkpoints and expired-log cleanup.

A forwarder adds one Delta version and a few small files per micro-batch. `run_pass` keeps
its table healthy with delta-rs (no Spark):

- compaction: per partition, files smaller than the target size are bin-packed (oldest
  first) into files of about the target size and swapped in one commit whose actions have
  `dataChange=false`. Files younger than `min_age` are left alone so compaction never
  rewrites what the batch being written sits next to; in closed dates (the `date` partition
  column below today, UTC) every small file is compacted;
- vacuum of the files compaction removed, once older than `vacuum_retention` (tombstones
  only: files of a batch still being written are never touched);
- a log checkpoint every `checkpoint_interval` versions, and expired-log cleanup: log
  entries older than `log_retention` below the newest checkpoint are deleted (every
  update of a table lists its log on local and HDFS storage: a long log makes every batch
  commit slower, about 5 us per log entry here).

Exactly once is unaffected: batch commits are blind appends, which delta-rs retries past a
compaction commit (and a compaction past a batch commit), so neither is lost; compaction
keeps every row and the application transactions live in the table state (kept by
checkpoints). The offsets resume-from-table reads are the newest synclib commit's
metadata (`synclib.delta.table.latest_synclib_commit`): maintenance commits carry none and are
passed over, and log cleanup never removes that commit's log entry.

The settings are `sink.maintenance` (`MaintenanceConfig`). `MaintenanceThread` runs passes
in the forwarder's driver on a low-priority thread of its own, each pass under a time
budget; `python -m synclib maintain` runs one pass.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import CommitFailedError
from deltalake.transaction import AddAction, PostCommitHookProperties, RemoveAction
from pyarrow import fs

from synclib.delta import checkpoint, parquet
from synclib.delta.table import DATE_COLUMN, latest_synclib_commit, open_table
from synclib.settings.job import MaintenanceConfig

logger = logging.getLogger(__name__)

META_MAINTENANCE = "synclib.maintenance"
MAINTENANCE_APP_ID = "synclib-maintenance"  # the application transaction of compaction commits
COMPACTED_PREFIX = "compacted"  # file name prefix of compaction's output
_NO_HOOKS = PostCommitHookProperties(create_checkpoint=False, cleanup_expired_logs=False)
_VACUUM_CHECK_LIMIT = 10_000  # vacuum candidates looked up one by one (more: vacuum runs anyway)
_LOG_ENTRY = re.compile(r"([0-9]{20})\.(json|crc|checkpoint(\.[0-9]+\.[0-9]+)?\.parquet)")


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


@dataclass
class _Bin:
    partition: dict[str, str | None]
    files: list[dict[str, Any]]


def run_pass(path: str, options: MaintenanceConfig, now: float | None = None) -> PassReport:
    """One maintenance pass over the Delta table at `path` (compaction, vacuum, checkpoint,
    log cleanup); a compaction that loses a conflict is noted in the report and logged, and
    retried by the next pass."""
    started = time.monotonic()
    report = PassReport()
    table = open_table(path)
    if table is None:
        return report
    now = time.time() if now is None else now
    compact(table, options, now, report, deadline=started + options.time_budget)
    _vacuum(table, options, report)
    _checkpoint(table, options, report)
    if options.log_cleanup:
        _cleanup_log(table, options, now, report)
    report.version = table.version()
    report.live_files = len(table.file_uris())
    report.seconds = time.monotonic() - started
    logger.info("%s", report.summary())
    return report


# --- compaction -----------------------------------------------------------------------------

def _plan(table: DeltaTable, options: MaintenanceConfig, now: float) -> tuple[list[_Bin], int]:
    """The bins to compact (oldest files first, at most the target size each) and how many
    small files are left alone (too young)."""
    columns = list(table.metadata().partition_columns)
    adds = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    for add in adds:  # as in the log: percent-encoded; the file's own path is what is read and removed
        add["path"] = unquote(add["path"])
    today = time.strftime("%Y-%m-%d", time.gmtime(now))
    young_after_ms = (now - options.min_age) * 1000
    partitions: dict[tuple[str | None, ...], list[dict[str, Any]]] = {}
    deferred = 0
    for add in adds:
        if add["size_bytes"] >= options.target_file_size:
            continue
        values = tuple(parquet.partition_value(add[f"partition.{c}"]) for c in columns)
        closed = DATE_COLUMN in columns and (values[columns.index(DATE_COLUMN)] or today) < today
        if not closed and add["modification_time"] > young_after_ms:
            deferred += 1
            continue
        partitions.setdefault(values, []).append(add)
    bins: list[_Bin] = []
    for values, files in sorted(partitions.items(), key=lambda item: tuple(v or "" for v in item[0])):
        files.sort(key=lambda add: (add["modification_time"], add["path"]))
        current: list[dict[str, Any]] = []
        size = 0
        for add in files:
            if current and size + add["size_bytes"] > options.target_file_size:
                bins.append(_Bin(dict(zip(columns, values, strict=True)), current))
                current, size = [], 0
            current.append(add)
            size += add["size_bytes"]
        bins.append(_Bin(dict(zip(columns, values, strict=True)), current))
    return [b for b in bins if len(b.files) >= 2], deferred


def _rewrite(filesystem: fs.FileSystem, root: str, schema: pa.Schema, target: _Bin) -> AddAction:
    """Write the rows of `target`'s files into one new file (row groups streamed through)."""
    part = parquet.ParquetPart(filesystem, root, schema, target.partition, prefix=COMPACTED_PREFIX)
    try:
        for add in target.files:
            with filesystem.open_input_file(f"{root}/{add['path']}") as source:
                reader = pq.ParquetFile(source)
                for group in range(reader.num_row_groups):
                    part.write(reader.read_row_group(group).cast(schema))
    except BaseException:
        part.discard()
        raise
    return part.close(data_change=False)


def compact(table: DeltaTable, options: MaintenanceConfig, now: float, report: PassReport,
            deadline: float = math.inf) -> None:
    """Compact `table` as of its loaded version into `report`; no new bin is started after
    `deadline` (monotonic). A conflict with another compaction is noted, not raised."""
    bins, report.deferred_files = _plan(table, options, now)
    if not bins:
        return
    columns = list(table.metadata().partition_columns)
    schema = pa.schema([f for f in pa.schema(table.schema().to_arrow()) if f.name not in columns])
    filesystem, root = fs.FileSystem.from_uri(checkpoint.normalize_location(table.table_uri))
    written: list[AddAction] = []
    removed: list[RemoveAction] = []
    try:
        for number, target in enumerate(bins):
            if time.monotonic() > deadline:
                report.deferred_files += sum(len(b.files) for b in bins[number:])
                break
            written.append(_rewrite(filesystem, root, schema, target))
            deleted_ms = int(time.time() * 1000)
            removed += [RemoveAction(path=add["path"], data_change=False, deletion_timestamp=deleted_ms,
                                     size=add["size_bytes"], partition_values=target.partition)
                        for add in target.files]
    except BaseException:
        parquet.delete_files(table.table_uri, written)
        raise
    if not written:
        return
    metadata = {META_MAINTENANCE: json.dumps({"operation": "compaction", "removed": len(removed),
                                              "added": len(written)})}
    # delta-rs does not find two compactions removing the same files in conflict (the rows
    # would be doubled); an application transaction of their own serializes them.
    serial = Transaction(MAINTENANCE_APP_ID, (table.transaction_version(MAINTENANCE_APP_ID) or 0) + 1)
    try:
        table.create_write_transaction([*written, *removed], mode="append", schema=table.schema(),
                                       partition_by=columns,
                                       commit_properties=CommitProperties(custom_metadata=metadata,
                                                                          app_transactions=[serial]),
                                       post_commithook_properties=_NO_HOOKS)
    except CommitFailedError as exc:  # e.g. another maintenance pass removed the same files
        parquet.delete_files(table.table_uri, written)
        report.deferred_files += len(removed)
        report.notes.append(f"compaction not committed (conflict: {exc})")
        logger.warning("maintenance of %s: compaction not committed, retried next pass: %s", table.table_uri, exc)
        table.update_incremental()
        return
    table.update_incremental()
    report.compacted_files += len(removed)
    report.compacted_bytes += sum(r.size or 0 for r in removed)
    report.written_files += len(written)


# --- vacuum, checkpoints, log cleanup ---------------------------------------------------------

def _vacuum(table: DeltaTable, options: MaintenanceConfig, report: PassReport) -> None:
    """Delete the files removed longer than `vacuum_retention` ago (delta-rs counts whole hours,
    rounded up here). Their tombstones stay in the table state for the table's
    `delta.deletedFileRetentionDuration` (7 days), so vacuum runs (and adds its two commits)
    only while one of them still exists."""
    hours = math.ceil(options.vacuum_retention / 3600)
    candidates = table.vacuum(retention_hours=hours, dry_run=True, enforce_retention_duration=False)
    if len(candidates) <= _VACUUM_CHECK_LIMIT:
        filesystem, root = fs.FileSystem.from_uri(checkpoint.normalize_location(table.table_uri))
        infos = filesystem.get_file_info([f"{root}/{path}" for path in candidates])
        candidates = [info.path for info in infos if info.type != fs.FileType.NotFound]
    if not candidates:
        return
    table.vacuum(retention_hours=hours, dry_run=False, enforce_retention_duration=False,
                 post_commithook_properties=_NO_HOOKS)
    report.vacuumed_files = len(candidates)
    table.update_incremental()


def _last_checkpoint(table: DeltaTable) -> int | None:
    filesystem, root = fs.FileSystem.from_uri(checkpoint.normalize_location(table.table_uri))
    try:
        with filesystem.open_input_stream(f"{root}/_delta_log/_last_checkpoint") as stream:
            return int(json.loads(stream.read())["version"])
    except FileNotFoundError:
        return None


def _checkpoint(table: DeltaTable, options: MaintenanceConfig, report: PassReport) -> None:
    last = _last_checkpoint(table)
    if last is None or table.version() - last >= options.checkpoint_interval:
        table.create_checkpoint()
        report.checkpoint = table.version()


def _cleanup_log(table: DeltaTable, options: MaintenanceConfig, now: float, report: PassReport) -> None:
    """Delete the log entries older than `log_retention` of versions below both the newest
    checkpoint (which replaces them) and the newest synclib commit (whose metadata holds the
    offsets a resume from the table needs)."""
    below = _last_checkpoint(table)
    newest = latest_synclib_commit(table)
    if below is None:
        return
    if newest is not None:
        below = min(below, int(newest["version"]))
    filesystem, root = fs.FileSystem.from_uri(checkpoint.normalize_location(table.table_uri))
    cutoff_ns = (now - options.log_retention) * 1e9
    for info in filesystem.get_file_info(fs.FileSelector(f"{root}/_delta_log")):
        match = _LOG_ENTRY.fullmatch(info.base_name)
        if match and int(match.group(1)) < below and info.mtime_ns is not None and info.mtime_ns < cutoff_ns:
            filesystem.delete_file(info.path)
            report.log_entries_removed += 1


# --- the forwarder's background thread and delta-spark ------------------------------------------

class MaintenanceThread:
    """Runs `run_pass` every `options.interval` on a daemon thread of low CPU priority (Linux
    `setpriority` on the thread); `on_pass` receives each report (progress output, metrics)."""

    def __init__(self, path: str, options: MaintenanceConfig,
                 on_pass: Sequence[Callable[[PassReport], None]] = (),
                 pass_function: Callable[[], PassReport] | None = None) -> None:
        self._pass = pass_function or (lambda: run_pass(path, options))
        self._path = path
        self._options = options
        self._on_pass = list(on_pass)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="synclib-maintenance", daemon=True)

    def __enter__(self) -> MaintenanceThread:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=self._options.time_budget + 30)

    def _run(self) -> None:
        with contextlib.suppress(AttributeError, OSError):  # Linux only: elsewhere it would be the process
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        while not self._stop.wait(self._options.interval):
            try:
                report = self._pass()
            except Exception:
                logger.exception("maintenance pass over %s failed; retried in %gs", self._path,
                                 self._options.interval)
                continue
            for callback in self._on_pass:
                callback(report)


def spark_pass(spark: Any, path: str, options: MaintenanceConfig) -> PassReport:
    """One pass with Delta's own SQL (sink.engine delta-spark): OPTIMIZE (closed dates only when
    the table is partitioned by date: Delta cannot leave young files alone), then VACUUM;
    Delta writes its log checkpoints and cleans its log itself."""
    started = time.monotonic()
    table = f"delta.`{checkpoint.normalize_location(path)}`"
    columns = spark.sql(f"DESCRIBE DETAIL {table}").first()["partitionColumns"]
    today = time.strftime("%Y-%m-%d", time.gmtime())
    where = f" WHERE {DATE_COLUMN} < '{today}'" if DATE_COLUMN in columns else ""
    metrics = spark.sql(f"OPTIMIZE {table}{where}").first()["metrics"]
    spark.sql(f"VACUUM {table} RETAIN {math.ceil(options.vacuum_retention / 3600)} HOURS")
    detail = spark.sql(f"DESCRIBE DETAIL {table}").first()
    report = PassReport(seconds=time.monotonic() - started, compacted_files=int(metrics["numFilesRemoved"]),
                        written_files=int(metrics["numFilesAdded"]), live_files=int(detail["numFiles"]),
                        version=int(spark.sql(f"DESCRIBE HISTORY {table} LIMIT 1").first()["version"]))
    logger.info("%s", report.summary())
    return report
