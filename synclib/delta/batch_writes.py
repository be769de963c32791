"""One micro-batch written once to a Delta table, by either engine, from `foreachBatch`: what
a sink of the caller's (`synclib.delta.stream.BatchSink`: the dead-letter sink) writes its tables
with. The commit is the stream writers': the same Parquet files, the same application transaction
`(app_id, batch id)`, the same skip of a batch already held.

- delta-rs: format `synclib_delta_batch`, the `synclib_delta` stream writer driven for one
  batch write (option `batchId`, `synclib.delta.writer`);
- delta-spark: Spark's Delta writer with `txnAppId`/`txnVersion` (`synclib.delta.spark_writer`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pyspark.sql import DataFrame

from synclib import spark_checkpoint
from synclib.delta.commits import check_replay
from synclib.delta.spark_writer import DeltaSparkBatchWriter
from synclib.delta.table import current_table, holds_batch
from synclib.delta.writer import BATCH_FORMAT
from synclib.settings.values import DELTA_SPARK


@dataclass(frozen=True)
class DeltaTarget:
    """One Delta table written once per micro-batch, idempotently, by either engine."""

    engine: str
    path: str
    checkpoint: str
    partition_by: tuple[str, ...] = ()
    log_checkpoints: bool = True
    run_id: str | None = None  # as `DeltaStream.run_id`
    table: str | None = None  # its name: delta-spark writes by name (`path` is the catalog's location)

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
            DeltaSparkBatchWriter(self.path, self.checkpoint, self.partition_by, self.run_id,
                                  self.table)(df, batch_id)
            return
        writer = df.write.option("runId", self.run_id) if self.run_id else df.write
        (writer.format(BATCH_FORMAT).mode("append")
         .option("path", self.path).option("checkpointLocation", self.checkpoint)
         .option("batchId", str(batch_id)).option("partitionBy", json.dumps(list(self.partition_by)))
         .option("logCheckpoints", str(self.log_checkpoints).lower()).save())
