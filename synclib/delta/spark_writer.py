"""The delta-spark writer: Spark's own Delta writer in `foreachBatch`, idempotent by
`txnAppId`/`txnVersion`, retried when its commit loses a conflict."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from typing import TypeVar

from pyspark.sql import DataFrame

from synclib import spark_checkpoint
from synclib.compat import py4j as py4j_compat
from synclib.delta.catalog import quote
from synclib.delta.commits import check_replay, commit_metadata
from synclib.delta.table import current_table, holds_batch
from synclib.errors import first_line

logger = logging.getLogger(__name__)

T = TypeVar("T")

_CONFLICT_RETRIES = 5
# Delta's error conditions for a commit that lost to a concurrent one (io.delta.exceptions.*).
_CONFLICTS = ("DELTA_CONCURRENT_", "DELTA_METADATA_CHANGED", "DELTA_PROTOCOL_CHANGED")


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
    With `table` (a name, created by `synclib.delta.catalog` with its partitioning), Delta writes
    through the catalog (`saveAsTable`, the same options); `path` is the location the catalog gave.
    """

    def __init__(self, path: str, checkpoint_location: str, partition_by: Sequence[str],
                 run_id: str | None = None, table: str | None = None) -> None:
        self._path = path
        self._table = table
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
        if self._partition_by and self._table is None:
            writer = writer.partitionBy(*self._partition_by)
        name = self._table
        if name is None:
            retrying_conflicts(lambda attempt: writer.save(self._path), batch_id, app_id)
        else:
            retrying_conflicts(lambda attempt: writer.saveAsTable(quote(name)), batch_id, app_id)
        self._committed = batch_id


def retrying_conflicts(commit: Callable[[int], T], batch_id: int, app_id: str) -> T:
    """`commit(attempt)` (1, 2, ...), again while it loses a conflict to a commit beside it, up to
    `_CONFLICT_RETRIES` attempts; only for a commit that is idempotent."""
    attempt = 1
    while True:
        try:
            return commit(attempt)
        except Exception as exc:
            if attempt == _CONFLICT_RETRIES or not _delta_conflict(exc):
                raise
            logger.warning("batch %d of %s: Delta commit conflict (%s), retrying", batch_id, app_id,
                           conflict_description(exc))
        attempt += 1


def conflict_description(exc: BaseException) -> str:
    """What a lost commit raised, in one line: Delta's exception class and message (or its error
    condition), not py4j's line naming the failed call."""
    return py4j_compat.java_error(exc) or _condition(exc) or first_line(exc)[:200]


def _condition(exc: BaseException) -> str:
    get = getattr(exc, "getCondition", None) or getattr(exc, "getErrorClass", None)
    return str(get() or "") if callable(get) else ""


def _delta_conflict(exc: BaseException) -> bool:
    condition = _condition(exc)
    if condition:
        return condition.startswith(_CONFLICTS)
    return any(name in str(exc) for name in ("io.delta.exceptions.Concurrent", "MetadataChangedException",
                                             "ProtocolChangedException"))
