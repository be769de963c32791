"""Growth: per-batch commit time and full-table read time as a table ages, maintenance on and off.

    python -m benchmarks.growth [--versions 20000] [--batches 40] [--store local|s3] [--workdir DIR] [--output FILE]
        [--record NAME]
    (or spark-submit jobs/benchmark.py growth [the same options])

For each mode a table aged to 100 versions and one aged to `--versions` are measured together,
their micro-batches alternated:

- aging: synthetic appends shaped like the forwarder's (one small Parquet file of
  `--rows` events per version, an add action with statistics, the application transaction
  and the `synclib.*` commit metadata), written straight into the Delta log (a version in
  about a millisecond; delta-rs would need 10-70 ms each), dated one default trigger interval
  apart up to now, as a busy stream at the default trigger would have written them;
- per-batch commit: `--batches` micro-batches through the forwarder's own delta-rs commit
  (`DeltaStreamWriter.write` and `.commit`, reading a real Spark-style checkpoint directory,
  no Spark needed), timed around `commit`;
- full-table read: a fresh `DeltaTable` opened and read into Arrow (every column).

Modes: `off` (no maintenance: Delta log checkpoints every 100 versions from the commits'
post-commit hook, as before maintenance existed), `on` (a maintenance pass with the default
settings, min_age 0, before each measurement, and batch commits leaving checkpoints to it),
`on-log-10m` (the same with `log_retention: 10m`: every delta-rs update lists the log, so the
log's length is per-batch cost) and `reopen` (like `off`, but the table is reopened for every
commit, the commit path before incremental updates).

`--store s3` puts the delta-rs table on the S3 server of `harness.object_store` (S3Proxy;
aging writes the server's files directly) and counts the requests per micro-batch. S3Proxy's
filesystem backend answers a listing by walking its directory, so its times grow with the log
where S3's, which lists from an offset, do not: the request counts are the S3 measurement.

`spark-on` and `spark-off` do the same with `sink.engine: delta-spark` on its row path (a
transform, dead letters): the forwarder's `DeltaSparkBatchWriter` in a local Spark session with
Delta's jars (`harness.jvm`), each micro-batch timed around the whole Delta write (Spark writes the
file and commits; there is no separate commit to time), `spark-on` with `spark_maintenance.run_pass`
(Delta's OPTIMIZE, VACUUM, checkpoints every `checkpoint_interval`, synclib's log cleanup) before
each measurement, `spark-off` with Delta's defaults (a checkpoint every 10 versions, Delta's own log
cleanup after 30 days). `spark-direct-on` and `spark-direct-off` are delta-spark's direct path, the
job's default there: the file written as a read task writes it, untimed, then the driver's commit of
its add action through Delta's transaction (`synclib.compat.delta_spark`), timed, as the delta-rs
modes time theirs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from pyarrow import fs
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType, TimestampType

from benchmarks import records
from harness import jvm
from harness.object_store import Request, S3Server
from synclib.compat import delta_spark
from synclib.compat import pyspark as spark_compat
from synclib.delta import log_append, maintenance, spark_maintenance
from synclib.delta import table as delta_table
from synclib.delta.commits import commit_metadata
from synclib.delta.parquet import ParquetPart
from synclib.delta.spark_writer import DeltaSparkBatchWriter
from synclib.delta.table import read_arrow
from synclib.delta.writer import DeltaStreamWriter, arrow_schema
from synclib.settings.job import MaintenanceConfig, TriggerConfig
from synclib.settings.storage import S3Config

SCHEMA = StructType([
    StructField("key", BinaryType()), StructField("value", BinaryType()), StructField("topic", StringType()),
    StructField("partition", IntegerType()), StructField("offset", LongType()),
    StructField("timestamp", TimestampType()), StructField("timestampType", IntegerType()),
])
TOPIC = "events"
# mode -> the maintenance settings of its pass before each measurement (None: no maintenance)
MAINTENANCE: dict[str, dict[str, str] | None] = {
    "off": None, "on": {"min_age": "0s"}, "on-log-10m": {"min_age": "0s", "log_retention": "10m"}, "reopen": None,
    "spark-on": {"min_age": "0s"}, "spark-off": None, "spark-direct-on": {"min_age": "0s"}, "spark-direct-off": None,
}
MODES = tuple(MAINTENANCE)
DIRECT_SPARK_MODES = ("spark-direct-on", "spark-direct-off")
SPARK_MODES = ("spark-on", "spark-off", *DIRECT_SPARK_MODES)
YOUNG_AGE = 100
INTERVAL_S = TriggerConfig().min_interval  # between two aged versions: a busy stream's batches


@dataclass
class Measurement:
    mode: str
    versions: int  # the table's age when measured
    commit_ms_p50: float
    commit_ms_mean: float
    commit_ms_max: float
    read_ms: float
    live_files: int
    log_files: int
    maintenance_s: float | None  # the pass before the measurement (mode `on`)
    lists_per_batch: float | None = None  # --store s3: LIST requests per micro-batch
    requests_per_batch: float | None = None  # --store s3: all requests per micro-batch


class GrowingTable:
    """A forwarder-shaped Delta table, its fake Spark checkpoint and the forwarder's writer."""

    def __init__(self, directory: Path, rows: int, log_checkpoints: bool, spark: Any = None,
                 store: S3Server | None = None, direct: bool = False) -> None:
        self.store = store
        self.path = self.local = str(directory / "table")
        if store is not None:  # the table through the server; `local`: where the server keeps its files
            self.path = f"s3://{store.bucket('growth')}/table"
            self.local = store.local_path(self.path)
        self.checkpoint = directory / "checkpoint"
        (self.checkpoint / "offsets").mkdir(parents=True)
        (self.checkpoint / "metadata").write_text(json.dumps({"id": str(uuid.uuid4())}))
        self.app_id = "synclib-" + json.loads((self.checkpoint / "metadata").read_text())["id"]
        self.rows = rows
        self.batch = 0
        self.offset = 0
        self.schema = arrow_schema(SCHEMA)
        self.writer = DeltaStreamWriter(SCHEMA, {"path": self.path, "checkpointLocation": str(self.checkpoint),
                                                 "logCheckpoints": str(log_checkpoints).lower()})
        self.spark = spark  # delta-spark: the forwarder's Spark writer in this session
        self.spark_writer = DeltaSparkBatchWriter(self.path, str(self.checkpoint), [])
        self.direct_commits = None  # delta-spark's direct path: Delta's transaction commits the files
        if spark is not None and direct:
            self.direct_commits = delta_spark.DeltaLogCommits(spark, spark_compat.jvm(spark, "growth"), self.path)
        first = self._rows()
        write_deltalake(self.path, first, mode="append", commit_properties=self._properties())
        self._advance()

    def _rows(self) -> pa.Table:
        n = self.rows
        now = int(time.time() * 1_000_000)
        return pa.table({
            "key": pa.array([b"k"] * n), "value": pa.array([os.urandom(200) for _ in range(n)]),
            "topic": pa.array([TOPIC] * n), "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(range(self.offset, self.offset + n), pa.int64()),
            "timestamp": pa.array([now] * n, pa.timestamp("us", tz="UTC")),
            "timestampType": pa.array([0] * n, pa.int32()),
        }, schema=self.schema)

    def _offsets(self) -> str:
        return json.dumps({TOPIC: {"0": self.offset + self.rows}})

    def _properties(self) -> CommitProperties:
        return CommitProperties(custom_metadata=commit_metadata(self.app_id, self.batch, self._offsets()),
                                app_transactions=[Transaction(self.app_id, self.batch)])

    def _advance(self) -> None:
        self.batch += 1
        self.offset += self.rows

    def age_to(self, versions: int) -> None:
        """Append synthetic commits (one file each) straight into the log until `versions` exist."""
        version = DeltaTable(self.path).version()
        log = Path(self.local) / "_delta_log"
        filesystem = fs.LocalFileSystem()
        now = time.time()
        while version + 1 < versions:
            version += 1
            part = ParquetPart(filesystem, self.local, self.schema, {})
            part.write(self._rows())
            add = part.close()
            written = now - (versions - version) * INTERVAL_S
            os.utime(f"{self.local}/{add.path}", (written, written))
            now_ms = int(written * 1000)
            actions = [
                {"add": {"path": add.path, "partitionValues": {}, "size": add.size, "modificationTime": now_ms,
                         "dataChange": True, "stats": add.stats}},
                {"txn": {"appId": self.app_id, "version": self.batch, "lastUpdated": now_ms}},
                {"commitInfo": {"timestamp": now_ms, "operation": "WRITE", "operationParameters": {"mode": "Append"},
                                **commit_metadata(self.app_id, self.batch, self._offsets())}},
            ]
            commit = log / f"{version:020d}.json"
            commit.write_text("\n".join(json.dumps(a) for a in actions) + "\n")
            os.utime(commit, (written, written))
            self._advance()

    def micro_batch(self, reopen: bool) -> float:
        """One micro-batch through the forwarder's writer; the seconds its commit took (delta-spark:
        its whole write)."""
        (self.checkpoint / "offsets" / str(self.batch)).write_text(f"v1\n{{}}\n{self._offsets()}\n")
        if self.direct_commits is not None:
            part = ParquetPart(fs.LocalFileSystem(), self.local, self.schema, {})  # a read task's file
            part.write(self._rows())
            actions = [log_append.add_json(part.close())]
            user_metadata = json.dumps(commit_metadata(self.app_id, self.batch, self._offsets()))
            started = time.perf_counter()
            self.direct_commits.commit(actions, self.app_id, self.batch, self.app_id.removeprefix("synclib-"),
                                       user_metadata, None, check_transaction=False, check_metadata=lambda _: None)
            elapsed = time.perf_counter() - started
            self._advance()
            return elapsed
        if self.spark is not None:
            data = self.spark.createDataFrame(self._rows(), schema=SCHEMA).coalesce(1)
            started = time.perf_counter()
            self.spark_writer(data, self.batch)
            elapsed = time.perf_counter() - started
            self._advance()
            return elapsed
        message = self.writer.write(iter(self._rows().to_batches()))
        if reopen:
            delta_table._open_tables.clear()  # the commit path before incremental updates
        started = time.perf_counter()
        self.writer.commit([message], self.batch)
        elapsed = time.perf_counter() - started
        self._advance()
        return elapsed


def prepare(table: GrowingTable, mode: str) -> float | None:
    """The mode's maintenance pass (its seconds; None without one), then the first commit of a run
    (it opens the table), untimed."""
    maintenance_s = None
    settings = MAINTENANCE[mode]
    if settings is not None:
        started = time.perf_counter()
        if table.spark is not None:
            spark_maintenance.run_pass(table.spark, table.path, MaintenanceConfig.model_validate(settings))
        else:
            maintenance.run_pass(table.path, MaintenanceConfig.model_validate(settings))
        maintenance_s = round(time.perf_counter() - started, 2)
    table.micro_batch(reopen=False)
    return maintenance_s


def measured(table: GrowingTable, mode: str, age: int, commits: list[float], requests: list[Request] | None,
             maintenance_s: float | None) -> Measurement:
    """The measurement of one table from its timed commits (ms), then a full read."""
    commits = sorted(commits)
    per_batch = None if requests is None else (round(sum(r.listing for r in requests) / len(commits), 2),
                                               round(len(requests) / len(commits), 2))
    started = time.perf_counter()
    read_arrow(table.path)
    read_ms = (time.perf_counter() - started) * 1000
    current = DeltaTable(table.path)
    return Measurement(mode=mode, versions=age,
                       commit_ms_p50=round(statistics.median(commits), 2),
                       commit_ms_mean=round(statistics.fmean(commits), 2), commit_ms_max=round(commits[-1], 2),
                       read_ms=round(read_ms), live_files=len(current.file_uris()),
                       log_files=len(os.listdir(Path(table.local) / "_delta_log")), maintenance_s=maintenance_s,
                       lists_per_batch=per_batch and per_batch[0], requests_per_batch=per_batch and per_batch[1])


def spark_session() -> Any:
    """A local Spark session with Delta's jars, as ./spark-submit.sh starts the forwarder."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2]").appName("synclib-growth")
    for key, value in {**jvm.DELTA_SESSION_CONF, "spark.jars": ",".join(jvm.jars(jvm.DELTA)),
                       "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run(workdir: Path, versions: int, batches: int, rows: int, modes: Sequence[str],
        store: S3Server | None = None) -> Iterator[Measurement]:
    """Per mode a young and an old table, their micro-batches alternated (both ages timed under
    the same load: on a shared machine the load moves more between minutes than a commit of a
    millisecond takes)."""
    spark = spark_session() if set(modes) & set(SPARK_MODES) else None
    for mode in modes:
        directory = workdir / mode
        shutil.rmtree(directory, ignore_errors=True)
        tables = {}
        for age in (YOUNG_AGE, versions):
            table = GrowingTable(directory / str(age), rows, log_checkpoints=MAINTENANCE[mode] is None,
                                 spark=spark if mode in SPARK_MODES else None, store=store,
                                 direct=mode in DIRECT_SPARK_MODES)
            started = time.perf_counter()
            table.age_to(age)
            if MAINTENANCE[mode] is None or mode in SPARK_MODES:  # what the commits would have written on the way
                DeltaTable(table.path).create_checkpoint()
            print(f"{mode}: aged to {age} versions in {time.perf_counter() - started:.0f}s", flush=True)
            tables[age] = table
        delta_table._open_tables.clear()
        passes = {age: prepare(table, mode) for age, table in tables.items()}
        commits: dict[int, list[float]] = {age: [] for age in tables}
        requests: dict[int, list[Request]] = {age: [] for age in tables}
        for _ in range(batches):
            for age, table in tables.items():
                served = len(store.log()) if store is not None else 0
                commits[age].append(table.micro_batch(reopen=mode == "reopen") * 1000)
                if store is not None:
                    requests[age].extend(store.log()[served:])
        for age, table in tables.items():
            result = measured(table, mode, age, commits[age], requests[age] if store is not None else None,
                              passes[age])
            print(f"{mode}: {asdict(result)}", flush=True)
            yield result
        shutil.rmtree(directory, ignore_errors=True)


def table_text(results: Sequence[Measurement]) -> str:
    header = ("mode", "versions", "commit p50 ms", "commit mean ms", "commit max ms", "full read ms", "live files",
              "log files", "maintenance pass s", "LISTs/batch", "requests/batch")
    rows = [(r.mode, r.versions, r.commit_ms_p50, r.commit_ms_mean, r.commit_ms_max, r.read_ms, r.live_files,
             r.log_files, *("" if x is None else x for x in (r.maintenance_s, r.lists_per_batch, r.requests_per_batch)))
            for r in results]
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows, strict=True)]
    return "\n".join("  ".join(str(x).ljust(w) for x, w in zip(line, widths, strict=True)) for line in [header, *rows])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.growth", description=__doc__.splitlines()[0])
    parser.add_argument("--versions", type=int, default=20_000, help="the old table's age")
    parser.add_argument("--batches", type=int, default=40, help="micro-batches timed per measurement")
    parser.add_argument("--rows", type=int, default=20, help="events per version")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated, of " + ", ".join(MODES))
    parser.add_argument("--store", choices=("local", "s3"), default="local",
                        help="the delta-rs table on local disk or on an S3 server (harness.object_store)")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--output", type=Path, default=None, help="JSON results")
    parser.add_argument("--record", metavar="NAME", help="add the run to benchmarks/results/NAME.json, which the "
                        "docs' growth table is rendered from (benchmarks/records.py)")
    given = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(given)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="synclib-growth-"))
    modes = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        parser.error(f"--modes: unknown {unknown}; choose from {', '.join(MODES)}")
    if args.store == "s3" and set(modes) & set(SPARK_MODES):
        parser.error("--store s3: delta-rs modes only")
    started = records.environment()
    with contextlib.ExitStack() as stack:
        store = None
        if args.store == "s3":
            store = stack.enter_context(S3Server(workdir / "s3"))
            os.environ.update(S3Config.model_validate(store.storage_settings()).environment())  # as storage.s3 does
        results = list(run(workdir, args.versions, args.batches, args.rows, modes, store))
    print(table_text(results), flush=True)
    if args.output:
        args.output.write_text(json.dumps([asdict(r) for r in results], indent=2))
    if args.record:
        print("recorded in " + str(records.record_run(args.record, "python -m benchmarks.growth", given, started,
                                                      growth=[asdict(r) for r in results])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
