"""The JVM artifacts of `jvm/ivy.xml`, each configuration fetched by `jvm/fetch` from Maven Central
the first time it is asked for (and again when jvm/ivy.xml changes)."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

JVM_DIR_ENV = "SYNCLIB_JVM_DIR"  # spark-submit.sh exports it
DELTA, SPARK_KAFKA, S3A = "delta", "spark-kafka", "s3a"  # on the Spark classpath
# Delta's SQL commands (OPTIMIZE, VACUUM, DESCRIBE HISTORY) need its session extension and catalog.
DELTA_SESSION_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
_FETCH = Path(__file__).resolve().parents[1] / "jvm" / "fetch"


def jvm_dir() -> Path:
    """$SYNCLIB_JVM_DIR, else `.jvm` in the repository."""
    return Path(os.environ.get(JVM_DIR_ENV) or _FETCH.parents[1] / ".jvm")


def jars(conf: str) -> list[str]:
    """The jars of one configuration, fetched first unless they are already (`jvm/fetch` with this
    Python, whose PySpark holds the Ivy jar; a no-op once fetched)."""
    fetched = subprocess.run([str(_FETCH), sys.executable, conf], env={**os.environ, JVM_DIR_ENV: str(jvm_dir())},
                             check=False)
    found = sorted(glob.glob(str(jvm_dir() / conf / "*.jar")))
    if fetched.returncode != 0 or not found:
        raise FileNotFoundError(f"no jars of {conf!r} in {jvm_dir()}: `jvm/fetch {sys.executable} {conf}` "
                                f"failed (exit {fetched.returncode}; its lines above say why)")
    return found
