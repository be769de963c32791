"""delta-spark's direct write path (`synclib.delta.spark_direct`): no Spark job but the batch's own
on the way to its commit, and the row path where the direct path cannot write. Its contract
(exactly once, replays, resume, the table read back by every reader) is tested with the other
writers' in test_sink.py and test_interop.py (`SPARK_DIRECT`)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from synclib import spark_checkpoint
from synclib.compat import delta_spark
from synclib.delta import spark_direct
from synclib.delta.stream import DeltaStream, start_delta_stream
from synclib.delta.table import table_summary
from synclib.settings.values import DELTA_SPARK
from tests.spark.test_sink import KAFKA_SCHEMA, SPARK_DIRECT, TIMEOUT, Stream, assert_rows
from tests.support import wait_until


def test_a_batch_after_the_writers_own_runs_no_spark_job_but_its_own(spark: SparkSession, tmp_path: Path) -> None:
    """No state reconstruction of the snapshot (Delta's `txnVersion`, a log checkpoint's read) on
    the way to a commit: each batch of a running query is one Spark job, its read tasks writing
    the files; the query's first batch is looked up with delta-rs, not with a Spark job."""
    stream = Stream(spark, tmp_path, SPARK_DIRECT)
    marker = spark_checkpoint.RunMarker.new()
    spark_checkpoint.start_run(stream.checkpoint, marker)
    stream.offer({0: 1})
    events = spark.readStream.format("synclib_test_events").option("plan", str(stream.plan)).load()
    target = DeltaStream(stream.table, stream.checkpoint, DELTA_SPARK, trigger={"processingTime": "200 milliseconds"},
                         run_id=marker.run_id)
    direct = lambda table: spark.readStream.format("synclib_test_events_direct").options(  # noqa: E731
        plan=str(stream.plan), **table).load()
    query = start_delta_stream(events, target, direct=direct)
    try:
        for batch, end in enumerate((1, 2, 3)):
            stream.offer({0: end})
            wait_until(lambda b=batch: getattr(table_summary(stream.table), "batch_id", None) == b,
                       TIMEOUT, f"batch {batch} committed", interval_s=0.2)
        jobs = spark.sparkContext.statusTracker().getJobIdsForGroup(str(query.runId))
    finally:
        query.stop()
    store = spark.sparkContext._jsc.sc().statusStore()  # each job's description names its batch
    batches = [int(str(store.job(j).description().get()).rsplit("batch = ", 1)[1]) for j in jobs]
    # batch 0 creates the table: Delta computes its first checksum from the state, one job more
    assert sorted(batches) == [0, 0, 1, 2]
    assert stream.commit_log(2)["commitInfo"][0]["operation"] == "STREAMING UPDATE"
    assert getattr(table_summary(stream.table), "rows", None) == 3  # the rows: test_sink.py's tests


def test_the_row_path_writes_where_the_direct_path_cannot(
        spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A table using a feature the read tasks' files do not honour (a CHECK constraint), a delta-spark
    other than the tested one, and a Databricks runtime keep Spark's Delta writer, said in one line."""
    stream = Stream(spark, tmp_path, SPARK_DIRECT)
    spark.createDataFrame([], KAFKA_SCHEMA).write.format("delta").save(stream.table)
    spark.sql(f"ALTER TABLE delta.`{stream.table}` ADD CONSTRAINT known CHECK (partition >= 0)")
    with caplog.at_level(logging.INFO, logger=spark_direct.__name__):
        assert spark_direct.commits_for(spark, stream.table, DeltaTable(stream.table)) is None
        with monkeypatch.context() as other_delta:
            other_delta.setattr(delta_spark, "TESTED_VERSION", (4, 3))
            assert spark_direct.commits_for(spark, str(tmp_path / "none"), None) is None
        monkeypatch.setenv("DATABRICKS_RUNTIME_VERSION", "17.3")
        assert spark_direct.commits_for(spark, str(tmp_path / "none"), None) is None
    assert [r.getMessage().split(":")[0] for r in caplog.records if r.name == spark_direct.__name__] == [
        "delta-spark without read tasks writing the files (table features checkConstraints)",
        "delta-spark without read tasks writing the files (delta-spark 4.4.0 is not the version synclib's direct "
        "commit is tested with (4.3.x))",
        "delta-spark without read tasks writing the files (a Databricks runtime, whose Delta classes are not "
        "OSS Delta's)"]
    monkeypatch.delenv("DATABRICKS_RUNTIME_VERSION")
    stream.offer({0: 3})
    stream.run()
    assert stream.commit_log(2)["commitInfo"][0]["operation"] == "WRITE"  # the row path's
    assert_rows(stream, {0: range(3)})
