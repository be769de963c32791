"""One micro-batch written once to a Delta table, by either engine, from `foreachBatch`: what
the dead-letter sink writes its two tables with (`synclib.delta.dead_letters`), and the replay of
dead letters. The commit is the stream writer's (`synclib.delta.writer`): the same Parquet files,
the same application transaction `(app_id, batch id)`, the same skip of a batch already held.

- delta-rs: format `synclib_delta_batch`, the `synclib_delta` stream writer driven for one
  batch write (option `batchId`);
- delta-spark: Spark's Delta writer with `txnAppId`/`txnVersion` (`DeltaSparkBatchWriter`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.datasource import DataSource, DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from synclib import spark_checkpoint
from synclib.delta.table import current_table, holds_batch
from synclib.delta.writer import DeltaSparkBatchWriter, DeltaStreamWriter, check_replay
from synclib.settings.values import DELTA_SPARK

BATCH_FORMAT = "synclib_delta_batch"


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


@dataclass(frozen=True)
class DeltaTarget:
    """One Delta table written once per micro-batch, idempotently, by either engine."""

    engine: str
    path: str
    checkpoint: str
    partition_by: tuple[str, ...] = ()
    log_checkpoints: bool = True
    run_id: str | None = None  # as `DeltaStream.run_id`

    def done(self, app_id: str, batch_id: int) -> bool:
        """Whether the table holds batch `batch_id` of `app_id` (then with the end offsets the
        checkpoint gives it: `check_replay`)."""
        table = current_table(self.path)
        if table is None or not holds_batch(table, app_id, batch_id):
            return False
        check_replay(table, self.path, app_id, batch_id, spark_checkpoint.batch_offsets(self.checkpoint, batch_id))
        return True

    def write(self, df: DataFrame, app_id: str, batch_id: int) -> None:
        if self.engine == DELTA_SPARK:  # txnAppId/txnVersion, synclib metadata, retried on a conflict
            DeltaSparkBatchWriter(self.path, self.checkpoint, self.partition_by, self.run_id)(df, batch_id)
            return
        writer = df.write.option("runId", self.run_id) if self.run_id else df.write
        (writer.format(BATCH_FORMAT).mode("append")
         .option("path", self.path).option("checkpointLocation", self.checkpoint)
         .option("batchId", str(batch_id)).option("partitionBy", json.dumps(list(self.partition_by)))
         .option("logCheckpoints", str(self.log_checkpoints).lower()).save())
