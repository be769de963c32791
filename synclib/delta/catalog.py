"""Tables by name (`sink.table`) and the tables the job creates, through the job's Spark catalog.

A name is resolved only here, only in the job's own Spark session (the forwarder and the
dead-letter commands), by whatever catalog the session has: `spark_catalog` with Delta's catalog
(a Hive metastore, or the in-memory one), a catalog of `spark.sql.catalog.<name>`, Unity Catalog on
Databricks. What each part does with it:

- `ensure_table` creates a missing table, `CREATE TABLE IF NOT EXISTS <name> (<the stream's
  columns>) USING delta` with `PARTITIONED BY` or `CLUSTER BY` and `TBLPROPERTIES` from the config,
  checks an existing one's columns, partitioning and clustering against the stream (one line
  naming both when they differ, before any batch), and returns the table's location
  (`DESCRIBE DETAIL`). A path table gets the same `CREATE TABLE delta.\\`<path>\\`` (delta-spark)
  when the config sets clustering or properties, which only a table's creation can carry.
- The delta-spark writer writes by name (`DataFrameWriter.saveAsTable`, idempotent by
  `txnAppId`/`txnVersion` as by path); everything else reads and writes the location the catalog
  gave: delta-rs (its writer, resume from the table, the end-of-run summary, maintenance, the
  dead-letter table's checks), so it needs the storage itself to be reachable there.
- The job records the names and locations in its checkpoint (`synclib.spark_checkpoint.TABLES`),
  where `status` and `maintain`, which run without Spark, find them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession
from pyspark.sql.types import StructType

from synclib.delta.engine import fit_delta_to_local_master
from synclib.delta.features import UnwritableTable
from synclib.errors import first_line
from synclib.settings.values import table_name_parts

logger = logging.getLogger(__name__)

# A row of `DESCRIBE TABLE EXTENDED` on Databricks: whether predictive optimization runs OPTIMIZE and
# VACUUM on the table ("ENABLE", "ENABLE (inherited from CATALOG main)", "DISABLE ...").
PREDICTIVE_OPTIMIZATION = "Predictive Optimization"


class TableError(UnwritableTable):
    """A table the job cannot use as configured; the message is one line naming the setting (a
    `ConfigError`: the command's one line on stderr, exit 2)."""


@dataclass(frozen=True)
class TableLayout:
    """What a table the job creates gets besides its columns; an existing table must agree on
    `partition_by` and (when set) `cluster_by`."""

    partition_by: tuple[str, ...] = ()
    cluster_by: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)

    @property
    def creates_more(self) -> bool:
        """Whether only `CREATE TABLE` can give a table this layout (a writer's first commit cannot)."""
        return bool(self.cluster_by or self.properties)


def quote(name: str) -> str:
    """A table name that `TableName` accepted, each part back-quoted for SQL."""
    return ".".join("`" + part.replace("`", "``") + "`" for part in table_name_parts(name))


def path_table(path: str) -> str:
    """Delta's SQL name of the table at `path`: delta.`path`."""
    return "delta.`" + path.replace("`", "``") + "`"


def local_location(location: str) -> str:
    """A catalog's location as synclib's locations read it: `file:` URIs as local paths."""
    parts = urlsplit(location)
    return unquote(parts.path) if parts.scheme == "file" else location


def locate(spark: SparkSession, name: str, setting: str = "sink.table") -> str | None:
    """The location of the Delta table `name` in the session's catalog; None when it does not exist
    (its catalog and schema do). `TableError` when the catalog or schema does not exist, or the
    table is not a Delta table."""
    fit_delta_to_local_master(spark)  # DESCRIBE DETAIL reads the table's snapshot
    detail = _detail(spark, name, setting)
    return None if detail is None else local_location(str(detail["location"]))


def ensure_table(spark: SparkSession, schema: StructType, layout: TableLayout, *, name: str | None = None,
                 path: str | None = None, setting: str = "sink.table") -> str:
    """The location of the table `name` (or at `path`), created when missing with `schema` and
    `layout`, checked against them when it exists (`TableError`, one line, naming `setting`).
    A path table is created only when `layout.creates_more`; otherwise the writer's first commit does."""
    fit_delta_to_local_master(spark)
    if name is None:
        assert path is not None
        if layout.creates_more:
            _create(spark, path_table(path), schema, layout, f"{setting} {path}")
        return path
    target = quote(name)
    detail = _detail(spark, name, setting)
    if detail is None:
        _create(spark, target, schema, layout, f"{setting} {name}")
        logger.info("created Delta table %s", name)
        detail = _detail(spark, name, setting)
        assert detail is not None
    _check(spark, target, detail, schema, layout, f"{setting} {name}")
    return local_location(str(detail["location"]))


def left_to_platform(spark: SparkSession, name: str) -> bool:
    """Whether the catalog says predictive optimization maintains the table `name` (Databricks)."""
    rows = spark.sql(f"DESCRIBE TABLE EXTENDED {quote(name)}").collect()
    return any(str(row[0]).strip() == PREDICTIVE_OPTIMIZATION and str(row[1]).strip().upper().startswith("ENABLE")
               for row in rows)


def _namespace_problem(spark: SparkSession, parts: Sequence[str]) -> str | None:
    """Why the catalog or schema of a table name does not exist, or None when both do."""
    if len(parts) == 3:
        catalog = "`" + parts[0].replace("`", "``") + "`"
        try:
            spark.sql(f"SHOW SCHEMAS IN {catalog}").collect()
        except AnalysisException as exc:
            return f"catalog {parts[0]!r} not found in the session ({_condition(exc)})"
    if len(parts) >= 2 and not spark.catalog.databaseExists(".".join(
            "`" + p.replace("`", "``") + "`" for p in parts[:-1])):
        return f"schema {'.'.join(parts[:-1])!r} does not exist (create it first: CREATE SCHEMA)"
    return None


def _detail(spark: SparkSession, name: str, setting: str) -> dict[str, Any] | None:
    parts = table_name_parts(name)
    problem = _namespace_problem(spark, parts)
    if problem is not None:
        raise TableError(f"{setting} {name}: {problem}")
    if not spark.catalog.tableExists(quote(name)):
        return None
    try:
        detail: dict[str, Any] = spark.sql(f"DESCRIBE DETAIL {quote(name)}").collect()[0].asDict()
    except AnalysisException as exc:
        raise TableError(f"{setting} {name}: not a Delta table ({_condition(exc)})") from None
    if str(detail.get("format", "")).lower() != "delta":
        raise TableError(f"{setting} {name}: a {detail.get('format')} table, not a Delta table")
    return detail


def _create(spark: SparkSession, target: str, schema: StructType, layout: TableLayout, what: str) -> None:
    columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}{'' if f.nullable else ' NOT NULL'}"
                        for f in schema.fields)
    statement = f"CREATE TABLE IF NOT EXISTS {target} ({columns}) USING delta"
    if layout.partition_by:
        statement += " PARTITIONED BY (" + ", ".join(f"`{c}`" for c in layout.partition_by) + ")"
    if layout.cluster_by:
        statement += " CLUSTER BY (" + ", ".join(f"`{c}`" for c in layout.cluster_by) + ")"
    if layout.properties:
        statement += " TBLPROPERTIES (" + ", ".join(f"{_literal(k)} = {_literal(v)}"
                                                    for k, v in layout.properties.items()) + ")"
    try:
        spark.sql(statement)
    except AnalysisException as exc:
        raise TableError(f"{what}: cannot create it: {_condition(exc)}") from None


def _check(spark: SparkSession, target: str, detail: Mapping[str, Any], schema: StructType, layout: TableLayout,
           what: str) -> None:
    ours = [(f.name, f.dataType.simpleString()) for f in schema.fields]
    theirs = [(f.name, f.dataType.simpleString()) for f in spark.table(target).schema.fields]
    if ours != theirs:
        raise TableError(f"{what}: the stream's columns differ from the table's: only in the stream "
                         f"{[f'{n} {t}' for n, t in ours if (n, t) not in theirs]}, only in the table "
                         f"{[f'{n} {t}' for n, t in theirs if (n, t) not in ours]} (or in another order)")
    partitioned = list(detail.get("partitionColumns") or [])
    if partitioned != list(layout.partition_by):
        raise TableError(f"{what}: the table is partitioned by {partitioned}, the config by "
                         f"{list(layout.partition_by)} (sink.partition_by, sink.partition_by_date)")
    clustered = list(detail.get("clusteringColumns") or [])
    if layout.cluster_by and clustered != list(layout.cluster_by):
        raise TableError(f"{what}: the table is clustered by {clustered}, the config by {list(layout.cluster_by)} "
                         "(sink.cluster_by)")


def _literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _condition(exc: AnalysisException) -> str:
    condition = exc.getCondition() if hasattr(exc, "getCondition") else None
    return f"{condition}: {first_line(exc)}" if condition and condition not in str(exc) else first_line(exc)
