"""Table features: every engine writes what it honours right, and refuses the rest in one line.

Each table is created empty by Spark's Delta writer (the suite's session, Delta 4.4), as Spark and
Databricks users create theirs, then written by each engine (`synclib.delta.features`): a
column-mapped table (modes `name` and `id`: the files carry the physical names and field ids) is
read back with the right values by Spark's Delta reader, delta-rs and DuckDB, a replayed batch
skipped; a table with a
feature the engine does not honour is refused before a batch with nothing committed and no file
left; a feature enabled while a query runs is honoured or refuses the next batch, which a restart
on an engine that honours it writes exactly once.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from synclib.delta import column_mapping, features
from synclib.delta.features import HONOURED, TableFeatures, UnwritableTable
from synclib.delta.maintenance import run_pass
from synclib.delta.stream import DeltaStream, start_delta_stream
from synclib.settings.job import MaintenanceConfig
from synclib.settings.values import AUTO, DELTA_RS, DELTA_SPARK
from tests.spark.test_sink import (
    DIRECT,
    DIRECT_ENGINES,
    SPARK_DIRECT,
    Stream,
    assert_rows,
    event,
    lose_spark_commit,
    parquet_files,
)
from tests.support import create_table, wait_until

ROW_TRACKING = "TBLPROPERTIES ('delta.enableRowTracking' = 'true')"


def create(stream: Stream, clause: str) -> None:
    """The stream's table, created empty by Spark's Delta writer with `clause`."""
    create_table(stream.spark, stream.table, clause, include_headers=True)


def duckdb_values(table: str) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every row DuckDB reads from the table's live files, each
    column found by the physical name the table's schema gives it (as DuckDB's Delta extension,
    which cannot be downloaded here, resolves a column-mapped table)."""
    delta = DeltaTable(table)
    names = {f["name"]: (f.get("metadata") or {}).get(column_mapping.PHYSICAL_NAME, f["name"])
             for f in json.loads(delta.schema().to_json())["fields"]}
    rows = duckdb.connect().execute(
        f'SELECT "{names["partition"]}", "{names["offset"]}", "{names["value"]}" FROM read_parquet(?) ORDER BY 1, 2',
        [delta.file_uris()]).fetchall()
    return [(int(p), int(o), bytes(v)) for p, o, v in rows]


def values(offsets: dict[int, range]) -> list[tuple[int, int, bytes]]:
    return sorted((p, o, event(p, o)[1]) for p, span in offsets.items() for o in span)


# Every synclib writer of Parquet files (Spark's own Delta writer, delta-spark's row path, is Delta's).
@pytest.mark.parametrize("engine, mode", [(DELTA_RS, "name"), (DIRECT, "name"), (SPARK_DIRECT, "name"), (DIRECT, "id")])
def test_a_column_mapped_table_is_written_with_its_physical_names(
        spark: SparkSession, tmp_path: Path, engine: str, mode: str) -> None:
    stream = Stream(spark, tmp_path, engine)
    create(stream, f"TBLPROPERTIES ('delta.columnMapping.mode' = '{mode}')")
    stream.offer({0: 3, 1: 2})
    stream.run()
    stream.offer({0: 5, 1: 4})
    stream.run()
    lose_spark_commit(stream.checkpoint, 1)  # a crash between the Delta commit and Spark's
    stream.run()  # replays batch 1: skipped

    assert DeltaTable(stream.table).version() == 2
    assert_rows(stream, {0: range(5), 1: range(4)})  # delta-rs and Spark's Delta reader, every column
    assert duckdb_values(stream.table) == values({0: range(5), 1: range(4)})
    physical = {f["name"]: f["metadata"][column_mapping.PHYSICAL_NAME]
                for f in json.loads(DeltaTable(stream.table).schema().to_json())["fields"]}
    assert all(name.startswith("col-") for name in physical.values())
    for line in (Path(stream.table) / "_delta_log" / f"{2:020d}.json").read_text().splitlines():
        add = json.loads(line).get("add")
        if add:  # statistics by physical name, as Delta's readers skip files by them
            assert set(json.loads(add["stats"])["minValues"]) <= set(physical.values())


def test_a_column_mapped_partitioned_table_keys_its_partition_values_by_physical_name(
        spark: SparkSession, tmp_path: Path) -> None:
    stream = Stream(spark, tmp_path, DIRECT)
    create(stream, "PARTITIONED BY (`partition`) TBLPROPERTIES ('delta.columnMapping.mode' = 'name')")
    stream.offer({0: 2, 1: 3})
    stream.run(partition_by=("partition",))

    assert_rows(stream, {0: range(2), 1: range(3)})
    assert spark.read.format("delta").load(stream.table).where("`partition` = 1").count() == 3


@pytest.mark.parametrize("engine, clause, refused", [
    (DELTA_RS, ROW_TRACKING, "domainMetadata, rowTracking"),
    (DIRECT, "CLUSTER BY (`partition`)", "clustering, domainMetadata"),
])
def test_delta_rs_refuses_a_table_it_does_not_honour_before_a_batch(
        spark: SparkSession, tmp_path: Path, engine: str, clause: str, refused: str) -> None:
    stream = Stream(spark, tmp_path, engine)
    create(stream, clause)
    stream.offer({0: 3})

    with pytest.raises(UnwritableTable) as raised:
        stream.run()

    message = str(raised.value)
    assert "\n" not in message
    assert f"table {stream.table} needs table features that delta-rs does not write ({refused})" in message
    assert "sink.engine delta-spark writes it" in message
    assert DeltaTable(stream.table).version() == 0 and not parquet_files(stream.table)


@pytest.mark.parametrize("clause, refused", [
    ("TBLPROPERTIES ('delta.enableInCommitTimestamps' = 'true')", "inCommitTimestamp"),
    ("TBLPROPERTIES ('delta.enableTypeWidening' = 'true')", "typeWidening"),
    ("TBLPROPERTIES ('delta.checkpointPolicy' = 'v2')", "v2Checkpoint"),
])
def test_delta_rs_finds_each_feature_it_does_not_honour_in_a_table_spark_made(
        spark: SparkSession, tmp_path: Path, clause: str, refused: str) -> None:
    """What the stream checks before its first batch (above), for the other features."""
    stream = Stream(spark, tmp_path, DIRECT)
    create(stream, clause)

    with pytest.raises(UnwritableTable, match=rf"needs table features that delta-rs does not write \({refused}\)"):
        features.check_writable(stream.table, DeltaTable(stream.table), DELTA_RS)
    features.check_writable(stream.table, DeltaTable(stream.table), DELTA_SPARK)  # Delta writes it


def test_delta_rs_refuses_a_table_whose_check_constraint_it_would_not_enforce(
        spark: SparkSession, tmp_path: Path) -> None:
    stream = Stream(spark, tmp_path, DIRECT)
    create(stream, "")
    spark.sql(f"ALTER TABLE delta.`{stream.table}` ADD CONSTRAINT known_partition CHECK (`partition` < 8)")
    stream.offer({0: 1})

    with pytest.raises(UnwritableTable, match=r"\(checkConstraints\)"):
        stream.run()
    assert not parquet_files(stream.table)


def test_auto_picks_delta_spark_for_a_table_delta_rs_refuses_and_keeps_its_row_ids(
        spark: SparkSession, tmp_path: Path) -> None:
    stream = Stream(spark, tmp_path, DELTA_SPARK)
    create(stream, ROW_TRACKING)
    stream.offer({0: 3, 1: 1})
    stream.run(engine=AUTO)

    assert_rows(stream, {0: range(3), 1: range(1)})
    row_ids = spark.read.format("delta").load(stream.table).select("_metadata.row_id").collect()
    assert sorted(r.row_id for r in row_ids) == [0, 1, 2, 3]


def test_the_features_each_engine_honours_are_delta_s(spark: SparkSession) -> None:
    """delta-spark's list is Delta's own (a Delta upgrade adding features fails here, to be
    listed); delta-rs honours a subset of it, delta-spark's direct path one between."""
    jvm = spark.sparkContext._jvm  # type: ignore[attr-defined]
    supported = jvm.org.apache.spark.sql.delta.TableFeature.allSupportedFeaturesMap()
    assert {f.lower() for f in HONOURED[DELTA_SPARK]} == set(supported.keySet().toSeq().mkString(",").split(","))
    assert HONOURED[DELTA_RS] < HONOURED[features.SPARK_DIRECT] < HONOURED[DELTA_SPARK]


@contextlib.contextmanager
def running(stream: Stream, engine: str) -> Iterator[StreamingQuery]:
    """The stream's query on a processing-time trigger, once its first batch made the table;
    stopped on leaving."""
    reader = stream.spark.readStream.format("synclib_test_events").option("plan", str(stream.plan))
    direct = None
    if engine in DIRECT_ENGINES:
        direct = lambda table: stream.spark.readStream.format("synclib_test_events_direct").options(  # noqa: E731
            plan=str(stream.plan), **table).load()
    target = DeltaStream(stream.table, stream.checkpoint, DIRECT_ENGINES.get(engine, engine),
                         trigger={"processingTime": "100 milliseconds"})
    query = start_delta_stream(reader.load(), target, direct=direct)
    try:
        wait_until(lambda: DeltaTable.is_deltatable(stream.table), 120, "the first batch")
        yield query
    finally:
        query.stop()


def refused_next_batch(stream: Stream, query: StreamingQuery, alter: str, end: int) -> str:
    """`ALTER TABLE <the stream's table> <alter>` under the running `query`, then data up to `end`
    in partition 0: the query stops, refusing the batch with nothing committed and no file left;
    the refusal's line."""
    stream.spark.sql(f"ALTER TABLE delta.`{stream.table}` {alter}")
    version, files = DeltaTable(stream.table).version(), parquet_files(stream.table)
    stream.offer({0: end})
    wait_until(lambda: not query.isActive, 120, "the query to refuse the batch")
    refused = features.unwritable_in(str(query.exception()))
    assert refused is not None, query.exception()
    assert DeltaTable(stream.table).version() == version and parquet_files(stream.table) == files
    return refused


@pytest.mark.parametrize("engine", [DELTA_RS, DIRECT])
def test_features_enabled_on_a_running_table_are_honoured_or_refuse_the_next_batch(
        spark: SparkSession, tmp_path: Path, engine: str) -> None:
    stream = Stream(spark, tmp_path, engine)
    stream.offer({0: 2})
    with running(stream, engine) as query:
        # Column mapping on a running table: the columns keep their names as physical names.
        spark.sql(f"ALTER TABLE delta.`{stream.table}` SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name')")
        stream.offer({0: 4})
        wait_until(lambda: sorted(r.offset for r in stream.spark_rows().collect()) == [0, 1, 2, 3], 120,
                   "the batch after column mapping was enabled")
        # Row tracking on a running table: delta-rs must not commit the next batch.
        refused = refused_next_batch(stream, query, "SET TBLPROPERTIES ('delta.enableRowTracking' = 'true')", 6)
        assert "(domainMetadata, rowTracking)" in refused

    stream.run(engine=DELTA_SPARK)  # the refused batch, on an engine that honours the table

    assert_rows(stream, {0: range(6)})


def test_a_constraint_added_while_delta_spark_s_direct_path_runs_refuses_the_next_batch(
        spark: SparkSession, tmp_path: Path) -> None:
    stream = Stream(spark, tmp_path, SPARK_DIRECT)
    stream.offer({0: 2})
    with running(stream, SPARK_DIRECT) as query:
        refused = refused_next_batch(stream, query, "ADD CONSTRAINT known_partition CHECK (`partition` < 8)", 4)
        assert "now uses checkConstraints" in refused

    stream.run()  # the refused batch, by Spark's Delta writer (the direct path refuses the table now)

    assert_rows(stream, {0: range(4)})


def test_table_features_of_legacy_protocols(spark: SparkSession, tmp_path: Path) -> None:
    stream = Stream(spark, tmp_path, DELTA_RS)
    create(stream, "TBLPROPERTIES ('delta.minReaderVersion' = '1', 'delta.minWriterVersion' = '4')")
    table = TableFeatures.of(stream.table, DeltaTable(stream.table))
    assert table.required == {"appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns"}
    assert table.refused_by(DELTA_RS) == [] and table.in_use == frozenset()


def test_delta_rs_maintenance_leaves_a_column_mapped_table_uncompacted(spark: SparkSession, tmp_path: Path) -> None:
    """deltalake 1.6 cannot compact a column-mapped table: the pass says so and changes nothing."""
    stream = Stream(spark, tmp_path, DIRECT)
    create(stream, "TBLPROPERTIES ('delta.columnMapping.mode' = 'name')")
    for end in (2, 4):
        stream.offer({0: end})
        stream.run()

    report = run_pass(stream.table, MaintenanceConfig(min_age="0s", vacuum_retention="0s"))

    assert any("cannot compact a column-mapped table" in note for note in report.notes), report.notes
    assert report.compacted_files == 0 and DeltaTable(stream.table).version() >= 2
    assert_rows(stream, {0: range(4)})
