"""Delta sink, exactly once: one Delta commit per micro-batch, with the batch's Kafka offsets.

Every commit carries the application transaction `(app_id, batchId)` (app_id from the
checkpoint's query id, see `synclib.spark_checkpoint`) and commit metadata `synclib.*` with the
batch's end offsets read from Spark's offset log. A batch whose transaction version is
already in the table is skipped: that is the replay after a crash between the Delta
commit and Spark's checkpoint commit. The table alone therefore says what it holds, and a
job with a new checkpoint resumes from `synclib.delta.table.read_table_offsets`.

Two writers, chosen by `engine`:

- `delta-rs`: a PySpark Python streaming data source (format `synclib_delta`). Executor
  tasks write Parquet files into the table directory in parallel; the driver commits all
  their add actions in one Delta commit with the `deltalake` package. On the direct write
  path the source's read tasks write the files and `DirectBatchCommit` (`foreachBatch`)
  collects their add actions and makes the same commit in the driver.
- `delta-spark`: Spark's native Delta writer in `foreachBatch`, with the idempotent-write
  options `txnAppId`/`txnVersion` and the same metadata as JSON in `userMetadata`.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Schema, Transaction
from deltalake.transaction import AddAction, PostCommitHookProperties, RemoveAction, create_table_with_add_actions
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.readwriter import DataStreamWriter
from pyspark.sql.types import StructType

from synclib import __version__, spark_checkpoint
from synclib.compat import py4j as py4j_compat
from synclib.compat import pyspark as spark_compat
from synclib.delta import commit_lock, direct, log_append, parquet
from synclib.delta.direct import TableFiles
from synclib.delta.table import (
    DATE_COLUMN,
    META_APP_ID,
    META_BATCH_ID,
    META_OFFSETS,
    META_VERSION,
    current_table,
    holds_batch,
    latest_metadata,
    latest_synclib_commit,
    open_table,
    parse_offsets,
    synclib_metadata,
)
from synclib.locations import normalize_location, on_object_store
from synclib.offsets import parse_offsets_json
from synclib.settings.values import AUTO, DELTA_RS, DELTA_SPARK, ENGINES, parse_bool

logger = logging.getLogger(__name__)

FORMAT = "synclib_delta"

_DELTA_SPARK_CLASS = "io.delta.tables.DeltaTable"


def commit_metadata(app_id: str, batch_id: int, offsets: str | None) -> dict[str, Any]:
    """The `synclib.*` commit metadata of one micro-batch (`offsets`: the source's JSON)."""
    return {META_APP_ID: app_id, META_BATCH_ID: batch_id, META_OFFSETS: offsets,
            META_VERSION: __version__}


# --- delta-rs writer: the `synclib_delta` Python streaming data source -------------------

def arrow_schema(schema: StructType) -> pa.Schema:
    """The Delta table's Arrow schema for a Spark schema (timestamps as UTC microseconds)."""
    return spark_compat.to_arrow_schema(schema)


@dataclass
class AddedFiles(WriterCommitMessage):
    """What one write task added to the table directory."""

    files: list[AddAction]


class DeltaStreamWriter(DataSourceStreamArrowWriter):
    """Tasks write Parquet files; `commit` adds them to the table in one Delta commit.

    Executors write the files themselves, so the table path must be reachable from them
    (shared or object storage; pyarrow filesystems, credentials from the environment).
    Files of a skipped (replayed) or aborted batch are deleted. The commit keeps the table
    open in its process and reads only the commits since the previous batch
    (`current_table`) instead of reloading the table; with option
    `logCheckpoints` false it leaves Delta log checkpoints to maintenance. On local storage and
    S3, a batch after the table's newest version, which is this process's own commit, is
    appended without deltalake (`synclib.delta.log_append`: no read of the log). On an object
    store the commit holds the table's host-wide lock (`synclib.delta.commit_lock`).
    """

    def __init__(self, schema: StructType, options: Mapping[str, str]) -> None:
        self._path = options["path"]
        self._checkpoint = options["checkpointLocation"]
        self._partition_by: list[str] = json.loads(options.get("partitionBy") or "[]")
        self._log_checkpoints = parse_bool(options.get("logCheckpoints", "true"))
        self._run_id = options.get("runId")
        self._schema = arrow_schema(schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AddedFiles:
        return AddedFiles(parquet.write_files(iterator, self._path, self._schema, self._partition_by))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        files = [f for m in messages if isinstance(m, AddedFiles) for f in m.files]
        app_id = spark_checkpoint.app_id(self._checkpoint)
        offsets = spark_checkpoint.batch_offsets(self._checkpoint, batchId)
        with commit_lock.held(self._path) as generation:  # on an object store: no other commit of this host's beside it
            self._commit(files, batchId, app_id, offsets, generation)

    def _commit(self, files: list[AddAction], batchId: int, app_id: str, offsets: str | None,
                generation: int | None) -> None:
        tail = log_append.previous_batch(self._path, app_id, batchId, generation)
        if tail is not None and self._append(tail, files, app_id, batchId, offsets, generation):
            return
        table = current_table(self._path)
        if table is not None:
            if holds_batch(table, app_id, batchId):
                parquet.delete_files(self._path, files)
                check_replay(table, self._path, app_id, batchId, offsets)
                return
            if not files and _same_offsets(offsets, latest_metadata(table)):
                return
            log_append.learn(self._path, table, app_id, generation)
            tail = log_append.previous_batch(self._path, app_id, batchId, generation)
            if tail is not None and self._append(tail, files, app_id, batchId, offsets, generation):
                return
        log_append.forget(self._path)  # the version deltalake commits at is not learned here
        if self._run_id:  # another run took the checkpoint over: it commits this batch, not us
            spark_checkpoint.check_run(self._checkpoint, self._run_id)
        properties = CommitProperties(
            custom_metadata=commit_metadata(app_id, batchId, offsets),
            app_transactions=[Transaction(app_id, batchId)])
        schema = Schema.from_arrow(self._schema)
        hooks = PostCommitHookProperties(create_checkpoint=self._log_checkpoints,
                                         cleanup_expired_logs=None if self._log_checkpoints else False)
        if table is None:
            create_table_with_add_actions(self._path, schema, files, mode="error",
                                          partition_by=self._partition_by,
                                          commit_properties=properties, post_commithook_properties=hooks)
        else:
            actions: list[AddAction | RemoveAction] = [*files]
            table.create_write_transaction(actions, mode="append", schema=schema,
                                           partition_by=self._partition_by,
                                           commit_properties=properties, post_commithook_properties=hooks)
        logger.info("batch %d of %s: %d files committed to %s", batchId, app_id, len(files),
                    self._path)

    def _append(self, tail: log_append.Tail, files: list[AddAction], app_id: str, batch_id: int,
                offsets: str | None, generation: int | None) -> bool:
        """Batch `batch_id` committed after `tail`, this process's own newest version, without
        deltalake (`synclib.delta.log_append`); False when another commit took the version or
        deltalake's commit is to write the log checkpoint due at it."""
        if not files and _same_offsets(offsets, {META_OFFSETS: tail.offsets}):
            return True
        if self._log_checkpoints and tail.checkpoint_due():
            return False
        if self._run_id:
            spark_checkpoint.check_run(self._checkpoint, self._run_id)
        if not log_append.append(self._path, tail, files, batch_id, offsets, self._partition_by,
                                 commit_metadata(app_id, batch_id, offsets), generation):
            return False
        logger.info("batch %d of %s: %d files committed to %s (version %d)", batch_id, app_id, len(files),
                    self._path, tail.version + 1)
        return True

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        parquet.delete_files(self._path, [f for m in messages if isinstance(m, AddedFiles)
                                          for f in m.files])


class DirectBatchCommit:
    """The direct write path's sink (`synclib.delta.direct`), a `foreachBatch` function: the
    batch's rows are the add actions of the files its read tasks wrote; they are collected to
    the driver and committed there by the row path's `commit`. No sink task and no Python
    process for the commit: a one-row batch costs one Python worker instead of three."""

    def __init__(self, writer: DeltaStreamWriter) -> None:
        self._writer = writer

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        self._writer.commit([AddedFiles(direct.add_actions(batch.toArrow().to_batches()))], batch_id)


class DeltaSink(DataSource):
    """Format `synclib_delta`: options `path`, `checkpointLocation`, `partitionBy` (JSON list),
    `logCheckpoints`, `runId`."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def streamWriter(self, schema: StructType, overwrite: bool) -> DeltaStreamWriter:
        return DeltaStreamWriter(schema, self.options)


# --- delta-spark writer ------------------------------------------------------------------

class DeltaSparkBatchWriter:
    """`foreachBatch` function: Spark's Delta writer, idempotent by `txnAppId`/`txnVersion`.

    Delta skips a write whose txnVersion is not above the app's last one (the replay after a
    crash between the Delta commit and Spark's checkpoint commit); the `synclib.*` metadata
    goes to the commit's `userMetadata` as JSON. A write that loses a conflict to a commit
    beside it (a table property change by maintenance, say) is retried: being idempotent, a
    retry can neither duplicate nor lose the batch. A batch the table holds is checked
    (`check_replay`, read with delta-rs) and skipped before Delta is asked; with `run_id`, the
    checkpoint's run marker is checked before each write, and the batch after one this writer
    committed itself is not looked up: only another run can have committed it, and that run wrote
    its marker before it started (no read of the log by synclib on the way to Delta's commit).
    """

    def __init__(self, path: str, checkpoint_location: str, partition_by: Sequence[str],
                 run_id: str | None = None) -> None:
        self._path = path
        self._checkpoint = checkpoint_location
        self._partition_by = list(partition_by)
        self._run_id = run_id
        self._committed: int | None = None  # the batch id this writer committed last

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        app_id = spark_checkpoint.app_id(self._checkpoint)
        offsets = spark_checkpoint.batch_offsets(self._checkpoint, batch_id)
        table = None if self._run_id and self._committed == batch_id - 1 else current_table(self._path)
        if table is not None and holds_batch(table, app_id, batch_id):  # Delta would skip it too
            check_replay(table, self._path, app_id, batch_id, offsets)
            return
        if self._run_id:
            spark_checkpoint.check_run(self._checkpoint, self._run_id)
        writer = (batch.write.format("delta").mode("append")
                  .option("txnAppId", app_id).option("txnVersion", batch_id)
                  .option("userMetadata", json.dumps(commit_metadata(app_id, batch_id, offsets))))
        if self._partition_by:
            writer = writer.partitionBy(*self._partition_by)
        for attempt in range(1, _CONFLICT_RETRIES + 1):
            try:
                writer.save(self._path)
                self._committed = batch_id
                return
            except Exception as exc:
                if attempt == _CONFLICT_RETRIES or not _delta_conflict(exc):
                    raise
                logger.warning("batch %d of %s: Delta commit conflict (%s), retrying", batch_id, app_id,
                               _condition(exc) or str(exc).strip().splitlines()[0][:200])


_CONFLICT_RETRIES = 5
# Delta's error conditions for a commit that lost to a concurrent one (io.delta.exceptions.*).
_CONFLICTS = ("DELTA_CONCURRENT_", "DELTA_METADATA_CHANGED", "DELTA_PROTOCOL_CHANGED")


def _condition(exc: BaseException) -> str:
    get = getattr(exc, "getCondition", None) or getattr(exc, "getErrorClass", None)
    return str(get() or "") if callable(get) else ""


def _delta_conflict(exc: BaseException) -> bool:
    condition = _condition(exc)
    if condition:
        return condition.startswith(_CONFLICTS)
    return any(name in str(exc) for name in ("io.delta.exceptions.Concurrent", "MetadataChangedException",
                                             "ProtocolChangedException"))


# On a local master Delta's default of 50 tasks per snapshot reconstruction (fit for a cluster)
# costs every batch commit and maintenance pass seconds of task scheduling on a few cores.
_SNAPSHOT_PARTITIONS = "spark.databricks.delta.snapshotPartitions"


def fit_delta_to_local_master(spark: SparkSession) -> None:
    """Fewer tasks per Delta snapshot reconstruction on a local master (when not set)."""
    local = (spark.conf.get("spark.master", "") or "").startswith("local")
    if local and spark.conf.get(_SNAPSHOT_PARTITIONS, None) is None:
        spark.conf.set(_SNAPSHOT_PARTITIONS, "2")


# Delta writes a checksum file (`<version>.crc`) after each commit: on S3A through a temporary
# object, probes and a copy, 10 requests of a one-row batch's 28 in the log (5 LIST or PUT); it only
# speeds up and validates reading the snapshot, which the batch's commit does not need.
_CHECKSUM_FILES = "spark.databricks.delta.writeChecksumFile.enabled"


def fit_delta_to_object_store(spark: SparkSession, path: str) -> None:
    """No Delta checksum files for a table on an object store (when not set)."""
    if on_object_store(path) and spark.conf.get(_CHECKSUM_FILES, None) is None:
        spark.conf.set(_CHECKSUM_FILES, "false")


def delta_spark_available(spark: SparkSession) -> bool | None:
    """Whether the session's JVM can load Delta's classes; None when there is no JVM to ask
    (Spark Connect; logged once by `synclib.compat.pyspark.jvm`)."""
    jvm = spark_compat.jvm(spark, "sink.engine auto: Delta's JVM classes not looked for "
                                  "(delta-spark on Databricks, otherwise delta-rs)")
    return None if jvm is None else py4j_compat.class_loadable(jvm, _DELTA_SPARK_CLASS)


def resolve_engine(spark: SparkSession, engine: str = AUTO) -> str:
    """`delta-rs` or `delta-spark` for `engine` (`auto`: delta-spark when Delta's JVM classes
    are present, or on Spark Connect inside Databricks; otherwise delta-rs)."""
    if engine not in ENGINES:
        raise ValueError(f"sink engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    if engine == DELTA_RS:
        return DELTA_RS
    available = delta_spark_available(spark)
    if engine == DELTA_SPARK:
        if available is False:
            raise RuntimeError(f"sink engine delta-spark needs Delta's JVM classes "
                               f"({_DELTA_SPARK_CLASS}) on the classpath; use delta-rs instead")
        return DELTA_SPARK
    if available is None:
        return DELTA_SPARK if os.environ.get("DATABRICKS_RUNTIME_VERSION") else DELTA_RS
    return DELTA_SPARK if available else DELTA_RS


# --- starting the stream -----------------------------------------------------------------

def utc_date(timestamp: Column) -> Column:
    """The UTC calendar date of a timestamp, whatever the session time zone."""
    return F.date_from_unix_date(F.floor(F.unix_seconds(timestamp) / 86_400).cast("int"))


@dataclass(frozen=True)
class DeltaStream:
    """Where and how a streaming query writes its Delta table: the settings `start_delta_stream`
    and the dead-letter sink share. `partition_by_date` adds a `date` column (UTC date of
    `timestamp`) and partitions by it after `partition_by`. `trigger` holds keyword arguments for
    `DataStreamWriter.trigger`, e.g. `{"availableNow": True}` or `{"processingTime": "10 seconds"}`.
    `log_checkpoints` false: delta-rs batch commits write no Delta log checkpoints (maintenance
    writes them). `run_id`: each commit first checks the checkpoint's run marker
    (`synclib.spark_checkpoint.check_run`)."""

    path: str
    checkpoint_location: str
    engine: str = AUTO
    partition_by: tuple[str, ...] = ()
    partition_by_date: bool = False
    trigger: Mapping[str, Any] | None = None
    query_name: str | None = None
    log_checkpoints: bool = True
    run_id: str | None = None  # the job's run: no commit once the checkpoint's run marker names another

    @property
    def table_path(self) -> str:
        return normalize_location(self.path)

    @property
    def checkpoint(self) -> str:
        return normalize_location(self.checkpoint_location)

    def partition_columns(self, columns: Sequence[str]) -> list[str]:
        """The table's partition columns for a stream of `columns` (before the date column is
        added); ValueError when the stream has the date column already or lacks a partition column."""
        if self.partition_by_date and DATE_COLUMN in columns:
            raise ValueError(f"partition_by_date adds column {DATE_COLUMN!r}, which the stream already has")
        missing = [c for c in self.partition_by if c not in columns]
        if missing:
            raise ValueError(f"partition columns not in the stream: {', '.join(missing)}")
        return [*self.partition_by, *([DATE_COLUMN] if self.partition_by_date else [])]

    def writer(self, df: DataFrame) -> DataStreamWriter:
        """`df.writeStream` with the checkpoint location, and the trigger and query name when given."""
        writer = df.writeStream.option("checkpointLocation", self.checkpoint)
        if self.query_name:
            writer = writer.queryName(self.query_name)
        if self.trigger:
            writer = writer.trigger(**self.trigger)
        return writer


def start_delta_stream(df: DataFrame, stream: DeltaStream,
                       direct: Callable[[Mapping[str, str]], DataFrame] | None = None) -> StreamingQuery:
    """Start writing the streaming `df` to the Delta table of `stream`, exactly once.

    `direct`, for a `df` straight from its source: loads the same stream as the direct write
    path's add actions, given the reader options of `synclib.delta.direct.TableFiles`; used
    when the engine is delta-rs.
    """
    partition_by = stream.partition_columns(df.columns)
    if stream.partition_by_date:
        df = df.withColumn(DATE_COLUMN, utc_date(F.col("timestamp")))
    spark = df.sparkSession
    chosen = resolve_engine(spark, stream.engine)
    table_path = stream.table_path
    check_table_layout(table_path, df.schema, partition_by)
    direct_path = direct is not None and chosen == DELTA_RS
    logger.info("writing %s with %s%s (partitioned by %s), checkpoint %s", stream.path, chosen,
                ", read tasks writing the files" if direct_path else "", partition_by or "nothing", stream.checkpoint)
    if chosen == DELTA_SPARK:
        fit_delta_to_local_master(spark)
        fit_delta_to_object_store(spark, table_path)
        batch_writer = DeltaSparkBatchWriter(table_path, stream.checkpoint, partition_by, stream.run_id)
        return stream.writer(df).foreachBatch(batch_writer).start()
    options = {"path": table_path, "checkpointLocation": stream.checkpoint,
               "partitionBy": json.dumps(partition_by), "logCheckpoints": str(stream.log_checkpoints).lower()}
    if stream.run_id:
        options["runId"] = stream.run_id
    if direct is not None:
        files = direct(TableFiles(table_path, arrow_schema(df.schema), tuple(partition_by)).options())
        return stream.writer(files).foreachBatch(DirectBatchCommit(DeltaStreamWriter(df.schema, options))).start()
    spark.dataSource.register(DeltaSink)
    return stream.writer(df).format(FORMAT).options(**options).start()


class ReplayMismatch(RuntimeError):
    """A batch the table holds already was planned with other offsets than the table recorded."""


def check_replay(table: DeltaTable, path: str, app_id: str, batch_id: int, offsets: str | None) -> None:
    """A batch the table holds already (a replay after a crash between the Delta commit and
    Spark's) is skipped; it must be the batch the table holds: its end offsets those recorded
    with its commit. Two runs of one checkpoint that planned batch `batch_id` differently would
    otherwise lose or duplicate the offsets between the two ends. Unchecked (logged) when the
    commit's log entry has expired."""
    commit = latest_synclib_commit(table, app_id, batch_id)
    if commit is None:
        logger.info("batch %d of %s is already in %s: skipped (its commit's log entry has expired)",
                    batch_id, app_id, path)
        return
    recorded = synclib_metadata(commit)
    if not _same_offsets(offsets, recorded):
        raise ReplayMismatch(
            f"batch {batch_id} of {app_id} is in {path} (version {commit.get('version')}) with end offsets "
            f"{(recorded or {}).get(META_OFFSETS)}, but the checkpoint's offsets/{batch_id} says {offsets}: two runs "
            f"planned this batch differently; stop every run of this checkpoint and start one")
    logger.info("batch %d of %s is already in %s: skipped", batch_id, app_id, path)


def _same_offsets(offsets: str | None, metadata: Mapping[str, Any] | None) -> bool:
    if metadata is None:
        return False
    return (parse_offsets_json(offsets) if offsets else None) == parse_offsets(metadata)


def _columns(schema: Schema) -> list[str]:
    return [f"{f['name']} {json.dumps(f['type'])}" for f in json.loads(schema.to_json())["fields"]]


def check_table_layout(path: str, schema: StructType, partition_by: Sequence[str]) -> None:
    """Fail unless an existing table at `path` has the stream's columns and partitioning
    (delta-rs would otherwise accept the files and silently hide or null columns)."""
    table = open_table(path)
    if table is None:
        return
    ours, theirs = _columns(Schema.from_arrow(arrow_schema(schema))), _columns(table.schema())
    if ours != theirs:
        raise ValueError(f"the stream's columns differ from table {path}'s: only in the stream "
                         f"{[c for c in ours if c not in theirs]}, only in the table "
                         f"{[c for c in theirs if c not in ours]} (or in another order)")
    if list(table.metadata().partition_columns) != list(partition_by):
        raise ValueError(f"table {path} is partitioned by {table.metadata().partition_columns}, "
                         f"the stream by {list(partition_by)}")
