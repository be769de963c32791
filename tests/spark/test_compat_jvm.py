"""The private JVM accessors on a classic session, py4j's and Delta's (Spark Connect's side:
test_spark_connect.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StringType, StructField, StructType

from synclib.compat import delta_spark
from synclib.compat import py4j as py4j_compat
from synclib.compat import pyspark as spark_compat
from synclib.delta import direct, log_append
from synclib.delta.direct import TableFiles
from synclib.delta.engine import delta_spark_available, fit_delta_to_local_master
from synclib.delta.spark_writer import retrying_conflicts
from synclib.delta.writer import arrow_schema
from tests.support import wait_until


def test_a_classic_session_has_a_jvm_that_loads_classes(spark: SparkSession) -> None:
    assert not spark_compat.is_connect(spark)
    jvm = spark_compat.jvm(spark, "nothing (test)")
    assert jvm is not None
    assert py4j_compat.class_loadable(jvm, "java.lang.String")
    assert not py4j_compat.class_loadable(jvm, "org.example.NotOnTheClasspath")
    assert delta_spark_available(spark) is py4j_compat.class_loadable(jvm, "io.delta.tables.DeltaTable")


def test_a_jvm_error_is_named_by_its_java_class_and_message(spark: SparkSession) -> None:
    """A JVM exception PySpark does not convert (as Delta's commit conflicts) is py4j's Py4JJavaError,
    whose first line names only the call (`An error occurred while calling ...`)."""
    jvm = spark_compat.jvm(spark, "nothing (test)")
    assert jvm is not None
    try:
        jvm.java.lang.Class.forName("org.example.NotOnTheClasspath")
    except Exception as exc:  # noqa: BLE001 - what py4j raises is the subject
        assert str(exc).startswith("An error occurred while calling")
        assert py4j_compat.java_error(exc) == "java.lang.ClassNotFoundException: org.example.NotOnTheClasspath"
    else:
        raise AssertionError("Class.forName found a class that is not there")


def test_progress_since_reads_only_the_reports_after_the_one_seen(spark: SparkSession) -> None:
    """The reports PySpark's `recentProgress` gives, from the JVM's query: all of them, then only
    those after a given one (the forwarder parses each report once)."""
    query = (spark.readStream.format("rate").option("rowsPerSecond", 5).load()
             .writeStream.format("noop").trigger(processingTime="50 milliseconds").start())
    try:
        wait_until(lambda: len(query.recentProgress) >= 3, what="three progress reports")
    finally:
        query.stop()
    everything = [json.loads(p.json) for p in query.recentProgress]

    since = spark_compat.progress_since(query, None)
    assert since is not None
    assert ([json.loads(text) for text in since[0]], since[1]) == (everything, len(everything))
    after_second = spark_compat.progress_since(query, (everything[1]["runId"], everything[1]["timestamp"]))
    assert after_second is not None and [json.loads(text) for text in after_second[0]] == everything[2:]
    newest = spark_compat.progress_since(query, (everything[-1]["runId"], everything[-1]["timestamp"]))
    assert newest is not None and newest[0] == []


def test_delta_internals_commit_add_actions_written_elsewhere(spark: SparkSession, tmp_path: Path) -> None:
    """synclib.compat.delta_spark on the session's Delta: a Delta upgrade fails the version guard
    here first (check this module's calls against the new Delta, then raise `TESTED_VERSION`), and a
    change of the internal API fails the commit below."""
    jvm = spark_compat.jvm(spark, "nothing (test)")
    assert jvm is not None
    assert delta_spark.version_problem(jvm) is None, delta_spark.installed_version(jvm)
    path = str(tmp_path / "table")
    schema = StructType([StructField("n", LongType()), StructField("p", StringType())])
    (rows,) = TableFiles(path, arrow_schema(schema), ("p",)).write([pa.record_batch({"n": [1, 2], "p": ["a", "b"]})])
    adds = [log_append.add_json(a) for a in direct.add_actions([rows])]
    commits = delta_spark.DeltaLogCommits(spark, jvm, path)
    new_table = delta_spark.new_table_metadata(schema.json(), ["p"])

    assert commits.commit(adds, "app", 7, "query", '{"k": 1}', new_table, check_transaction=False,
                          check_metadata=lambda metadata: None) == 0
    assert commits.commit(adds, "app", 7, "query", "{}", None, check_transaction=True,
                          check_metadata=lambda metadata: None) is None  # committed

    assert sorted(tuple(r) for r in spark.read.format("delta").load(path).collect()) == [(1, "a"), (2, "b")]
    (entry,) = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()
    assert (entry.operation, entry.userMetadata, entry.operationParameters["epochId"]) == (
        "STREAMING UPDATE", '{"k": 1}', "7")
    assert DeltaTable(path).transaction_version("app") == 7


def test_delta_commits_after_their_own_read_the_snapshot_they_left(spark: SparkSession, tmp_path: Path) -> None:
    """After its own commit, the next transaction starts from the snapshot that commit left (no
    listing of the log: its readVersion is that commit's), and still commits after another writer's
    commit; another writer's metadata change is a conflict, whose retry reads the log anew. The other writer
    is delta-rs: Spark's Delta writer in this JVM would update the snapshot Delta holds."""
    fit_delta_to_local_master(spark)  # as the job does: Delta's Spark jobs of 2 tasks, not 50
    jvm = spark_compat.jvm(spark, "nothing (test)")
    path = str(tmp_path / "table")
    schema = StructType([StructField("n", LongType()), StructField("p", StringType())])
    files = TableFiles(path, arrow_schema(schema), ("p",))

    def adds(n: int) -> list[dict[str, object]]:
        (rows,) = files.write([pa.record_batch({"n": [n], "p": ["a"]})])
        return [log_append.add_json(a) for a in direct.add_actions([rows])]

    commits = delta_spark.DeltaLogCommits(spark, jvm, path)
    seen: list[dict[str, str]] = []

    def commit(n: int, batch_id: int) -> int | None:
        return retrying_conflicts(lambda attempt: commits.commit(
            adds(n), "app", batch_id, "query", "{}", delta_spark.new_table_metadata(schema.json(), ["p"]),
            check_transaction=attempt > 1,
            check_metadata=lambda metadata: seen.append(metadata["configuration"])), batch_id, "app")

    assert commit(1, 0) == 0
    write_deltalake(path, pa.table({"n": pa.array([2], pa.int64()), "p": ["b"]}), mode="append")  # version 1
    assert commit(3, 1) == 2
    DeltaTable(path).alter.set_table_properties({"delta.checkpointInterval": "50"})  # version 3, not through this JVM
    assert commit(4, 2) == 4

    history = {r.version: r.readVersion for r in spark.sql(f"DESCRIBE HISTORY delta.`{path}`").collect()}
    assert (history[2], history[4]) == (0, 3)  # 2: on its own snapshot; 4: read anew after the conflict
    assert [c.get("delta.checkpointInterval") for c in seen] == [None, None, "50"]
    assert sorted(r.n for r in spark.read.format("delta").load(path).collect()) == [1, 2, 3, 4]
    assert DeltaTable(path).transaction_version("app") == 2


def test_delta_commits_list_the_log_again_after_a_checkpoint(spark: SparkSession, tmp_path: Path) -> None:
    """The snapshot a commit leaves is the one before plus that commit: once it is a checkpoint
    interval past its log checkpoint, the next transaction lists the log, finds the checkpoint Delta's
    post-commit hook wrote, and the snapshot's log entries stay within an interval."""
    fit_delta_to_local_master(spark)  # as the job does: checkpoints are Spark jobs of 2 tasks, not 50
    jvm = spark_compat.jvm(spark, "nothing (test)")
    path = str(tmp_path / "table")
    schema = StructType([StructField("n", LongType())])
    files = TableFiles(path, arrow_schema(schema), ())
    commits = delta_spark.DeltaLogCommits(spark, jvm, path)
    new_table = delta_spark.new_table_metadata(schema.json(), [], {"delta.checkpointInterval": "3"})
    entries = []
    for batch_id in range(8):
        (rows,) = files.write([pa.record_batch({"n": [batch_id]})])
        adds = [log_append.add_json(a) for a in direct.add_actions([rows])]
        assert commits.commit(adds, "app", batch_id, "query", "{}", new_table, check_transaction=False,
                              check_metadata=lambda metadata: None) == batch_id
        delta_log = getattr(getattr(jvm.org.apache.spark.sql.delta, "DeltaLog$"), "MODULE$")
        snapshot = delta_log.forTable(spark._jsparkSession, path).unsafeVolatileSnapshot()
        entries.append(snapshot.logSegment().deltas().size())
    assert max(entries) <= 4, entries  # without the listing: 1, 2, ..., 8
    assert sorted(r.n for r in spark.read.format("delta").load(path).collect()) == list(range(8))
