"""Starting a stream into a Delta table, exactly once, for every path: the engine's own sink, the
direct write path, or a `foreachBatch` sink of the caller's (the dead-letter sink)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from deltalake import DeltaTable, Schema
from deltalake.exceptions import DeltaError
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.readwriter import DataStreamWriter
from pyspark.sql.types import StructType

from synclib.delta import column_mapping, features, spark_direct
from synclib.delta.batch_writes import DeltaTarget
from synclib.delta.catalog import TableError, TableLayout, ensure_table
from synclib.delta.direct import TableFiles
from synclib.delta.engine import fit_delta_to_local_master, fit_delta_to_object_store, resolve_engine
from synclib.delta.spark_direct import DeltaSparkDirectCommit
from synclib.delta.spark_writer import DeltaSparkBatchWriter
from synclib.delta.table import DATE_COLUMN, open_table
from synclib.delta.writer import FORMAT, DeltaBatchSink, DeltaSink, DeltaStreamWriter, DirectBatchCommit, arrow_schema
from synclib.errors import first_line
from synclib.locations import hadoop_location, normalize_location
from synclib.settings.values import AUTO, DELTA_RS, DELTA_SPARK

logger = logging.getLogger(__name__)

BatchFunction = Callable[[DataFrame, int], None]


def utc_date(timestamp: Column) -> Column:
    """The UTC calendar date of a timestamp, whatever the session time zone."""
    return F.date_from_unix_date(F.floor(F.unix_seconds(timestamp) / 86_400).cast("int"))


@dataclass(frozen=True)
class DeltaStream:
    """Where and how a streaming query writes its Delta table. `partition_by_date` adds a `date`
    column (UTC date of `timestamp`) and partitions by it after `partition_by`. `trigger` holds
    keyword arguments for `DataStreamWriter.trigger`, e.g. `{"availableNow": True}` or
    `{"processingTime": "10 seconds"}`. `log_checkpoints` false: delta-rs batch commits write no
    Delta log checkpoints (maintenance writes them). `run_id`: each commit first checks the
    checkpoint's run marker (`synclib.spark_checkpoint.check_run`). `table`: the table by name
    (`synclib.delta.catalog`; `path` is then '' until `start_delta_stream` fills in the location the
    catalog gives), created when missing with `cluster_by` and `table_properties`.
    `maintained_properties`: the table properties the job's maintenance keeps on a delta-spark table
    (`synclib.delta.spark_maintenance.table_properties`), which a table delta-spark's direct path
    creates has from its first version (Delta's own default until the first pass: a log checkpoint
    in every 10th commit)."""

    path: str
    checkpoint_location: str
    engine: str = AUTO
    partition_by: tuple[str, ...] = ()
    partition_by_date: bool = False
    trigger: Mapping[str, Any] | None = None
    query_name: str | None = None
    log_checkpoints: bool = True
    run_id: str | None = None  # the job's run: no commit once the checkpoint's run marker names another
    table: str | None = None
    cluster_by: tuple[str, ...] = ()
    table_properties: Mapping[str, str] = field(default_factory=dict)
    maintained_properties: Mapping[str, str] = field(default_factory=dict)

    @property
    def table_path(self) -> str:
        return normalize_location(self.path)

    @property
    def checkpoint(self) -> str:
        return normalize_location(self.checkpoint_location)

    def partition_columns(self, columns: Sequence[str]) -> list[str]:
        """The table's partition columns for a stream of `columns` (before the date column is
        added); ValueError when the stream has the date column already or lacks a partition column."""
        if self.partition_by_date and DATE_COLUMN in columns:
            raise ValueError(f"partition_by_date adds column {DATE_COLUMN!r}, which the stream already has")
        missing = [c for c in self.partition_by if c not in columns]
        if missing:
            raise ValueError(f"partition columns not in the stream: {', '.join(missing)}")
        return [*self.partition_by, *([DATE_COLUMN] if self.partition_by_date else [])]

    def writer(self, df: DataFrame) -> DataStreamWriter:
        """`df.writeStream` with the checkpoint location (`s3a://` for S3: `hadoop_location`), and the
        trigger and query name when given."""
        writer = df.writeStream.option("checkpointLocation", hadoop_location(self.checkpoint))
        if self.query_name:
            writer = writer.queryName(self.query_name)
        if self.trigger:
            writer = writer.trigger(**self.trigger)
        return writer


@dataclass(frozen=True)
class BatchSink:
    """A `foreachBatch` sink of the caller's that writes the stream's table itself (the dead-letter
    sink): `function(main)` is the function for the table as `main`. `other_tables` (path: schema)
    are the tables it writes besides, `stream_only` the stream's columns the table does not get."""

    function: Callable[[DeltaTarget], BatchFunction]
    other_tables: Mapping[str, StructType] = field(default_factory=dict)
    stream_only: tuple[str, ...] = ()


def start_delta_stream(df: DataFrame, stream: DeltaStream, *,
                       direct: Callable[[Mapping[str, str]], DataFrame] | None = None,
                       sink: BatchSink | None = None) -> StreamingQuery:
    """Start writing the streaming `df` to the Delta table of `stream`, exactly once: with the
    engine's own sink, or through `sink`.

    `direct`, for a `df` straight from its source: loads the same stream as the direct write
    path's add actions, given the reader options of `synclib.delta.direct.TableFiles`; used
    when there is no `sink` and the engine is delta-rs, or delta-spark where its direct commit
    can run (`synclib.delta.spark_direct.commits_for`).
    """
    stream_only = sink.stream_only if sink is not None else ()
    partition_by = stream.partition_columns([c for c in df.columns if c not in stream_only])
    if stream.partition_by_date:
        df = df.withColumn(DATE_COLUMN, utc_date(F.col("timestamp")))
    spark = df.sparkSession
    chosen = resolve_engine(spark, stream.engine)
    if stream.cluster_by and chosen != DELTA_SPARK:
        raise TableError(f"sink.cluster_by: a clustered table is written by delta-spark only, the engine is {chosen}")
    if stream.table is not None or stream.cluster_by or stream.table_properties:
        layout = TableLayout(tuple(partition_by), stream.cluster_by, stream.table_properties)
        location = ensure_table(spark, df.drop(*stream_only).schema, layout, name=stream.table,
                                path=stream.table_path if stream.table is None else None)
        stream = replace(stream, path=location)
    table_path = stream.table_path
    others = {normalize_location(path): schema for path, schema in (sink.other_tables if sink else {}).items()}
    table = check_table(table_path, df.drop(*stream_only).schema, partition_by, chosen)
    for path, schema in others.items():
        check_table(path, schema, (), chosen)
    commits = (spark_direct.commits_for(spark, table_path, table)
               if direct is not None and sink is None and chosen == DELTA_SPARK else None)
    direct_path = direct is not None and sink is None and (chosen == DELTA_RS or commits is not None)
    logger.info("writing %s with %s%s (partitioned by %s)%s, checkpoint %s", stream.table or stream.path, chosen,
                ", read tasks writing the files" if direct_path else "", partition_by or "nothing",
                "".join(f", and {path}" for path in others), stream.checkpoint)
    if chosen == DELTA_SPARK:
        fit_delta_to_local_master(spark)
        fit_delta_to_object_store(spark, table_path)
    if sink is not None:
        if chosen == DELTA_RS:
            spark.dataSource.register(DeltaBatchSink)
        main = DeltaTarget(chosen, table_path, stream.checkpoint, tuple(partition_by), stream.log_checkpoints,
                           stream.run_id, stream.table)
        return stream.writer(df).foreachBatch(sink.function(main)).start()
    files = None
    if direct is not None and direct_path:
        schema = column_mapping.annotate(arrow_schema(df.schema), table)  # the table's column names in its files
        files = direct(TableFiles(table_path, schema, tuple(partition_by)).options())
    if chosen == DELTA_SPARK:
        if files is not None and commits is not None:
            commit = DeltaSparkDirectCommit(commits, table_path, stream.checkpoint, partition_by, df.schema.json(),
                                            stream.run_id, stream.maintained_properties)
            return stream.writer(files).foreachBatch(commit).start()
        batch_writer = DeltaSparkBatchWriter(table_path, stream.checkpoint, partition_by, stream.run_id, stream.table)
        return stream.writer(df).foreachBatch(batch_writer).start()
    options = {"path": table_path, "checkpointLocation": stream.checkpoint,
               "partitionBy": json.dumps(partition_by), "logCheckpoints": str(stream.log_checkpoints).lower()}
    if stream.run_id:
        options["runId"] = stream.run_id
    if files is not None:
        return stream.writer(files).foreachBatch(DirectBatchCommit(DeltaStreamWriter(df.schema, options))).start()
    spark.dataSource.register(DeltaSink)
    return stream.writer(df).format(FORMAT).options(**options).start()


def _columns(schema: Schema) -> list[str]:
    """Each column's name and type (nested fields' metadata, e.g. a column mapping's, left out)."""
    return [f"{f['name']} {json.dumps(_without_metadata(f['type']))}" for f in json.loads(schema.to_json())["fields"]]


def _without_metadata(data_type: Any) -> Any:
    if isinstance(data_type, dict):
        return {k: _without_metadata(v) for k, v in data_type.items() if k != "metadata"}
    if isinstance(data_type, list):
        return [_without_metadata(v) for v in data_type]
    return data_type


def check_table(path: str, schema: StructType, partition_by: Sequence[str], engine: str) -> DeltaTable | None:
    """The table at `path` (None: none yet), checked before a batch: `engine` honours its table
    features (`synclib.delta.features`, `UnwritableTable`) and it has the stream's columns and
    partitioning (delta-rs would otherwise accept the files and hide or null columns)."""
    try:
        table = open_table(path)
    except DeltaError as exc:  # a reader feature deltalake does not implement
        if engine == DELTA_SPARK:
            return None  # Delta's writer checks the table itself
        raise features.UnwritableTable(f"table {path} cannot be read by deltalake ({first_line(exc)}): nothing was "
                                       f"written; sink.engine delta-spark may write it") from exc
    if table is None:
        return None
    features.check_writable(path, table, engine)
    ours, theirs = _columns(Schema.from_arrow(arrow_schema(schema))), _columns(table.schema())
    if ours != theirs:
        raise features.UnwritableTable(f"the stream's columns differ from table {path}'s: only in the stream "
                                       f"{[c for c in ours if c not in theirs]}, only in the table "
                                       f"{[c for c in theirs if c not in ours]} (or in another order)")
    if list(table.metadata().partition_columns) != list(partition_by):
        raise features.UnwritableTable(f"table {path} is partitioned by {table.metadata().partition_columns}, "
                                       f"the stream by {list(partition_by)}")
    return table
