"""Delta sink: one commit per micro-batch with its offsets, replays skipped, resume from the table.

The stream comes from `EventsSource`, a deterministic in-memory Kafka-shaped source whose
available offsets are set by a small JSON plan file, so each run is one bounded batch. The
sink's contract is tested on both writers (`engine`: delta-rs and delta-spark, the session has
Delta's jars) and on both direct write paths (`DIRECT`, `SPARK_DIRECT`: the source's read tasks
write the files, `DirectEventsSource`), and every table is read back by delta-rs and by Spark's Delta reader.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from deltalake import CommitProperties, DeltaTable, write_deltalake
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from harness.object_store import S3Server
from synclib import spark_checkpoint
from synclib.compat.pyspark import from_arrow_schema
from synclib.delta.commits import commit_metadata
from synclib.delta.direct import FILES_SCHEMA, TableFiles
from synclib.delta.engine import delta_spark_available, resolve_engine
from synclib.delta.stream import DeltaStream, start_delta_stream
from synclib.delta.table import TableSummary, read_arrow, read_table_offsets, synclib_metadata, table_summary
from synclib.delta.writer import AddedFiles, DeltaStreamWriter, arrow_schema
from synclib.locations import normalize_location
from synclib.offsets import to_offsets_json
from synclib.settings.values import DELTA_RS, DELTA_SPARK

TOPIC = "events"
BASE_TIME = dt.datetime(2024, 1, 1, 22, 0, tzinfo=dt.timezone.utc)
HEADER = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
KAFKA_SCHEMA = StructType([
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
    StructField("headers", ArrayType(HEADER)),
])
TIMEOUT = 120


def event(partition: int, offset: int) -> tuple[Any, ...]:
    """The deterministic record at (partition, offset); one hour apart, crossing UTC midnight."""
    headers = [("n", str(offset).encode())] if offset % 2 == 0 else None
    return (f"k{partition}-{offset}".encode(), f"v{partition}-{offset}".encode(), TOPIC,
            partition, offset, BASE_TIME + dt.timedelta(hours=offset), 0, headers)


@dataclass
class OffsetRange(InputPartition):
    partition: int
    start: int
    end: int
    missing: tuple[int, ...]


class EventsReader(DataSourceStreamReader):
    """Offsets `{"events": {"<partition>": next}}`; the plan file sets what is available
    (`{"offsets": {...}, "missing": {"<partition>": [offsets without a record]}}`)."""

    def __init__(self, options: dict[str, str]) -> None:
        self._plan_path = options["plan"]
        self._starting = options.get("startingOffsets")

    def _plan(self) -> dict[str, Any]:
        return json.loads(Path(self._plan_path).read_text())

    def initialOffset(self) -> dict:
        if self._starting:
            return json.loads(self._starting)
        return {TOPIC: {p: 0 for p in self._plan()["offsets"]}}

    def latestOffset(self, start: dict, limit: Any) -> dict:
        return {TOPIC: dict(self._plan()["offsets"])}

    def partitions(self, start: dict, end: dict) -> list[OffsetRange]:
        missing = self._plan().get("missing", {})
        return [OffsetRange(int(p), start[TOPIC].get(p, 0), stop, tuple(missing.get(p, ())))
                for p, stop in end[TOPIC].items() if stop > start[TOPIC].get(p, 0)]

    def read(self, partition: OffsetRange) -> Iterator[tuple[Any, ...]]:  # type: ignore[override]
        for offset in range(partition.start, partition.end):
            if offset not in partition.missing:
                yield event(partition.partition, offset)


class EventsSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "synclib_test_events"

    def schema(self) -> StructType:
        return KAFKA_SCHEMA

    def streamReader(self, schema: StructType) -> EventsReader:
        return EventsReader(self.options)


class DirectEventsReader(EventsReader):
    """The test source on the direct write path: its read tasks write the table's files."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self._table = TableFiles.from_options(options)

    def read(self, partition: OffsetRange) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        rows = [dict(zip(KAFKA_SCHEMA.fieldNames(), row, strict=True)) for row in super().read(partition)]
        return self._table.write([pa.RecordBatch.from_pylist(rows, schema=arrow_schema(KAFKA_SCHEMA))])


class DirectEventsSource(EventsSource):
    @classmethod
    def name(cls) -> str:
        return "synclib_test_events_direct"

    def schema(self) -> StructType:
        return from_arrow_schema(FILES_SCHEMA)

    def streamReader(self, schema: StructType) -> DirectEventsReader:
        return DirectEventsReader(self.options)


DIRECT = "delta-rs-direct"  # delta-rs, read tasks writing the files
SPARK_DIRECT = "delta-spark-direct"  # delta-spark, read tasks writing the files (synclib.delta.spark_direct)
DIRECT_ENGINES = {DIRECT: DELTA_RS, SPARK_DIRECT: DELTA_SPARK}


class Stream:
    """One Delta table fed by the test source through `engine`'s writer; `run` processes what
    the plan makes available."""

    def __init__(self, spark: SparkSession, root: Path, engine: str = DELTA_RS, s3: S3Server | None = None) -> None:
        self.spark = spark
        self.query: StreamingQuery | None = None  # the last run's
        self.engine = engine
        self.plan = root / "plan.json"
        self.table = self.table_dir = str(root / "table")
        self.checkpoint = self.checkpoint_dir = str(root / "checkpoint")
        if s3 is not None:  # the same files, through the server: its buckets are directories
            bucket = s3.bucket()
            self.table, self.checkpoint = f"s3://{bucket}/table", f"s3a://{bucket}/checkpoint"
            self.table_dir = str(s3.directory / "data" / bucket / "table")
            self.checkpoint_dir = str(s3.directory / "data" / bucket / "checkpoint")
        spark.dataSource.register(EventsSource)
        spark.dataSource.register(DirectEventsSource)

    def offer(self, offsets: dict[int, int], missing: dict[int, list[int]] | None = None) -> None:
        plan = {"offsets": {str(p): o for p, o in offsets.items()},
                "missing": {str(p): m for p, m in (missing or {}).items()}}
        self.plan.with_name("plan.tmp").write_text(json.dumps(plan))
        self.plan.with_name("plan.tmp").replace(self.plan)

    def run(self, checkpoint_location: str | None = None, starting: dict | None = None,
            **sink: Any) -> None:
        options = {"plan": str(self.plan)}
        if starting is not None:
            options["startingOffsets"] = json.dumps(starting)
        reader = self.spark.readStream.format("synclib_test_events").options(**options)
        engine = sink.pop("engine", DIRECT_ENGINES.get(self.engine, self.engine))
        direct = None
        if self.engine in DIRECT_ENGINES:
            direct = lambda table: self.spark.readStream.format("synclib_test_events_direct").options(  # noqa: E731
                **options, **table).load()
        partition_by = tuple(sink.pop("partition_by", ()))
        target = DeltaStream(self.table, checkpoint_location or self.checkpoint, engine, partition_by,
                             trigger={"availableNow": True}, **sink)
        query = self.query = start_delta_stream(reader.load(), target, direct=direct)
        try:
            assert query.awaitTermination(TIMEOUT), "the stream did not finish in time"
            assert query.exception() is None, query.exception()
        finally:
            query.stop()

    def rows(self) -> DataFrame:
        """The table's source columns as delta-rs reads them."""
        data = read_arrow(self.table)
        return self.spark.createDataFrame(data.select(KAFKA_SCHEMA.fieldNames()).cast(
            arrow_schema(KAFKA_SCHEMA)))

    def spark_rows(self) -> DataFrame:
        """The table's source columns as Spark's Delta reader reads them."""
        return self.spark.read.format("delta").load(self.table).select(KAFKA_SCHEMA.fieldNames())

    def commit_log(self, version: int) -> dict[str, list[dict[str, Any]]]:
        """The actions of one `_delta_log` JSON commit file, by action type."""
        actions: dict[str, list[dict[str, Any]]] = {}
        path = Path(self.table_dir) / "_delta_log" / f"{version:020d}.json"
        for line in path.read_text().splitlines():
            ((kind, action),) = json.loads(line).items()
            actions.setdefault(kind, []).append(action)
        return actions


ENGINES = (DELTA_RS, DELTA_SPARK, DIRECT, SPARK_DIRECT)
LOCAL, S3 = "local", "s3"


@pytest.fixture
def storage(request: pytest.FixtureRequest) -> str:
    """Where a stream writes: local disk unless a test is parametrized over `storage`."""
    return getattr(request, "param", LOCAL)


@pytest.fixture(params=ENGINES)
def stream(request: pytest.FixtureRequest, spark: SparkSession, tmp_path: Path, storage: str) -> Stream:
    """A stream written by each engine in turn."""
    return Stream(spark, tmp_path, request.param, request.getfixturevalue("s3") if storage == S3 else None)


# The crash windows run where production tables live: on S3 (the other sink tests, the crash
# harness and the job-level kill tests cover local disk).
on_s3 = pytest.mark.parametrize("storage", [S3], indirect=True)


def commit_info(log: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """The `synclib.*` metadata of a commit, wherever its engine put it (top level or userMetadata)."""
    (info,) = log["commitInfo"]
    metadata = synclib_metadata(info)
    assert metadata is not None, info
    return metadata


def transactions(log: dict[str, list[dict[str, Any]]]) -> list[tuple[str, int]]:
    """The application transactions of a commit (delta-spark adds `lastUpdated`: not compared)."""
    return [(txn["appId"], txn["version"]) for txn in log.get("txn", [])]


def expected(spark: SparkSession, offsets: dict[int, range]) -> DataFrame:
    rows = [event(p, o) for p, span in offsets.items() for o in span]
    return spark.createDataFrame(rows, KAFKA_SCHEMA)


def assert_rows(stream: Stream, offsets: dict[int, range]) -> None:
    """delta-rs and Spark's Delta reader both read exactly the events at `offsets`."""
    want = expected(stream.spark, offsets)
    assert_df_equality(stream.rows(), want, ignore_row_order=True, ignore_nullable=True)
    assert_df_equality(stream.spark_rows(), want, ignore_row_order=True, ignore_nullable=True)


def parquet_files(table: str) -> set[str]:
    return {str(p.relative_to(table)) for p in Path(table).rglob("*.parquet")}


def lose_spark_commit(checkpoint_location: str, batch_id: int) -> None:
    """What a crash between the Delta commit and Spark's checkpoint commit leaves behind."""
    commits = Path(checkpoint_location) / "commits"
    (commits / str(batch_id)).unlink()
    (commits / f".{batch_id}.crc").unlink(missing_ok=True)


def table_files(table: str) -> set[str]:
    return set(pa.table(DeltaTable(table).get_add_actions(flatten=True))["path"].to_pylist())


def test_each_batch_is_one_commit_with_txn_and_offsets_and_a_restart_continues(
        stream: Stream) -> None:
    stream.offer({0: 3, 1: 2})
    stream.run()
    stream.offer({0: 5, 1: 4})
    stream.run()  # a restart from the same checkpoint: batch 1

    assert_rows(stream, {0: range(5), 1: range(4)})
    app_id = "synclib-" + spark_checkpoint.query_id(stream.checkpoint)
    log = stream.commit_log(1)
    assert transactions(log) == [(app_id, 1)]
    info = commit_info(log)
    if stream.engine == SPARK_DIRECT:  # Delta's own transaction, as Delta's streaming sink commits
        (entry,) = log["commitInfo"]
        assert (entry["operation"], entry["operationParameters"]["epochId"]) == ("STREAMING UPDATE", "1")
        assert entry["engineInfo"].startswith("Apache-Spark/") and entry["isBlindAppend"] is True
    assert json.loads(info["synclib.offsets"]) == {TOPIC: {"0": 5, "1": 4}}
    assert (info["synclib.batchId"], info["synclib.appId"]) == (1, app_id)
    assert info["synclib.version"]
    stats = [json.loads(add["stats"]) for add in log["add"]]
    assert sum(s["numRecords"] for s in stats) == 4
    assert sorted((s["minValues"]["offset"], s["maxValues"]["offset"]) for s in stats) == [(2, 3), (3, 4)]
    assert all("key" not in s["minValues"] and s["nullCount"]["key"] == 0 for s in stats)
    assert all(add["partitionValues"] == {} and add["size"] > 0 for add in log["add"])
    assert parquet_files(stream.table) == table_files(stream.table)
    assert table_summary(stream.table) == TableSummary(
        path=stream.table, version=1, rows=9, app_id=app_id, batch_id=1, offsets={(TOPIC, 0): 5, (TOPIC, 1): 4})


@on_s3
def test_a_replayed_batch_is_skipped_and_its_files_removed(stream: Stream) -> None:
    stream.offer({0: 2, 1: 2})
    stream.run()
    stream.offer({0: 4, 1: 3})
    stream.run()
    files = parquet_files(stream.table_dir)
    lose_spark_commit(stream.checkpoint_dir, 1)

    stream.run()

    assert os.path.exists(os.path.join(stream.checkpoint_dir, "commits", "1"))
    assert DeltaTable(stream.table).version() == 1
    assert parquet_files(stream.table_dir) == files
    assert_rows(stream, {0: range(4), 1: range(3)})
    stream.offer({0: 5, 1: 3})
    stream.run()
    assert table_summary(stream.table).batch_id == 2
    assert_rows(stream, {0: range(5), 1: range(3)})


def test_a_batch_without_rows_still_records_its_offsets(stream: Stream) -> None:
    stream.offer({0: 2})
    stream.run()
    stream.offer({0: 4}, missing={0: [2, 3]})  # e.g. compacted away or transaction markers
    stream.run()

    log = stream.commit_log(1)
    assert "add" not in log and transactions(log)[0][1] == 1
    assert read_table_offsets(stream.table) == {(TOPIC, 0): 4}
    assert_rows(stream, {0: range(2)})


@on_s3
def test_a_new_checkpoint_resumes_from_the_offsets_in_the_table(
        stream: Stream) -> None:
    assert read_table_offsets(stream.table) is None
    assert table_summary(stream.table) is None
    stream.offer({0: 3, 1: 1})
    stream.run()
    stream.offer({0: 4, 1: 3})

    starting = read_table_offsets(stream.table)
    assert starting == {(TOPIC, 0): 3, (TOPIC, 1): 1}
    new_checkpoint = stream.checkpoint + "-new"
    stream.run(checkpoint_location=new_checkpoint, starting=to_offsets_json(starting))

    assert_rows(stream, {0: range(4), 1: range(3)})
    summary = table_summary(stream.table)
    assert summary is not None
    assert (summary.version, summary.batch_id, summary.rows) == (1, 0, 7)
    assert summary.app_id == "synclib-" + spark_checkpoint.query_id(new_checkpoint)
    assert summary.offsets == {(TOPIC, 0): 4, (TOPIC, 1): 3}


def test_partition_by_date_uses_the_utc_date_in_any_session_time_zone(stream: Stream) -> None:
    spark = stream.spark
    zone = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    try:
        stream.offer({0: 3, 1: 1})  # 22:00, 23:00 on 2024-01-01 and 00:00 on 2024-01-02 UTC
        stream.run(partition_by=["partition"], partition_by_date=True)
    finally:
        spark.conf.set("spark.sql.session.timeZone", zone)

    adds = stream.commit_log(0)["add"]
    assert sorted((a["partitionValues"]["partition"], a["partitionValues"]["date"],
                   json.loads(a["stats"])["numRecords"]) for a in adds) == [
        ("0", "2024-01-01", 2), ("0", "2024-01-02", 1), ("1", "2024-01-01", 1)]
    assert all(a["path"].startswith(f"partition={a['partitionValues']['partition']}/"
                                    f"date={a['partitionValues']['date']}/part-") for a in adds), adds
    table = DeltaTable(stream.table)
    assert table.metadata().partition_columns == ["partition", "date"]
    dates = read_arrow(stream.table, columns=["offset", "partition", "date"]).sort_by(
        [("partition", "ascending"), ("offset", "ascending")])
    assert [d.isoformat() for d in dates["date"].to_pylist()] == [
        "2024-01-01", "2024-01-01", "2024-01-02", "2024-01-01"]
    assert_rows(stream, {0: range(3), 1: range(1)})


def fake_checkpoint(location: Path, query: str, offsets: list[str]) -> str:
    """A checkpoint as Spark leaves it for batches 0..n-1 (query metadata and offset log)."""
    (location / "offsets").mkdir(parents=True)
    (location / "metadata").write_text(json.dumps({"id": query}))
    for batch, source_offsets in enumerate(offsets):
        (location / "offsets" / str(batch)).write_text(f"v1\n{{}}\n{source_offsets}\n")
    return str(location)


def test_commit_skips_a_batch_without_rows_whose_offsets_did_not_move(tmp_path: Path) -> None:
    location = fake_checkpoint(tmp_path / "checkpoint", "q1", ['{"events":{"0":7}}'] * 2)
    table = str(tmp_path / "table")
    writer = DeltaStreamWriter(KAFKA_SCHEMA, {"path": table, "checkpointLocation": location})

    writer.commit([AddedFiles([])], 0)
    writer.commit([AddedFiles([])], 1)
    writer.commit([AddedFiles([])], 0)

    assert DeltaTable(table).version() == 0
    assert DeltaTable(table).transaction_version("synclib-q1") == 0
    assert read_table_offsets(table) == {("events", 0): 7}


def test_partition_values_with_any_characters_round_trip(tmp_path: Path) -> None:
    location = fake_checkpoint(tmp_path / "checkpoint", "q2", ['{"t":{"0":3}}'])
    table = str(tmp_path / "table")
    schema = StructType([StructField("name", StringType()), StructField("n", LongType())])
    writer = DeltaStreamWriter(schema, {"path": table, "checkpointLocation": location,
                                        "partitionBy": '["name"]'})
    names = ["a b:c%d/é=", None, "plain"]
    batch = pa.record_batch({"name": pa.array(names, pa.large_string()), "n": [1, 2, 3]})

    writer.commit([writer.write(iter([batch]))], 0)

    data = read_arrow(table).sort_by("n")
    assert data.to_pydict() == {"name": names, "n": [1, 2, 3]}
    assert sorted(os.listdir(table)) == [
        "_delta_log", "name=__HIVE_DEFAULT_PARTITION__", "name=a%20b%3Ac%25d%2F%C3%A9%3D",
        "name=plain"]


def test_abort_deletes_the_files_its_tasks_wrote(tmp_path: Path) -> None:
    table = str(tmp_path / "table")
    schema = StructType([StructField("n", LongType())])
    writer = DeltaStreamWriter(schema, {"path": table, "checkpointLocation": "unused"})
    written = writer.write(iter([pa.record_batch({"n": [1, 2]})]))
    assert parquet_files(table) == {f.path for f in written.files}

    writer.abort([written, None], 0)

    assert parquet_files(table) == set()


def test_direct_write_read_task_that_fails_leaves_no_files(tmp_path: Path) -> None:
    table = str(tmp_path / "table")
    schema = StructType([StructField("n", LongType()), StructField("p", LongType())])
    files = TableFiles(table, arrow_schema(schema), ("p",))

    def failing() -> Iterator[pa.RecordBatch]:
        yield pa.record_batch({"n": [1, 2], "p": [0, 1]})
        raise RuntimeError("the read failed")

    with pytest.raises(RuntimeError, match="the read failed"):
        list(files.write(failing()))
    assert parquet_files(table) == set()

    (rows,) = files.write(iter([pa.record_batch({"n": [1, 2], "p": [0, 1]})]))
    assert sorted(parquet_files(table)) == sorted(rows.column("path").to_pylist())


def test_checkpoint_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    location = fake_checkpoint(tmp_path / "checkpoint", "q3", ['{"t":{"0":1}}', "-"])
    assert spark_checkpoint.app_id(location) == "synclib-q3"
    assert spark_checkpoint.batch_offsets(location, 0) == '{"t":{"0":1}}'
    assert spark_checkpoint.batch_offsets(location, 1) is None
    with pytest.raises(spark_checkpoint.CheckpointError, match="batch 2"):
        spark_checkpoint.batch_offsets(location, 2)
    assert spark_checkpoint.query_id(str(tmp_path)) is None
    with pytest.raises(spark_checkpoint.CheckpointError, match="no query metadata"):
        spark_checkpoint.app_id(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    assert spark_checkpoint.app_id("checkpoint") == spark_checkpoint.app_id(f"file://{location}")
    assert normalize_location("dbfs:/ckpt/a") == "/dbfs/ckpt/a"
    assert normalize_location("s3://bucket/ckpt") == "s3://bucket/ckpt"


def test_table_offsets_are_found_in_delta_spark_user_metadata_behind_other_commits(
        tmp_path: Path) -> None:
    table = str(tmp_path / "table")
    data = pa.table({"offset": pa.array([1], pa.int64())})
    user = json.dumps(commit_metadata("synclib-q", 4, '{"events":{"0":2}}'))
    write_deltalake(table, data, commit_properties=CommitProperties(
        custom_metadata={"userMetadata": user}))
    write_deltalake(table, data, mode="append")  # e.g. a manual fix-up, no synclib metadata

    assert read_table_offsets(table) == {("events", 0): 2}
    summary = table_summary(table)
    assert summary is not None
    assert (summary.version, summary.rows, summary.app_id, summary.batch_id) == (1, 2, "synclib-q", 4)


def test_auto_engine_is_delta_spark_with_delta_jars_and_either_can_be_chosen(spark: SparkSession) -> None:
    assert delta_spark_available(spark) is True  # the session has Delta's jars (tests/conftest.py)
    assert resolve_engine(spark) == DELTA_SPARK
    assert resolve_engine(spark, DELTA_RS) == DELTA_RS
    assert resolve_engine(spark, DELTA_SPARK) == DELTA_SPARK
    with pytest.raises(ValueError, match="delta-rs"):
        resolve_engine(spark, "parquet")


def test_a_table_with_other_columns_or_partitioning_is_refused(stream: Stream) -> None:
    write_deltalake(stream.table, pa.table({"offset": pa.array([1], pa.int64())}))
    events = stream.spark.readStream.format("synclib_test_events").option("plan", "-").load()
    with pytest.raises(ValueError, match=r"only in the stream \['key"):
        start_delta_stream(events, DeltaStream(stream.table, stream.checkpoint))

    other = str(Path(stream.table).with_name("other"))
    write_deltalake(other, arrow_schema(KAFKA_SCHEMA).empty_table(), partition_by=["topic"])
    with pytest.raises(ValueError, match=r"partitioned by \['topic'\]"):
        start_delta_stream(events, DeltaStream(other, stream.checkpoint))
