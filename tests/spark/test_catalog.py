"""Tables by name through the session's catalog (`synclib.delta.catalog`): created with their
partitioning, clustering and properties, written once per batch by both engines, checked before a
batch. The session's catalog here is Spark's in-memory one with Delta's catalog; the Hive metastore
across two sessions is tests/e2e/test_tables_by_name.py."""

from __future__ import annotations

import argparse
import datetime as dt
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from synclib.dead_letters import commands
from synclib.dead_letters.sink import SCHEMA
from synclib.delta.catalog import TableError, TableLayout, ensure_table, locate
from synclib.delta.table import read_table_offsets
from synclib.settings import ForwarderConfig
from synclib.settings.values import DELTA_RS, DELTA_SPARK
from tests.spark.test_sink import Stream, lose_spark_commit


@pytest.fixture
def schema(spark: SparkSession) -> Iterator[str]:
    """A schema of its own for each test, dropped with its tables afterwards."""
    name = f"s_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE SCHEMA {name}")
    yield name
    spark.sql(f"DROP SCHEMA {name} CASCADE")


def detail(spark: SparkSession, name: str) -> dict:
    return spark.sql(f"DESCRIBE DETAIL {name}").collect()[0].asDict()


@pytest.mark.parametrize("engine", [DELTA_RS, DELTA_SPARK])
def test_a_table_by_name_is_created_with_its_layout_and_written_once_per_batch(
        spark: SparkSession, tmp_path: Path, schema: str, engine: str) -> None:
    stream = Stream(spark, tmp_path, engine)
    name = f"{schema}.events"
    sink = {"table": name, "partition_by": ("partition",), "table_properties": {"synclib.test": "yes"}}
    stream.offer({0: 3, 1: 2})
    stream.run(**sink)
    location = locate(spark, name)
    assert location is not None and location != stream.table  # the catalog's location, not the stream's path
    assert detail(spark, name)["partitionColumns"] == ["partition"]
    assert detail(spark, name)["properties"]["synclib.test"] == "yes"

    lose_spark_commit(stream.checkpoint, 0)  # a crash between the Delta commit and Spark's
    stream.offer({0: 5, 1: 4})
    stream.run(**sink)  # replays batch 0: the table holds it, nothing is written
    stream.run(**sink)  # batch 1

    rows = spark.table(name).groupBy("partition").count().orderBy("partition").collect()
    assert [(r[0], r[1]) for r in rows] == [(0, 5), (1, 4)]
    assert spark.table(name).select("partition", "offset").distinct().count() == 9
    assert read_table_offsets(location) == {("events", 0): 5, ("events", 1): 4}


def test_liquid_clustering_is_written_by_delta_spark_and_refused_to_delta_rs(
        spark: SparkSession, tmp_path: Path, schema: str) -> None:
    stream = Stream(spark, tmp_path, DELTA_SPARK)
    name = f"{schema}.clustered"
    stream.offer({0: 3})
    stream.run(table=name, cluster_by=("partition", "offset"))

    assert detail(spark, name)["clusteringColumns"] == ["partition", "offset"]
    assert spark.table(name).count() == 3
    with pytest.raises(TableError, match=r"sink.cluster_by: a clustered table is written by delta-spark only"):
        Stream(spark, tmp_path / "rs", DELTA_RS).run(table=name, cluster_by=("partition", "offset"))


def test_a_path_table_with_properties_is_created_by_delta_spark(spark: SparkSession, tmp_path: Path) -> None:
    stream = Stream(spark, tmp_path, DELTA_SPARK)
    stream.offer({0: 2})
    stream.run(table_properties={"delta.appendOnly": "true"})

    assert detail(spark, f"delta.`{stream.table}`")["properties"]["delta.appendOnly"] == "true"
    assert spark.read.format("delta").load(stream.table).count() == 2


@pytest.mark.parametrize(("existing", "sink", "fragment"), [
    ("(key binary, value string)", {}, "the stream's columns differ from the table's: only in the stream"),
    (None, {"partition_by": ("topic",)}, "the table is partitioned by ['partition'], the config by ['topic']"),
])
def test_an_existing_table_that_disagrees_stops_before_a_batch(
        spark: SparkSession, tmp_path: Path, schema: str, existing: str | None, sink: dict, fragment: str) -> None:
    stream = Stream(spark, tmp_path, DELTA_SPARK)
    name = f"{schema}.events"
    stream.offer({0: 1})
    if existing is None:  # the stream's own columns, partitioned otherwise
        stream.run(table=name, partition_by=("partition",), checkpoint_location=str(tmp_path / "first"))
    else:
        spark.sql(f"CREATE TABLE {name} {existing} USING delta")

    with pytest.raises(TableError, match=r"^sink.table s_\w+.events: ") as raised:
        stream.run(table=name, **sink)
    assert fragment in str(raised.value) and "\n" not in str(raised.value)
    assert not (Path(stream.checkpoint) / "commits").exists()  # no batch ran


@pytest.mark.parametrize(("name", "fragment"), [
    ("no_such_schema.events", "schema 'no_such_schema' does not exist"),
    ("no_such_catalog.default.events", "catalog 'no_such_catalog' not found in the session"),
])
def test_a_missing_schema_or_catalog_stops_before_a_batch(spark: SparkSession, tmp_path: Path, name: str,
                                                           fragment: str) -> None:
    stream = Stream(spark, tmp_path, DELTA_SPARK)
    stream.offer({0: 1})
    with pytest.raises(TableError, match=f"^sink.table {name}: {fragment}"):
        stream.run(table=name)
    assert not (Path(stream.checkpoint) / "commits").exists()


def test_the_dead_letter_list_finds_both_tables_by_name(spark: SparkSession, tmp_path: Path, schema: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    stream = Stream(spark, tmp_path, DELTA_SPARK)
    stream.offer({0: 2})
    stream.run(table=f"{schema}.events")
    dead = ensure_table(spark, SCHEMA, TableLayout(), name=f"{schema}.events_dead_letters")
    letter = ("events", 0, 1, dt.datetime(2024, 1, 1), 0, b"k", b"v", None, "REJECTED_BY_TRANSFORM", "bad", 0, "a",
              dt.datetime(2024, 1, 1))
    spark.createDataFrame([letter], SCHEMA).write.format("delta").mode("append").save(dead)
    config = ForwarderConfig.model_validate({
        "kafka": {"bootstrap_servers": "localhost:9092"},
        "source": {"subscribe": "events", "commit_log_topic": "log", "commit_groups": ["g"]},
        "sink": {"table": f"{schema}.events", "dead_letters": {"enabled": True}},
        "checkpoint": {"location": stream.checkpoint}})

    listed = commands.run(spark, argparse.Namespace(action="list", where=None, dry_run=False), config, None)

    assert listed == 0
    assert "events[0] offset 1 (batch 0): REJECTED_BY_TRANSFORM: bad [in the main table]" in capsys.readouterr().out
