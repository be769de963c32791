"""The JVM artifacts `jvm/fetch` retrieved from Maven Central (configurations of `jvm/ivy.xml`)."""

from __future__ import annotations

import glob
import os
from pathlib import Path

JVM_DIR_ENV = "SYNCLIB_JVM_DIR"  # spark-submit.sh exports it
DELTA, SPARK_KAFKA, S3A = "delta", "spark-kafka", "s3a"  # on the Spark classpath
# Delta's SQL commands (OPTIMIZE, VACUUM, DESCRIBE HISTORY) need its session extension and catalog.
DELTA_SESSION_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}


def jvm_dir() -> Path:
    """$SYNCLIB_JVM_DIR, else `.jvm` in the repository."""
    return Path(os.environ.get(JVM_DIR_ENV) or Path(__file__).resolve().parents[1] / ".jvm")


def jars(conf: str) -> list[str]:
    """The jars of one configuration; fails naming the command that fetches them."""
    found = sorted(glob.glob(str(jvm_dir() / conf / "*.jar")))
    if not found:
        raise FileNotFoundError(f"no jars of {conf!r} in {jvm_dir()}: run `jvm/fetch PYTHON {conf}` "
                                "(./spark-submit.sh test does it)")
    return found
