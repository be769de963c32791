"""The Spark session of a synclib job (the forwarder, the dead-letter commands).

A session the job creates itself (`spark-submit jobs/forwarder.py`) starts with
`SESSION_DEFAULTS`, each unless spark-submit's `--conf` or `spark-defaults.conf` sets it; a
session that exists already (a Databricks job cluster, a notebook) keeps its own settings.
A query with its checkpoint on S3 starts with `S3_CHECKPOINT` (`checkpoint_manager`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession

from synclib.app.storage import s3_locations
from synclib.compat import py4j as py4j_compat
from synclib.compat import pyspark as spark_compat
from synclib.compat.pyspark import is_connect, submitted_conf
from synclib.settings import ForwarderConfig
from synclib.settings.storage import S3Config, is_s3

logger = logging.getLogger("synclib.session")

SPARK_LOG_LEVEL = "WARN"  # unless spark.log.level is set
SESSION_DEFAULTS = {
    # Streaming queries run without adaptive execution whatever this says; left on (Spark's
    # default), every query start warns that it is being disabled (ResolveWriteToStream).
    "spark.sql.adaptive.enabled": "false",
}
CHECKPOINT_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
# Spark's checkpoint on S3 without renames or probes: each new entry one PUT with put-if-absent, aborted
# (nothing visible) when Spark cancels it (jvm/src, built into the `s3a` JVM directory by jvm/fetch).
# S3A's own probes at create are skipped: the store's put-if-absent is the check.
S3_CHECKPOINT = {
    CHECKPOINT_MANAGER: "synclib.checkpoint.PutIfAbsentCheckpointFileManager",
    "fs.s3a.create.performance": "true",
}
# Not a default: spark.python.unix.domain.socket.enabled cuts a one-row batch by ~50 ms, but
# PySpark 4.2's daemon then prints a BrokenPipeError traceback for each idle worker the JVM
# closes (a minute after a worker module's last use): docs/performance.md, the floor.


def job_session(config: ForwarderConfig, app_name: str) -> SparkSession:
    """The job's session: `SESSION_DEFAULTS` if it creates it, Spark's log level WARN unless
    `spark.log.level` is set, and `storage.s3` (`use_storage`) when a location of the job is on
    S3, before anything is registered or read."""
    builder = SparkSession.builder.appName(app_name)
    if SparkSession.getActiveSession() is None:
        builder = with_session_defaults(builder)
    spark = builder.getOrCreate()
    if is_connect(spark):
        logger.info("Spark Connect session: Spark's log level is the server's (spark.log.level there)")
    elif not spark.sparkContext.getConf().contains("spark.log.level"):
        spark.sparkContext.setLogLevel(SPARK_LOG_LEVEL)
    if s3_locations(config):
        use_storage(spark, config.storage.s3)
    return spark


def with_session_defaults(builder: SparkSession.Builder) -> SparkSession.Builder:
    """`builder` with each of `SESSION_DEFAULTS` that spark-submit's `--conf` or
    `spark-defaults.conf` does not set (also the benchmark's and the tests' sessions)."""
    submitted = submitted_conf("the job's session without its defaults (synclib.app.session.SESSION_DEFAULTS)")
    if submitted is None:
        return builder
    for key, value in SESSION_DEFAULTS.items():
        if not submitted.contains(key):
            builder = builder.config(key, value)
    return builder


def use_storage(spark: SparkSession, s3: S3Config) -> None:
    """`storage.s3` for the session, before its query starts: `AWS_*` variables for the driver's
    Python (delta-rs, pyarrow) and the Python workers (the session's executor environment, which
    Python functions and data sources registered afterwards take to the executors), `fs.s3a.*`
    for the JVM (the session's configuration, which Spark's Hadoop configuration takes up)."""
    variables = s3.environment()
    os.environ.update(variables)
    if not is_connect(spark):
        spark.sparkContext.environment.update(variables)
    for key, value in s3.hadoop_options().items():
        spark.conf.set(key, value)


@contextmanager
def checkpoint_manager(spark: SparkSession, location: str) -> Iterator[None]:
    """Spark's checkpoint manager for the query started inside, which takes its managers as it starts:
    `S3_CHECKPOINT` for an `s3://`/`s3a://` checkpoint when its class is on the classpath and the
    session names no manager of its own; the session's settings are restored afterwards."""
    settings = _s3_checkpoint(spark) if is_s3(location) else {}
    previous = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in previous.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


def _s3_checkpoint(spark: SparkSession) -> dict[str, str]:
    if spark.conf.get(CHECKPOINT_MANAGER, None) is not None:
        return {}  # the session's own choice (spark-submit's --conf, a platform's default)
    manager = S3_CHECKPOINT[CHECKPOINT_MANAGER]
    jvm = spark_compat.jvm(spark, "Spark's checkpoint on S3 keeps its default manager (renames)")
    if jvm is None:
        return {}
    if not py4j_compat.class_loadable(jvm, manager):
        logger.warning("%s is not on the classpath (jvm/fetch builds it into the s3a directory): Spark's "
                       "checkpoint on S3 is written by renames", manager)
        return {}
    return dict(S3_CHECKPOINT)
