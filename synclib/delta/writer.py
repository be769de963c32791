"""The delta-rs writer: Spark's tasks write Parquet files, the driver commits them with `deltalake`.

Format `synclib_delta`, a PySpark Python streaming data source: executor tasks write Parquet
files into the table directory in parallel; the driver commits all their add actions in one
Delta commit carrying the application transaction `(app_id, batchId)` and the `synclib.*`
metadata (`synclib.delta.commits`), and skips a batch the table holds already. On the direct
write path the source's read tasks write the files and `DirectBatchCommit` (`foreachBatch`)
collects their add actions and makes the same commit in the driver. Format
`synclib_delta_batch` is the same writer for one batch write (`synclib.delta.batch_writes`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from deltalake import CommitProperties, Schema, Transaction
from deltalake.transaction import AddAction, PostCommitHookProperties, RemoveAction, create_table_with_add_actions
from pyspark.sql import DataFrame
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from synclib import spark_checkpoint
from synclib.compat import pyspark as spark_compat
from synclib.delta import column_mapping, commit_lock, direct, features, log_append, parquet
from synclib.delta.commits import check_replay, commit_metadata, same_offsets
from synclib.delta.table import META_OFFSETS, current_table, holds_batch, latest_metadata
from synclib.settings.values import parse_bool
from synclib.store_retry import send

logger = logging.getLogger(__name__)

FORMAT = "synclib_delta"
BATCH_FORMAT = "synclib_delta_batch"


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
    `logCheckpoints` false it leaves Delta log checkpoints to maintenance. On local storage and S3,
    a batch after the table's newest version, which is this process's own commit, is
    appended without deltalake (`synclib.delta.log_append`: no read of the log). On an object
    store the commit holds the table's host-wide lock (`synclib.delta.commit_lock`).
    """

    def __init__(self, schema: StructType, options: Mapping[str, str]) -> None:
        self._path = options["path"]
        self._checkpoint = options["checkpointLocation"]
        self._partition_by: list[str] = json.loads(options.get("partitionBy") or "[]")
        self._log_checkpoints = parse_bool(options.get("logCheckpoints", "true"))
        self._run_id = options.get("runId")
        # The files' layout, decided once where the query starts (the table's column mapping).
        self._schema = column_mapping.annotate(arrow_schema(schema), current_table(self._path))

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AddedFiles:
        return AddedFiles(parquet.write_files(iterator, self._path, self._schema, self._partition_by))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        files = [f for m in messages if isinstance(m, AddedFiles) for f in m.files]
        app_id = spark_checkpoint.app_id(self._checkpoint)
        offsets = spark_checkpoint.batch_offsets(self._checkpoint, batchId)
        with commit_lock.held(self._path) as generation:  # on an object store: no other commit of this host's beside it
            # Sent again after a transient failure (deltalake does not retry its put-if-absent after a
            # reset: the first attempt may have taken effect): the application transaction makes it safe,
            # a commit whose answer was lost is found in the table with these very files.
            send(self._path, f"the Delta commit of batch {batchId}",
                 lambda: self._commit(files, batchId, app_id, offsets, generation))

    def _commit(self, files: list[AddAction], batchId: int, app_id: str, offsets: str | None,
                generation: int | None) -> None:
        tail = log_append.previous_batch(self._path, app_id, batchId, generation)
        if tail is not None and self._append(tail, files, app_id, batchId, offsets, generation):
            return
        table = current_table(self._path)
        if table is not None:
            if holds_batch(table, app_id, batchId):  # a replay, or this commit sent again after a lost answer
                committed = {uri.rsplit("/", 1)[-1] for uri in table.file_uris()} if files else set()  # unique names
                parquet.delete_files(self._path, [f for f in files if f.path.rsplit("/", 1)[-1] not in committed])
                check_replay(table, self._path, app_id, batchId, offsets)
                return
            refused = features.refusal_of_files(self._path, table, self._schema)
            if refused is not None:  # the table changed under the job: nothing committed, nothing left
                parquet.delete_files(self._path, files)
                raise refused
            if not files and same_offsets(offsets, latest_metadata(table)):
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
        hooks = PostCommitHookProperties(create_checkpoint=self._log_checkpoints,
                                         cleanup_expired_logs=None if self._log_checkpoints else False)
        if table is None:
            schema = Schema.from_arrow(column_mapping.logical_schema(self._schema))
            create_table_with_add_actions(self._path, schema, files, mode="error", partition_by=self._partition_by,
                                          commit_properties=properties, post_commithook_properties=hooks)
        else:
            actions: list[AddAction | RemoveAction] = [*files]
            table.create_write_transaction(actions, mode="append", schema=table.schema(),
                                           partition_by=self._partition_by,
                                           commit_properties=properties, post_commithook_properties=hooks)
        logger.debug("batch %d of %s: %d files committed to %s", batchId, app_id, len(files),
                    self._path)

    def _append(self, tail: log_append.Tail, files: list[AddAction], app_id: str, batch_id: int,
                offsets: str | None, generation: int | None) -> bool:
        """Batch `batch_id` committed after `tail`, this process's own newest version, without
        deltalake (`synclib.delta.log_append`); False when another commit took the version or
        deltalake's commit is to write the log checkpoint due at it."""
        if not files and same_offsets(offsets, {META_OFFSETS: tail.offsets}):
            return True
        if self._log_checkpoints and tail.checkpoint_due():
            return False
        if self._run_id:
            spark_checkpoint.check_run(self._checkpoint, self._run_id)
        if not log_append.append(self._path, tail, files, batch_id, offsets, self._partition_by,
                                 commit_metadata(app_id, batch_id, offsets), generation):
            return False
        logger.debug("batch %d of %s: %d files committed to %s (version %d)", batch_id, app_id, len(files),
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


class DeltaBatchWriter(DataSourceArrowWriter):
    """The `synclib_delta` stream writer for one batch write (option `batchId`): the same
    Parquet files and the same idempotent Delta commit."""

    def __init__(self, schema: StructType, options: Mapping[str, str]) -> None:
        self._stream = DeltaStreamWriter(schema, options)
        self._batch_id = int(options["batchId"])

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return self._stream.write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        self._stream.commit(messages, self._batch_id)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        self._stream.abort(messages, self._batch_id)


class DeltaBatchSink(DataSource):
    """Format `synclib_delta_batch`: options `path`, `checkpointLocation`, `batchId`,
    `partitionBy` (JSON list), `logCheckpoints`, `runId`."""

    @classmethod
    def name(cls) -> str:
        return BATCH_FORMAT

    def writer(self, schema: StructType, overwrite: bool) -> DeltaBatchWriter:
        return DeltaBatchWriter(schema, self.options)
