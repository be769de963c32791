"""Table maintenance with Delta's own commands, for `sink.engine: delta-spark`.

The same pass as `synclib.delta.maintenance.run_pass`, done by Delta itself in the job's Spark
session, so the history holds Delta's own `OPTIMIZE` and `VACUUM START`/`VACUUM END`. Only those
are Spark jobs (they compete with the batches for the cores): what the pass reads of the table
(its properties, the due partitions, the version and live files after it) delta-rs reads from the log.

- `OPTIMIZE ... WHERE <the due partitions>`: the partitions `maintenance.due_partitions` picks
  (read with delta-rs, which has each file's age: Delta's OPTIMIZE selects by partition only),
  files below `target_file_size_mb` bin-packed into files of about that size
  (`spark.databricks.delta.optimize.minFileSize` / `.maxFileSize`). Delta's conflict detection
  fails an OPTIMIZE whose files another commit removed first, so two compactions of the same
  files never both commit (no claim needed, unlike delta-rs), and a blind batch append never
  conflicts with it.
- `VACUUM ... LITE RETAIN n HOURS`, only when its dry run lists a file: LITE deletes only files
  the log removed (as delta-rs's vacuum does), never a file of a batch still being written,
  which a full VACUUM with a short retention would take for an orphan. Below Delta's 7-day
  floor the session's `spark.databricks.delta.retentionDurationCheck.enabled` is turned off.
- checkpoints: Delta's own, after its commits, every `checkpoint_interval` versions (the table
  property `delta.checkpointInterval`, which the pass sets when it differs; a property change
  conflicts with commits running beside it: the delta-spark batch writer retries its
  idempotent write, and a pass that loses fails and is retried).
- log cleanup: `maintenance.cleanup_log`, the same as with delta-rs, and Delta's own is turned
  off (`delta.enableExpiredLogCleanup` false). Delta's cleanup deletes every entry older than
  `delta.logRetentionDuration` below its newest checkpoint, the newest synclib commit's included
  once the table has been idle that long with maintenance commits above it (a resume from the
  table would then find no offsets), and Delta refuses a log retention shorter than the
  tombstones' (`delta.deletedFileRetentionDuration`, 7 days).
"""

from __future__ import annotations

import functools
import logging
import math

from deltalake import DeltaTable
from pyspark.sql import Row, SparkSession

from synclib.delta.engine import fit_delta_to_local_master
from synclib.delta.maintenance import Partition, PassReport, cleanup_log, due_partitions, timed_pass
from synclib.locations import normalize_location
from synclib.settings.job import MaintenanceConfig

logger = logging.getLogger(__name__)

RETENTION_CHECK = "spark.databricks.delta.retentionDurationCheck.enabled"
_DELTA_RETENTION_FLOOR_H = 168  # Delta refuses a shorter VACUUM retention unless RETENTION_CHECK is off


def table_properties(options: MaintenanceConfig) -> dict[str, str]:
    """The Delta table properties that make Delta's own checkpoints and log cleanup follow `options`."""
    return {"delta.checkpointInterval": str(options.checkpoint_interval), "delta.enableExpiredLogCleanup": "false"}


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _predicate(partition: Partition) -> str:
    return " AND ".join(f"`{column}` IS NULL" if value is None else f"`{column}` = {_quote(value)}"
                        for column, value in partition.items())


def optimize_statement(table: str, due: list[Partition], everything: bool) -> str:
    """`OPTIMIZE table [WHERE (p1) OR (p2) ...]` for the due partitions."""
    if everything or not due or not due[0]:
        return f"OPTIMIZE {table}"
    return f"OPTIMIZE {table} WHERE " + " OR ".join(f"({_predicate(p)})" for p in due)


def _first_row(spark: SparkSession, statement: str) -> Row:
    """The first row of a Delta command that always returns one."""
    row = spark.sql(statement).first()
    if row is None:
        raise RuntimeError(f"{statement} returned no row")
    return row


def _set_properties(spark: SparkSession, table: str, rs_table: DeltaTable, options: MaintenanceConfig) -> None:
    """Set the properties `options` want that the table (as `rs_table` read it) lacks."""
    current = rs_table.metadata().configuration
    wanted = table_properties(options)
    changed = {k: v for k, v in wanted.items() if current.get(k) != v}
    if changed:
        assignments = ", ".join(f"{_quote(k)} = {_quote(v)}" for k, v in changed.items())
        spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ({assignments})")
        logger.info("maintenance of %s: table properties set: %s", table, changed)


def run_pass(spark: SparkSession, path: str, options: MaintenanceConfig, now: float | None = None) -> PassReport:
    """One pass over the Delta table at `path` with Delta's commands in `spark` (see the module)."""
    return timed_pass(path, now, functools.partial(_pass, spark, path, options))


def _pass(spark: SparkSession, path: str, options: MaintenanceConfig, rs_table: DeltaTable, now: float,
          report: PassReport) -> None:
    fit_delta_to_local_master(spark)
    table = f"delta.`{normalize_location(path)}`"
    _set_properties(spark, table, rs_table, options)
    due, report.deferred_files, everything = due_partitions(rs_table, options, now)
    if due:
        spark.conf.set("spark.databricks.delta.optimize.minFileSize", str(options.target_file_size))
        spark.conf.set("spark.databricks.delta.optimize.maxFileSize", str(options.target_file_size))
        metrics = _first_row(spark, optimize_statement(table, due, everything))["metrics"]
        report.compacted_files = int(metrics["numFilesRemoved"])
        report.written_files = int(metrics["numFilesAdded"])
        report.compacted_bytes = int(metrics["filesRemoved"]["totalSize"])
    hours = math.ceil(options.vacuum_retention / 3600)
    if hours < _DELTA_RETENTION_FLOOR_H and spark.conf.get(RETENTION_CHECK, "true") != "false":
        spark.conf.set(RETENTION_CHECK, "false")
    vacuum = f"VACUUM {table} LITE RETAIN {hours} HOURS"
    candidates = spark.sql(f"{vacuum} DRY RUN").count()
    if candidates:
        spark.sql(vacuum).collect()
        report.vacuumed_files = candidates
    rs_table.update_incremental()  # the pass's own commits, read from the log (not a Spark job each)
    if options.log_cleanup:
        cleanup_log(rs_table, options, now, report)
    report.version = rs_table.version()
    report.live_files = len(rs_table.file_uris())
