"""Which Delta writer a stream gets (`sink.engine`): delta-rs or Spark's own Delta writer, and
the session setting delta-spark needs on a local master."""

from __future__ import annotations

import os

from pyspark.sql import SparkSession

from synclib.compat import py4j as py4j_compat
from synclib.compat import pyspark as spark_compat
from synclib.locations import on_object_store
from synclib.settings.values import AUTO, DELTA_RS, DELTA_SPARK, ENGINES

_DELTA_SPARK_CLASS = "io.delta.tables.DeltaTable"

# On a local master Delta's default of 50 tasks per snapshot reconstruction (fit for a cluster)
# costs every batch commit and maintenance pass seconds of task scheduling on a few cores.
_SNAPSHOT_PARTITIONS = "spark.databricks.delta.snapshotPartitions"


def fit_delta_to_local_master(spark: SparkSession) -> None:
    """Fewer tasks per Delta snapshot reconstruction on a local master (when not set)."""
    local = (spark.conf.get("spark.master", "") or "").startswith("local")
    if local and spark.conf.get(_SNAPSHOT_PARTITIONS, None) is None:
        spark.conf.set(_SNAPSHOT_PARTITIONS, "2")


# Delta writes a checksum file (`<version>.crc`) after each commit: on S3A through a temporary
# object, probes and a copy, 10 requests of a one-row batch's 28 in the log (5 LIST or PUT); it only
# speeds up and validates reading the snapshot, which the batch's commit does not need.
_CHECKSUM_FILES = "spark.databricks.delta.writeChecksumFile.enabled"


def fit_delta_to_object_store(spark: SparkSession, path: str) -> None:
    """No Delta checksum files for a table on an object store (when not set)."""
    if on_object_store(path) and spark.conf.get(_CHECKSUM_FILES, None) is None:
        spark.conf.set(_CHECKSUM_FILES, "false")


def delta_spark_available(spark: SparkSession) -> bool | None:
    """Whether the session's JVM can load Delta's classes; None when there is no JVM to ask
    (Spark Connect; logged once by `synclib.compat.pyspark.jvm`)."""
    jvm = spark_compat.jvm(spark, "sink.engine auto: Delta's JVM classes not looked for "
                                  "(delta-spark on Databricks, otherwise delta-rs)")
    return None if jvm is None else py4j_compat.class_loadable(jvm, _DELTA_SPARK_CLASS)


def resolve_engine(spark: SparkSession, engine: str = AUTO) -> str:
    """`delta-rs` or `delta-spark` for `engine` (`auto`: delta-spark when Delta's JVM classes
    are present, or on Spark Connect inside Databricks; otherwise delta-rs)."""
    if engine not in ENGINES:
        raise ValueError(f"sink engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    if engine == DELTA_RS:
        return DELTA_RS
    available = delta_spark_available(spark)
    if engine == DELTA_SPARK:
        if available is False:
            raise RuntimeError(f"sink engine delta-spark needs Delta's JVM classes "
                               f"({_DELTA_SPARK_CLASS}) on the classpath; use delta-rs instead")
        return DELTA_SPARK
    if available is None:
        return DELTA_SPARK if os.environ.get("DATABRICKS_RUNTIME_VERSION") else DELTA_RS
    return DELTA_SPARK if available else DELTA_RS
