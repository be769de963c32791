"""The direct write path on delta-spark: read tasks write the batch's Parquet files (as on
delta-rs, `synclib.delta.direct`), the driver commits their add actions in one Delta transaction
through Delta's own JVM `OptimisticTransaction` (`synclib.compat.delta_spark`).

The commit is the one Delta's own streaming sink makes (the files, `SetTransaction(app_id,
batch_id)`, operation STREAMING UPDATE) with the `synclib.*` metadata in its `userMetadata`, as
the row path (`synclib.delta.spark_writer`) records it. "Has this batch been committed?" is not
answered by Delta's `txnVersion`, which rebuilds the snapshot's state with Spark jobs on every new
version: the batch after the one this writer committed is not looked up (only another run can have
committed it, and the run marker is checked before each commit), and any other batch (the first of
a query) is looked up once with delta-rs as on the row path. A commit that loses a conflict is
retried, and a retry asks Delta's `txnVersion` first, so a lost commit stays exactly once.

Chosen at start (`commits_for`) unless the direct path cannot run: on Databricks and Spark Connect
(their Delta is not OSS Delta's JVM), with a delta-spark other than the tested one, or on a table
whose features it does not honour (`synclib.delta.features.SPARK_DIRECT`); the row path then
writes, said in one log line.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

from deltalake import DeltaTable
from deltalake.exceptions import DeltaError
from deltalake.transaction import AddAction
from pyspark.sql import DataFrame, SparkSession

from synclib import spark_checkpoint
from synclib.compat import delta_spark
from synclib.compat import pyspark as spark_compat
from synclib.delta import direct, features, log_append, parquet
from synclib.delta.commits import check_replay, commit_metadata
from synclib.delta.spark_writer import retrying_conflicts
from synclib.delta.table import current_table, holds_batch, open_table
from synclib.errors import first_line

logger = logging.getLogger(__name__)


def commits_for(spark: SparkSession, path: str, table: DeltaTable | None) -> delta_spark.DeltaLogCommits | None:
    """Delta's commits of the table at `path` (`table`: it opened; None: none yet) for the direct
    path on delta-spark; None when it cannot run here, said in one log line (the row path writes)."""
    reason = _why_not(spark, path, table)
    if reason is not None:
        logger.info("delta-spark without read tasks writing the files (%s): Spark's Delta writer writes %s",
                    reason, path)
        return None
    jvm = spark_compat.jvm(spark, "delta-spark's direct write path")
    return delta_spark.DeltaLogCommits(spark, jvm, path)  # the path Spark's Delta writer gets on the row path


def _why_not(spark: SparkSession, path: str, table: DeltaTable | None) -> str | None:
    if os.environ.get("DATABRICKS_RUNTIME_VERSION"):
        return "a Databricks runtime, whose Delta classes are not OSS Delta's"
    jvm = spark_compat.jvm(spark, "delta-spark's direct write path (Spark's Delta writer writes instead)")
    if jvm is None:
        return "no JVM to commit through"
    problem = delta_spark.version_problem(jvm)
    if problem is not None:
        return problem
    if table is None:  # none yet, or one deltalake cannot read (start_delta_stream leaves it to Delta)
        try:
            open_table(path)
        except DeltaError as exc:
            return f"a table deltalake cannot read, {first_line(exc)}"
    refused = features.TableFeatures.of(path, table).refused_by(features.SPARK_DIRECT) if table is not None else []
    return f"table features {', '.join(refused)}" if refused else None


class DeltaSparkDirectCommit:
    """`foreachBatch` function of the direct path on delta-spark: the batch's rows are the add
    actions of the files its read tasks wrote (`synclib.delta.direct.FILES_SCHEMA`), committed
    in one Delta transaction. `schema_json` and `properties`: the table's Spark schema and table
    properties, for a table not there yet."""

    def __init__(self, commits: delta_spark.DeltaLogCommits, path: str, checkpoint_location: str,
                 partition_by: Sequence[str], schema_json: str, run_id: str | None = None,
                 properties: Mapping[str, str] | None = None) -> None:
        self._commits = commits
        self._path = path
        self._checkpoint = checkpoint_location
        self._partition_by = list(partition_by)
        self._schema_json = schema_json
        self._run_id = run_id
        self._properties = dict(properties or {})
        self._committed: int | None = None  # the batch id this writer committed last

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        files = direct.add_actions(batch.toArrow().to_batches())
        app_id = spark_checkpoint.app_id(self._checkpoint)
        offsets = spark_checkpoint.batch_offsets(self._checkpoint, batch_id)
        new_table: dict[str, Any] | None = None
        if not (self._run_id and self._committed == batch_id - 1):  # at most once a query: a lookup
            table = current_table(self._path)
            if table is not None and holds_batch(table, app_id, batch_id):
                parquet.delete_files(self._path, files)
                check_replay(table, self._path, app_id, batch_id, offsets)
                return
            if table is None:
                new_table = delta_spark.new_table_metadata(self._schema_json, self._partition_by, self._properties)
        if self._run_id:  # another run took the checkpoint over: it commits this batch, not us
            spark_checkpoint.check_run(self._checkpoint, self._run_id)
        actions = [log_append.add_json(f) for f in files]
        user_metadata = json.dumps(commit_metadata(app_id, batch_id, offsets))
        query_id = app_id.removeprefix(spark_checkpoint.APP_ID_PREFIX)
        version = retrying_conflicts(  # a retry that finds the batch committed (None): by its first attempt
            lambda attempt: self._commits.commit(actions, app_id, batch_id, query_id, user_metadata, new_table,
                                                 check_transaction=attempt > 1,
                                                 check_metadata=lambda metadata: self._check(metadata, files)),
            batch_id, app_id)
        self._committed = batch_id
        logger.debug("batch %d of %s: %d files committed to %s (version %s)", batch_id, app_id, len(files),
                     self._path, version)

    def _check(self, metadata: Mapping[str, Any], files: list[AddAction]) -> None:
        """Before the commit, on the table as Delta's transaction reads it: a CHECK constraint,
        invariant, generated or identity column the files do not enforce, added while the job ran,
        refuses the batch (its files deleted, nothing committed; a restart takes the row path)."""
        in_use = sorted(set(features.uses(metadata.get("configuration") or {}, json.loads(metadata["schemaString"]))))
        if in_use:
            parquet.delete_files(self._path, files)
            raise features.UnwritableTable(
                f"table {self._path} now uses {', '.join(in_use)}, which the files of delta-spark's direct path do "
                f"not enforce: nothing of the batch was committed; a restart writes it with Spark's Delta writer")
