"""Dead letters through the session's Spark, on both Delta engines: poison rows at known
offsets of two partitions go to the dead-letter table once, every other row to the main table
once, also when a batch is replayed after its main commit without its dead-letter commit. The
tables and the checkpoint live on the S3 server, as in production; the limits test on local disk."""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from chispa import assert_df_equality
from pyspark.errors import StreamingQueryException

from harness.object_store import S3Server
from harness.poison import ERROR_COLUMN, parse_events, parse_events_fixed
from synclib.app.resume import initial_offsets_file
from synclib.dead_letters.replay import replay
from synclib.dead_letters.sink import SCHEMA as DEAD_LETTER_SCHEMA
from synclib.dead_letters.sink import DeadLetterBatches, Limits, start_with_dead_letters
from synclib.dead_letters.source_rows import MicroBatchSourceRows
from synclib.delta.stream import DeltaStream
from synclib.delta.table import read_arrow
from synclib.settings.values import DELTA_RS, DELTA_SPARK
from tests.poison import EVENTS_PER_PARTITION, good_rows, poison_rows, produce_poisoned, value
from tests.support import create_table, publish_commit

QUERY_TIMEOUT_S = 1200  # delta-spark: minutes per batch at load 25 on 2 cores


@dataclass(frozen=True)
class Place:
    """Where a run writes: the main table, the dead-letter table and the checkpoint as the job
    names them, and `files`, the directory holding them on this machine (the S3 server's
    buckets are directories)."""

    table: str
    dead: str
    checkpoint: str
    files: Path

    @classmethod
    def local(cls, directory: Path) -> Place:
        return cls(str(directory / "table"), str(directory / "dead"), str(directory / "checkpoint"), directory)

    @classmethod
    def on(cls, s3: S3Server) -> Place:
        bucket = s3.bucket()
        return cls(f"s3://{bucket}/table", f"s3://{bucket}/dead", f"s3a://{bucket}/checkpoint",
                   s3.directory / "data" / bucket)


def run(spark: Any, bootstrap: str, events: str, log: str, place: Place, engine: str,
        limits: Limits | None = None, **options: str) -> tuple[Any, DeadLetterBatches]:
    """One Trigger.AvailableNow run of the gated stream with dead letters; the query and the sink."""
    checkpoint = place.checkpoint
    source_options = {
        "kafka.bootstrap.servers": bootstrap, "subscribe": events, "commitLogTopic": log,
        "synchronizeCommitGroups": "snuba", "startingOffsets": "earliest",
        "initialOffsetsFile": initial_offsets_file(checkpoint), **options}
    raw = spark.readStream.format("synchronized_kafka").options(**source_options).load()
    query, batches = start_with_dead_letters(
        raw, parse_events, DeltaStream(place.table, checkpoint, engine, trigger={"availableNow": True}),
        dead_letters_path=place.dead, error_column=ERROR_COLUMN, limits=limits or Limits(),
        source_rows=MicroBatchSourceRows(source_options, checkpoint))
    started = time.monotonic()
    with contextlib.suppress(StreamingQueryException):  # the caller looks at query.exception()
        query.awaitTermination(QUERY_TIMEOUT_S)
    if query.isActive:
        query.stop()
        raise AssertionError(f"the {engine} run did not finish within {QUERY_TIMEOUT_S}s")
    print(f"{engine}: the run took {time.monotonic() - started:.1f}s")
    return query, batches


def read(spark: Any, table: str, columns: str) -> Any:
    """Columns `columns` (DDL) of the Delta table, read with delta-rs (Spark's Delta reader plans
    50 tasks to read a log: minutes on a busy 2-core machine), as a Spark DataFrame for chispa."""
    names = [c.split()[0] for c in columns.split(",")]
    rows = read_arrow(table, columns=names).to_pylist()
    return spark.createDataFrame([tuple(r[n] for n in names) for r in rows], columns)


def main_rows(spark: Any, place: Place) -> Any:
    return read(spark, place.table, "partition int, offset long")


def dead_rows(spark: Any, place: Place) -> Any:
    return read(spark, place.dead, "partition int, offset long, error_class string")


@pytest.fixture
def poisoned(producer: Any, new_topic: Any) -> tuple[str, str]:
    events, log = new_topic("poison-events", 2), new_topic("poison-log")
    produce_poisoned(producer, events)
    for partition in (0, 1):
        publish_commit(producer, log, "snuba", events, partition, EVENTS_PER_PARTITION)
    return events, log


@pytest.mark.parametrize("engine", [DELTA_RS, DELTA_SPARK])
def test_poison_rows_go_to_the_dead_letter_table_once_the_rest_to_the_main_table(
        spark: Any, bootstrap_servers: str, poisoned: tuple[str, str], s3: S3Server, engine: str) -> None:
    events, log = poisoned
    place = Place.on(s3)
    query, batches = run(spark, bootstrap_servers, events, log, place, engine, maxOffsetsPerTrigger="20")
    assert query.exception() is None, query.exception()
    progress = [p for p in query.recentProgress if "addBatch" in p.durationMs]
    counted = sum(batches.input_rows(p.batchId, p.numInputRows) for p in progress)
    assert counted == 2 * EVENTS_PER_PARTITION, progress  # every row once, in the batches with poison rows too

    assert_df_equality(main_rows(spark, place), spark.createDataFrame(good_rows(), "partition int, offset long"),
                       ignore_row_order=True, ignore_nullable=True)
    assert_df_equality(dead_rows(spark, place),
                       spark.createDataFrame(poison_rows(), "partition int, offset long, error_class string"),
                       ignore_row_order=True, ignore_nullable=True)
    dead = read_arrow(place.dead).to_pylist()
    assert {(r["topic"], r["partition"], r["offset"], r["value"]) for r in dead} == {
        (events, p, o, value(p, o)) for p, o, _ in poison_rows()}
    assert all(r["error_message"] and r["batch_id"] is not None and r["dead_lettered_at"] for r in dead), dead

    # A crash after the main table's commit of the last batch, before its dead-letter commit and
    # Spark's: the dead-letter commit and Spark's commit of that batch are undone, the batch replays.
    last_batch = max(int(n) for n in os.listdir(place.files / "checkpoint" / "commits") if n.isdigit())
    dead_log = sorted((place.files / "dead" / "_delta_log").glob("*.json"))
    assert f'"version":{last_batch}' in dead_log[-1].read_text().replace(" ", ""), "poison in the last batch"
    for written in dead_log[-1].parent.glob(f"*{dead_log[-1].stem}*"):  # with delta-spark's .crc and Hadoop's
        written.unlink()  # checksums, written after the commit: a real crash before it leaves none of them
    for name in (str(last_batch), f".{last_batch}.crc"):
        (place.files / "checkpoint" / "commits" / name).unlink(missing_ok=True)
    if engine == DELTA_SPARK:  # a crashed JVM has no cached snapshot of the table: neither may this one
        spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    assert run(spark, bootstrap_servers, events, log, place, engine)[0].exception() is None

    assert_df_equality(main_rows(spark, place), spark.createDataFrame(good_rows(), "partition int, offset long"),
                       ignore_row_order=True, ignore_nullable=True)
    assert_df_equality(dead_rows(spark, place),
                       spark.createDataFrame(poison_rows(), "partition int, offset long, error_class string"),
                       ignore_row_order=True, ignore_nullable=True)

    # The transform fixed for the raising rows (not for values that are not JSON): a replay
    # writes the three to the main table once; a second replay writes nothing.
    fixed = {(p, o) for p, o, cls in poison_rows() if cls != "REJECTED_BY_TRANSFORM"}
    for attempt in (1, 2):
        result = replay(spark, main_path=place.table, dead_path=place.dead, engine=engine,
                        transform=parse_events_fixed, error_column=ERROR_COLUMN, partition_by=(),
                        partition_by_date=False, include_headers=False)
        assert (result.selected, result.already, result.replayed, len(result.still_failing)) == \
            (5, 0 if attempt == 1 else 3, 3 if attempt == 1 else 0, 2), result
        assert_df_equality(main_rows(spark, place),
                           spark.createDataFrame(sorted(set(good_rows()) | fixed), "partition int, offset long"),
                           ignore_row_order=True, ignore_nullable=True)


def test_a_dead_letter_table_spark_created_with_column_mapping_is_written_under_its_physical_names(
        spark: Any, bootstrap_servers: str, poisoned: tuple[str, str], tmp_path: Path) -> None:
    """The dead-letter table made beforehand by Spark's Delta writer with column mapping (as the
    main table may be, tests/spark/test_features.py): delta-rs writes the dead letters under the
    physical names, and Spark's Delta reader, which maps them back, reads every value."""
    events, log = poisoned
    place = Place.local(tmp_path)
    create_table(spark, place.dead, "TBLPROPERTIES ('delta.columnMapping.mode' = 'name')", schema=DEAD_LETTER_SCHEMA)

    query, _ = run(spark, bootstrap_servers, events, log, place, DELTA_RS)

    assert query.exception() is None, query.exception()
    by_spark = spark.read.format("delta").load(place.dead).select("topic", "partition", "offset", "error_class")
    assert_df_equality(by_spark, spark.createDataFrame([(events, p, o, c) for p, o, c in poison_rows()],
                                                       "topic string, partition int, offset long, error_class string"),
                       ignore_row_order=True, ignore_nullable=True)
    assert_df_equality(main_rows(spark, place), spark.createDataFrame(good_rows(), "partition int, offset long"),
                       ignore_row_order=True, ignore_nullable=True)


def test_too_much_of_a_batch_failing_stops_the_query_naming_its_offsets(
        spark: Any, bootstrap_servers: str, poisoned: tuple[str, str], tmp_path: Path) -> None:
    events, log = poisoned
    query, _ = run(spark, bootstrap_servers, events, log, Place.local(tmp_path), DELTA_RS,
                   Limits(max_fraction=0.1, max_rows=2),
                   maxOffsetsPerTrigger="48")
    error = str(query.exception())
    assert "fail the transform" in error and f"{events}[0] offsets [0, 24), {events}[1] offsets [0, 24)" in error, error
    assert not (tmp_path / "dead").exists()
