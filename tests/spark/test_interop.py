"""A table one engine wrote is a valid Delta table for the others.

delta-rs tables read by Spark's Delta reader (batch, and as a streaming source downstream of
the forwarder: every row once, compaction commits not taken for new data) and by DuckDB;
delta-spark tables (the row path, and the direct path: `SPARK_DIRECT`) read by delta-rs and
DuckDB; the forwarder switching engines on an existing table from the same checkpoint, exactly
once.

DuckDB reads Delta through its `delta` extension, which DuckDB downloads at run time: no such
download is possible here, so DuckDB reads the table's live Parquet files as delta-rs lists them
(`read_parquet` with Hive partitioning), which is what the extension would read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from harness.object_store import S3Server
from synclib import spark_checkpoint
from synclib.delta import spark_maintenance
from synclib.delta.maintenance import run_pass
from synclib.delta.table import read_arrow
from synclib.settings.job import MaintenanceConfig
from synclib.settings.values import DELTA_RS, DELTA_SPARK
from tests.spark.test_sink import SPARK_DIRECT, TOPIC, Stream, assert_rows, expected, lose_spark_commit

COMPACT_NOW = MaintenanceConfig(min_age="0s", vacuum_retention="0s")
# Keeps the files compaction removed (vacuum_retention: 7 days): a lagging Delta streaming reader
# still reads the commits that added them.
COMPACT_KEEP = MaintenanceConfig(min_age="0s")


def duckdb_rows(table: str) -> list[tuple[int, int]]:
    """(partition, offset) of every row DuckDB reads from the table's live files."""
    files = DeltaTable(table).file_uris()
    rows = duckdb.connect().execute(
        "SELECT partition, \"offset\" FROM read_parquet(?, hive_partitioning = true, union_by_name = true) "
        "ORDER BY partition, \"offset\"", [files]).fetchall()
    return [(int(p), int(o)) for p, o in rows]


def pairs(offsets: dict[int, range]) -> list[tuple[int, int]]:
    return sorted((p, o) for p, span in offsets.items() for o in span)


def maintain(stream: Stream, options: MaintenanceConfig = COMPACT_NOW) -> None:
    if stream.engine in (DELTA_SPARK, SPARK_DIRECT):
        spark_maintenance.run_pass(stream.spark, stream.table, options)
    else:
        run_pass(stream.table, options)


def operations(table: str) -> list[str]:
    return [h["operation"] for h in sorted(DeltaTable(table).history(), key=lambda h: h["version"])]


class Downstream:
    """A Delta streaming query reading the forwarder's table (`readStream.format("delta")`) into a
    Delta table of its own, one Trigger.AvailableNow run at a time from one checkpoint."""

    def __init__(self, spark: SparkSession, source: str, root: Path) -> None:
        self.spark, self.source = spark, source
        self.table, self.checkpoint = str(root / "downstream"), str(root / "downstream-checkpoint")

    def run(self) -> None:
        query = (self.spark.readStream.format("delta").load(self.source)
                 .writeStream.format("delta").option("checkpointLocation", self.checkpoint)
                 .trigger(availableNow=True).start(self.table))
        try:
            assert query.awaitTermination(180), "the downstream stream did not finish in time"
            assert query.exception() is None, query.exception()
        finally:
            query.stop()

    def rows(self) -> Any:
        return self.spark.read.format("delta").load(self.table).select("partition", "offset")


# delta-spark on its direct path (the job's default there): Spark's own writer's tables (the row path,
# with a transform) are Delta's, which its own streaming source reads by construction.
@pytest.mark.parametrize("engine", [DELTA_RS, SPARK_DIRECT])
def test_a_table_is_read_by_spark_streaming_downstream_with_compactions_between(
        engine: str, spark: SparkSession, s3: S3Server, tmp_path: Path) -> None:
    """Every row reaches a downstream Delta stream once: the OPTIMIZE commits (dataChange=false)
    between its runs are not new data, on either engine. The forwarder's table and checkpoint
    are on S3 (`s3://`, `s3a://`), and so is the maintenance that compacts it."""
    stream = Stream(spark, tmp_path, engine, s3)
    downstream = Downstream(spark, stream.table, tmp_path)
    stream.offer({0: 2, 1: 2})
    stream.run()
    stream.offer({0: 4, 1: 3})
    stream.run()
    downstream.run()
    maintain(stream, COMPACT_KEEP)
    stream.offer({0: 6, 1: 3})
    stream.run()
    maintain(stream, COMPACT_KEEP)
    downstream.run()

    assert "OPTIMIZE" in operations(stream.table)
    assert_rows(stream, {0: range(6), 1: range(3)})
    want = expected(spark, {0: range(6), 1: range(3)}).select("partition", "offset")
    assert_df_equality(downstream.rows(), want, ignore_row_order=True, ignore_nullable=True)
    assert duckdb_rows(stream.table_dir) == pairs({0: range(6), 1: range(3)})  # the server's files


@pytest.mark.parametrize("engine", [DELTA_RS, DELTA_SPARK])
def test_a_date_partitioned_table_is_read_by_the_other_engine_and_duckdb(
        engine: str, spark: SparkSession, tmp_path: Path) -> None:
    """delta-rs and Spark's Delta reader (in `assert_rows`) and DuckDB read the same rows and
    dates from a table either engine wrote and compacted."""
    stream = Stream(spark, tmp_path, engine)
    stream.offer({0: 3, 1: 2})  # 2024-01-01 22:00 onwards: two UTC dates
    stream.run(partition_by_date=True)
    stream.offer({0: 4, 1: 3})
    stream.run(partition_by_date=True)
    maintain(stream)

    assert_rows(stream, {0: range(4), 1: range(3)})
    assert duckdb_rows(stream.table) == pairs({0: range(4), 1: range(3)})
    by_rs = read_arrow(stream.table, columns=["offset", "partition", "date"]).to_pylist()
    by_spark = [r.asDict() for r in spark.read.format("delta").load(stream.table)
                .select("offset", "partition", "date").collect()]
    key = lambda r: (r["partition"], r["offset"])  # noqa: E731
    assert sorted(by_rs, key=key) == sorted(by_spark, key=key)
    assert {r["date"].isoformat() for r in by_rs} == {"2024-01-01", "2024-01-02"}


@pytest.mark.parametrize("first", [DELTA_RS, DELTA_SPARK, SPARK_DIRECT])
def test_the_forwarder_switches_engines_on_an_existing_table_exactly_once(
        first: str, spark: SparkSession, tmp_path: Path) -> None:
    """Same checkpoint, same application transaction: a batch the other engine committed is
    skipped when replayed, and the next batches go on from it."""
    other = DELTA_SPARK if first == DELTA_RS else DELTA_RS
    stream = Stream(spark, tmp_path, first)
    stream.offer({0: 2, 1: 1})
    stream.run()
    stream.offer({0: 3, 1: 2})
    stream.run(engine=other)
    lose_spark_commit(stream.checkpoint, 1)  # a crash after the other engine's Delta commit
    stream.run()  # `first` again: the replay of batch 1 is skipped
    stream.offer({0: 5, 1: 2})
    stream.run()

    app_id = spark_checkpoint.APP_ID_PREFIX + str(spark_checkpoint.query_id(stream.checkpoint))
    table = DeltaTable(stream.table)
    assert table.version() == 2 and table.transaction_version(app_id) == 2
    assert [json.loads(h.get("userMetadata", "{}")).get("synclib.batchId", h.get("synclib.batchId"))
            for h in sorted(table.history(), key=lambda h: h["version"])] == [0, 1, 2]
    assert_rows(stream, {0: range(5), 1: range(2)})
    assert duckdb_rows(stream.table) == pairs({0: range(5), 1: range(2)})
    assert TOPIC in (stream.commit_log(2)["commitInfo"][0].get("synclib.offsets")
                     or json.loads(stream.commit_log(2)["commitInfo"][0]["userMetadata"])["synclib.offsets"])
