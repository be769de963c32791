"""Every private PySpark API synclib touches, in one place, guarded by the tested version.

- `SparkSession._jvm` and `SparkContext._gateway` with `pyspark.java_gateway.
  ensure_callback_server_started`: the JVM of a classic session and its py4j callback server
  (JVM signal handlers, Delta class detection; see `synclib.compat.py4j`);
- `StreamingQueryException._origin`: the JVM exception, whose start and end offsets name the
  micro-batch a query failed in;
- `pyspark.sql.pandas.types.to_arrow_schema` and `from_arrow_schema`: a Spark schema as an
  Arrow schema (the source's and the sink's Arrow batches) and back (the source's schema);
- `SparkContext._ensure_initialized` and `SparkContext._jvm`: the connection to spark-submit's
  JVM before a session exists, to read the settings spark-submit gave it;
- `StreamingQuery._jsq`: the JVM query, whose progress reports are read newest first, only those
  not read before (`recentProgress` converts every report Spark keeps, at each call).

The JVM-only ones are conveniences: on a Spark Connect session (no JVM in this process), on a
PySpark other than `TESTED_VERSION`, or when an attribute is gone, they return None and log
once what the job goes without.
"""

from __future__ import annotations

import logging
import os
import re
from typing import TYPE_CHECKING, Any

import pyspark

from synclib.compat import py4j

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark import SparkConf
    from pyspark.sql.types import StructType

logger = logging.getLogger(__name__)

TESTED_VERSION = (4, 2)
_logged: set[str] = set()


def version_problem() -> str | None:
    """Why PySpark's private APIs must not be used; None when the installed one is tested."""
    release = re.match(r"(\d+)\.(\d+)", pyspark.__version__)
    if release and (int(release.group(1)), int(release.group(2))) == TESTED_VERSION:
        return None
    return (f"PySpark {pyspark.__version__} is not the version synclib is tested with "
            f"({'.'.join(map(str, TESTED_VERSION))}.x)")


def is_connect(spark: Any) -> bool:
    """Whether `spark` is a Spark Connect session (a client without a JVM)."""
    return type(spark).__module__.startswith("pyspark.sql.connect.")


def _without(purpose: str, reason: str) -> None:
    """Log, once per purpose, what the job does without and why."""
    if purpose not in _logged:
        _logged.add(purpose)
        logger.warning("%s: %s", reason, purpose)


def jvm(spark: Any, purpose: str, callbacks: bool = False) -> Any | None:
    """The py4j view of a classic session's JVM (with the gateway's callback server running
    when `callbacks`), or None (logged once with `purpose`, what the job goes without) on Spark
    Connect, an untested PySpark or py4j, or when the private attributes are missing."""
    if is_connect(spark):
        _without(purpose, "Spark Connect session (no JVM in this process)")
        return None
    problem = version_problem() or py4j.version_problem()
    if problem is not None:
        _without(purpose, problem)
        return None
    try:
        from pyspark.java_gateway import ensure_callback_server_started

        view = spark._jvm
        if callbacks:
            ensure_callback_server_started(spark.sparkContext._gateway)  # type: ignore[no-untyped-call]
    except (AttributeError, ImportError) as exc:
        _without(purpose, f"PySpark {pyspark.__version__} has no {exc}")
        return None
    return view


def submitted_conf(purpose: str) -> SparkConf | None:
    """The settings a session created now starts from: spark-submit's `--conf` and
    `spark-defaults.conf`. Under spark-submit the JVM holding them runs before the driver's Python,
    but PySpark's `SparkConf()` reads them only once connected to it, which `getOrCreate` would do
    next anyway. Without spark-submit no JVM runs yet and nothing was submitted: an empty conf.
    None (logged once with `purpose`, what the job goes without) on an untested PySpark."""
    from pyspark import SparkConf, SparkContext

    if "PYSPARK_GATEWAY_PORT" in os.environ and getattr(SparkContext, "_jvm", None) is None:
        problem = version_problem()
        connect = getattr(SparkContext, "_ensure_initialized", None)
        if problem is not None or connect is None:
            _without(purpose, problem or f"PySpark {pyspark.__version__} has no SparkContext._ensure_initialized")
            return None
        connect()
    return SparkConf()


def progress_since(query: Any, seen: tuple[str, str] | None) -> tuple[list[str], int] | None:
    """The JSON of `query`'s progress reports after the one `seen` (its run id and timestamp),
    oldest first, read from the JVM alone, and how many reports Spark keeps now; None (logged once)
    on Spark Connect or an untested PySpark, where the caller reads `query.recentProgress`."""
    purpose = "each progress poll converts every recent report, not only the new ones"
    problem = version_problem()
    jsq = getattr(query, "_jsq", None)
    if problem is not None or jsq is None:
        _without(purpose, problem or "Spark Connect session (no JVM query in this process)")
        return None
    reports = jsq.recentProgress()
    kept = len(reports)
    fresh = []
    for index in range(kept - 1, -1, -1):
        report = reports[index]
        if seen is not None and (report.runId().toString(), report.timestamp()) == seen:
            break
        fresh.append(report.json())
    return fresh[::-1], kept


def failed_batch_offsets(exc: BaseException) -> tuple[str, str] | None:
    """The start and end offsets (Spark's text: one JSON, or `-`, per source in `[...]`) of the
    micro-batch a `StreamingQueryException` comes from; None when unknown (logged once when
    that is because of Spark Connect or PySpark)."""
    purpose = "the error of a failed query does not name the micro-batch's offsets"
    origin = getattr(exc, "_origin", None)
    if origin is None:
        if type(exc).__module__.startswith("pyspark.errors.exceptions.connect"):
            _without(purpose, "Spark Connect session (the JVM exception stays on the server)")
        elif version_problem() is not None:
            _without(purpose, str(version_problem()))
        return None
    try:
        return str(origin.startOffset()), str(origin.endOffset())
    except Exception:  # noqa: BLE001 - not a StreamingQueryException of the JVM: nothing to add
        return None


def _schema_converter(name: str) -> Any:
    """PySpark's internal schema converter `pyspark.sql.pandas.types.<name>`."""
    try:
        from pyspark.sql.pandas import types  # here, so that a PySpark without it fails with the message below
        return getattr(types, name)
    except (ImportError, AttributeError) as exc:
        raise RuntimeError(f"PySpark {pyspark.__version__} has no pyspark.sql.pandas.types.{name} "
                           f"({exc}); synclib needs PySpark {'.'.join(map(str, TESTED_VERSION))}") from exc


def to_arrow_schema(schema: StructType) -> pa.Schema:
    """`schema` as Arrow, timestamps in UTC (PySpark's internal converter, tested with 4.2)."""
    return _schema_converter("to_arrow_schema")(schema, timezone="UTC")


def from_arrow_schema(schema: pa.Schema) -> StructType:
    """`schema` as Spark's (PySpark's internal converter, tested with 4.2): the inverse of
    `to_arrow_schema` for the types synclib uses (a timestamp with a time zone is TimestampType)."""
    return _schema_converter("from_arrow_schema")(schema)  # type: ignore[no-any-return]
