"""Every use of delta-spark's internal JVM API (over py4j), in one place: one Delta commit of add
actions written elsewhere, through Delta's own `OptimisticTransaction`.

delta-spark has no public API to commit files it did not write; Delta's own streaming sink
(`DeltaSink.addBatch`) commits its files with `DeltaLog.forTable(...).startTransaction()`, a
`SetTransaction(appId, batchId)` and `DeltaOperations.StreamingUpdate`, and so does this module:
the same conflict checks, retries of a commit whose version another commit took, post-commit
hooks (log checkpoints, checksums, log cleanup) and protocol checks as every Delta write. The
actions are handed over as the log's JSON (`Action.fromJson`), so no Scala case class is
constructed from Python.

Used only with the Delta minor version it is tested with (`TESTED_VERSION`, read from the JVM's
delta-spark jar); `version_problem()` says otherwise and the caller then keeps Spark's Delta
writer. tests/spark/test_compat_jvm.py holds this module to the session's Delta.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from synclib.compat import py4j as py4j_compat

TESTED_VERSION = (4, 4)  # major, minor of delta-spark
_DELTA_LOG = "org.apache.spark.sql.delta.DeltaLog"


def installed_version(jvm: Any) -> str | None:
    """delta-spark's version in the JVM (its jar's Implementation-Version); None without Delta."""
    if not py4j_compat.class_loadable(jvm, _DELTA_LOG):
        return None
    loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
    version = loader.loadClass(_DELTA_LOG).getPackage().getImplementationVersion()
    return str(version) if version else "unknown"


def version_problem(jvm: Any) -> str | None:
    """Why this module must not be used with the JVM's Delta; None when it is the tested version."""
    version = installed_version(jvm)
    if version is None:
        return "Delta's JVM classes are not on the classpath"
    release = re.match(r"(\d+)\.(\d+)\.", version)
    if release and tuple(int(part) for part in release.groups()) == TESTED_VERSION:
        return None
    return f"delta-spark {version} is not the version synclib's direct commit is tested with " \
           f"({'.'.join(map(str, TESTED_VERSION))}.x)"


def _nullable(data_type: Any) -> Any:
    """A Spark schema's JSON with every field, element and value nullable, as Delta creates tables."""
    if isinstance(data_type, dict):
        forced = {"nullable": True, "containsNull": True, "valueContainsNull": True}
        return {k: (forced[k] if k in forced else _nullable(v)) for k, v in data_type.items()}
    if isinstance(data_type, list):
        return [_nullable(v) for v in data_type]
    return data_type


def new_table_metadata(schema_json: str, partition_by: Sequence[str],
                       properties: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The `metaData` action of a new table with the Spark schema `schema_json` and table `properties`."""
    return {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                         "schemaString": json.dumps(_nullable(json.loads(schema_json))),
                         "partitionColumns": list(partition_by), "configuration": dict(properties or {}),
                         "createdTime": int(time.time() * 1000)}}


class DeltaLogCommits:
    """Commits to the Delta table at `path` through the session's Delta (`spark`: a classic
    session; `jvm`: its py4j view, which passed `version_problem`)."""

    def __init__(self, spark: Any, jvm: Any, path: str) -> None:
        self._jvm = jvm
        delta = jvm.org.apache.spark.sql.delta
        self._log = getattr(getattr(delta, "DeltaLog$"), "MODULE$").forTable(spark._jsparkSession, path)
        self._committed: int | None = None  # the version this object committed last

    def commit(self, actions: Sequence[Mapping[str, Any]], app_id: str, batch_id: int, query_id: str,
               user_metadata: str, new_table: Mapping[str, Any] | None, check_transaction: bool,
               check_metadata: Callable[[Mapping[str, Any]], None]) -> int | None:
        """Commit `actions` (add actions, as the log's JSON) with `SetTransaction(app_id, batch_id)` and
        `user_metadata` in one transaction, as a streaming update of query `query_id` batch
        `batch_id`; its version. `new_table`: the `metaData` action when there is no table yet.
        `check_transaction`: first ask Delta whether `app_id` committed `batch_id` already (a
        state reconstruction of the snapshot; the commit then also conflicts with a concurrent
        commit of that app id): None, and nothing committed, when it has. `check_metadata` gets
        the table's `metaData` action as the transaction reads it (raising: nothing committed).

        After a commit of its own, the next transaction without `check_transaction` reads the
        snapshot that commit left (Delta builds it from the commit, without listing the log), not
        a new listing of `_delta_log`, which on a filesystem without listing from an offset (a
        local disk, HDFS, ADLS) walks every log entry since the last log checkpoint up to the log's
        retention: the cost of a commit then stays flat as the table ages. Correct all the same
        when another writer committed since: the commit's version is taken, Delta checks the
        commits in between (a blind append conflicts only with a protocol or metadata change) and
        commits after them, or raises the conflict, whose retry reads the log anew."""
        jvm = self._jvm
        txn = self._transaction(fresh=check_transaction)
        if check_transaction and txn.txnVersion(app_id) >= batch_id:
            return None
        if new_table is not None and txn.readVersion() < 0:
            txn.updateMetadataForNewTable(self._action(new_table))
        else:
            check_metadata(json.loads(txn.metadata().json())["metaData"])
        now_ms = int(time.time() * 1000)
        listed = jvm.java.util.ArrayList()
        for action in [*actions, {"txn": {"appId": app_id, "version": batch_id, "lastUpdated": now_ms}}]:
            listed.add(self._action(action))
        seq = jvm.scala.jdk.javaapi.CollectionConverters.asScala(listed).toSeq()
        operation = getattr(jvm.org.apache.spark.sql.delta, "DeltaOperations$StreamingUpdate")(
            jvm.org.apache.spark.sql.streaming.OutputMode.Append(), query_id, batch_id,
            jvm.scala.Option.apply(user_metadata))
        self._committed = int(txn.commit(seq, operation))
        return self._committed

    def _transaction(self, fresh: bool) -> Any:
        """A transaction on the newest snapshot Delta holds when it holds this object's last commit
        (or a later one) and `fresh` is not asked; otherwise on the log listed anew (`update`).
        Also anew once that snapshot is more than a log checkpoint interval past its checkpoint:
        a snapshot built from a commit is the one before plus that commit, so without a listing
        now and then Delta would never see the checkpoints its post-commit hook writes, and the
        snapshot's list of log entries would grow with every batch."""
        if not fresh and self._committed is not None:
            snapshot = self._log.unsafeVolatileSnapshot()
            since_checkpoint = snapshot.version() - snapshot.checkpointProvider().version()
            if snapshot.version() >= self._committed and \
                    since_checkpoint <= self._log.checkpointInterval(snapshot.metadata()):
                scala = self._jvm.scala
                return self._log.startTransaction(scala.Option.empty(), scala.Option.apply(snapshot))
        return self._log.startTransaction()

    def _action(self, action: Mapping[str, Any]) -> Any:
        return self._jvm.org.apache.spark.sql.delta.actions.Action.fromJson(json.dumps(action))
