"""Listing dead letters and replaying them into the main table after the transform is fixed
(the commands: `synclib.dead_letters.commands`).

A replay reads the dead-letter table (delta-rs), keeps the rows `--where` selects that the main
table does not hold yet (by topic, partition and offset), runs the configured transform on their
source columns, isolates the rows it still fails on (they stay where they are, reported), and
appends the rest to the main table in ONE Delta commit. That commit carries no `synclib.*`
offsets, so the offsets the main table records (what the job resumes from) do not move. Run
again, it finds the replayed rows in the main table and writes nothing: each dead letter reaches
the main table once. The dead-letter table is left as it is: it is the record of what failed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pyarrow as pa
from deltalake import write_deltalake
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from synclib.dead_letters.isolation import describe
from synclib.dead_letters.transformed import Transform, TransformedRows
from synclib.delta import commit_lock
from synclib.delta.batch_writes import DeltaTarget
from synclib.delta.catalog import quote
from synclib.delta.table import DATE_COLUMN, open_table, read_arrow
from synclib.delta.writer import arrow_schema
from synclib.errors import first_line
from synclib.locations import normalize_location
from synclib.settings.values import DELTA_SPARK

logger = logging.getLogger(__name__)

KEYS = ["topic", "partition", "offset"]
# The source's columns in its own order (the transform sees them as the job's source gives them).
SPARK_SOURCE_ORDER = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers")


@dataclass(frozen=True)
class ReplayResult:
    selected: int  # dead letters `where` selected
    already: int  # of them, already in the main table
    replayed: int  # written to the main table now
    still_failing: list[str]  # `topic[partition] offset: error` of the rows the transform still fails on


def read_table(spark: SparkSession, path: str) -> DataFrame | None:
    """The Delta table at `path` as a DataFrame (read with delta-rs: no Delta jars needed)."""
    data = read_arrow(path)
    return None if data is None else spark.createDataFrame(data)


def dead_letters(spark: SparkSession, dead_path: str, main_path: str, where: str | None = None) -> DataFrame | None:
    """The dead letters `where` selects, with `in_main_table`: whether the main table holds the row."""
    letters = read_table(spark, dead_path)
    if letters is None:
        return None
    if where:
        letters = letters.where(where)
    main = read_arrow(main_path, columns=KEYS)
    if main is None:
        return letters.withColumn("in_main_table", F.lit(False))
    held = spark.createDataFrame(main).withColumn("in_main_table", F.lit(True))
    return (letters.join(F.broadcast(held.dropDuplicates(KEYS)), KEYS, "left")
            .withColumn("in_main_table", F.coalesce(F.col("in_main_table"), F.lit(False))))


def replay(spark: SparkSession, *, main_path: str, dead_path: str, engine: str, transform: Transform | None,
           error_column: str | None, partition_by: tuple[str, ...], partition_by_date: bool,
           include_headers: bool, where: str | None = None, dry_run: bool = False,
           main_table: str | None = None) -> ReplayResult:
    """Append the selected dead letters the main table lacks to it, transformed, in one commit
    (with delta-spark by `main_table`'s name when given, `main_path` being its location)."""
    letters = dead_letters(spark, dead_path, main_path, where)
    if letters is None:
        return ReplayResult(0, 0, 0, [])
    letters.persist()
    try:
        selected = letters.count()
        pending = letters.where(~F.col("in_main_table")).dropDuplicates(KEYS)
        columns = [c for c in SPARK_SOURCE_ORDER if include_headers or c != "headers"]
        raw = pending.select(*columns)
        raw.persist()
        rows = raw.count()
        columns_out = list(partition_by) + ([DATE_COLUMN] if partition_by_date else [])
        target = DeltaTarget(engine, normalize_location(main_path), "", tuple(columns_out), table=main_table)
        transformed = TransformedRows(transform, error_column, partition_by_date)
        # every row may be poison here: they all failed once
        _, keys, poison = transformed.isolate_poison(raw, None, max_rows=rows) if rows else (0, [], [])
        failing = {f.key: f"{f.error_class}: {first_line(f.message)}" for f in poison}
        good = raw.where(~_keys_in(list(failing))) if failing else raw
        if error_column is not None and rows:
            for r in transformed.rejected_rows(good, []).collect():
                failing[(r[0], int(r[1]), int(r[2]))] = f"{r[3]}: {r[4]}"
            good = raw.where(~_keys_in(list(failing))) if failing else raw
        prepared = transformed.prepared(good)
        replayed = rows - len(failing)
        if replayed and not dry_run:
            _append(prepared, target)
        logger.info("replayed %d dead letters of %s into %s (%s)", replayed, dead_path, main_path,
                    describe(keys) if keys else "none pending")
        still = [f"{t}[{p}] offset {o}: {error}" for (t, p, o), error in sorted(failing.items())]
        return ReplayResult(selected, selected - rows, 0 if dry_run else replayed, still)
    finally:
        letters.unpersist()


def _append(df: DataFrame, target: DeltaTarget) -> None:
    """One plain append (no application transaction, no synclib metadata), columns in the
    table's order."""
    table = open_table(target.path)
    if table is not None:
        df = df.select(*[field.name for field in table.schema().fields])
    if target.engine == DELTA_SPARK:
        writer = df.write.format("delta").mode("append")
        if target.table is not None:  # by name: the catalog's table, with its partitioning
            writer.saveAsTable(quote(target.table))
            return
        if target.partition_by:
            writer = writer.partitionBy(*target.partition_by)
        writer.save(target.path)
        return
    data = df.toArrow()
    data = pa.Table.from_batches(data.to_batches(), schema=data.schema).cast(arrow_schema(df.schema))
    with commit_lock.held(target.path):
        write_deltalake(target.path, data, mode="append", partition_by=list(target.partition_by) or None)


def _keys_in(keys: list[tuple[str, int, int]]) -> Column:
    condition = F.lit(False)
    for topic, partition, offset in keys:
        condition = condition | ((F.col("topic") == topic) & (F.col("partition") == partition)
                                 & (F.col("offset") == offset))
    return condition
