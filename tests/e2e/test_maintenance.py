"""Table maintenance: what a pass does to a synclib table and how the history records it,
exactly once while it runs, resume from the table after compaction, vacuum, checkpoints and log
cleanup, the `maintain` command, and the short CI version of `python -m benchmarks.soak` (a kill
during a maintenance commit).

The table-level tests run on both engines (`engine`): the forwarder's own writers with a
checkpoint directory shaped like Spark's (delta-rs: `DeltaStreamWriter.write` and `.commit`, no
Spark; delta-spark: `DeltaSparkBatchWriter` in the test session) and the engine's maintenance
pass (`maintenance.run_pass`, `spark_maintenance.run_pass`). No Kafka. On the tests' S3 server,
the delta-rs batch commit and pass wait for the table's host-wide commit lock.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pytest
import yaml
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession
from pyspark.sql.types import DateType, LongType, StringType, StructField, StructType

from benchmarks.soak import soak
from harness.job_files import MAINTENANCE
from harness.object_store import S3Server
from synclib.delta import commit_lock, maintenance, spark_maintenance
from synclib.delta.direct import TableFiles
from synclib.delta.engine import fit_delta_to_local_master, fit_delta_to_object_store
from synclib.delta.maintenance import MAINTENANCE_APP_ID, PassReport, compact, run_pass
from synclib.delta.spark_writer import DeltaSparkBatchWriter
from synclib.delta.table import latest_synclib_commit, read_arrow, read_table_offsets
from synclib.delta.writer import DeltaStreamWriter, DirectBatchCommit, arrow_schema
from synclib.settings.job import MaintenanceConfig
from synclib.settings.storage import S3Config
from synclib.settings.values import DELTA_RS, DELTA_SPARK
from synclib.spark_checkpoint import RunMarker, start_run
from tests.support import wait_until, waiting_for_lock

T = TypeVar("T")
SCHEMA = StructType([StructField("partition", LongType()), StructField("offset", LongType())])
ROWS = 10  # per batch
ENGINES = (DELTA_RS, DELTA_SPARK)


class Batches:
    """Micro-batches of ROWS offsets of partition 0 through the forwarder's writer of `engine`
    (delta-spark needs `spark`), and that engine's maintenance pass."""

    def __init__(self, root: Path, schema: StructType = SCHEMA, partition_by: str = "[]",
                 engine: str = DELTA_RS, spark: SparkSession | None = None, table: str | None = None) -> None:
        self.table = table or str(root / "table")
        self.checkpoint = root / "checkpoint"
        (self.checkpoint / "offsets").mkdir(parents=True)
        (self.checkpoint / "metadata").write_text(json.dumps({"id": "q"}))
        self.engine, self.spark, self.schema = engine, spark, schema
        if spark is not None:
            fit_delta_to_local_master(spark)
        self.writer = DeltaStreamWriter(schema, {"path": self.table, "checkpointLocation": str(self.checkpoint),
                                                 "partitionBy": partition_by, "logCheckpoints": "false"})
        self.spark_writer = DeltaSparkBatchWriter(self.table, str(self.checkpoint), json.loads(partition_by))
        self.next = 0

    def plan(self, batch: int) -> pa.RecordBatch:
        """Batch `batch` in the checkpoint's offset log; its rows."""
        end = (batch + 1) * ROWS
        (self.checkpoint / "offsets" / str(batch)).write_text(f'v1\n{{}}\n{{"events":{{"0":{end}}}}}\n')
        return pa.record_batch({"partition": [0] * ROWS, "offset": list(range(end - ROWS, end))})

    def commit(self, batch: int, rows: pa.RecordBatch | None = None) -> None:
        planned = self.plan(batch)
        rows = rows or planned
        if self.engine == DELTA_SPARK:
            assert self.spark is not None
            data = self.spark.createDataFrame(pa.Table.from_batches([rows]), schema=self.schema).coalesce(1)
            self.spark_writer(data, batch)  # one file per batch, as the delta-rs writer's one task writes
        else:
            self.writer.commit([self.writer.write(iter([rows]))], batch)

    def maintain(self, options: MaintenanceConfig, now: float | None = None) -> PassReport:
        """One maintenance pass of this engine."""
        if self.engine == DELTA_SPARK:
            return spark_maintenance.run_pass(self.spark, self.table, options, now=now)
        return run_pass(self.table, options, now=now)

    def run(self, count: int) -> None:
        for _ in range(count):
            self.commit(self.next)
            self.next += 1

    def offsets(self) -> list[int]:
        return sorted(read_arrow(self.table, columns=["offset"])["offset"].to_pylist())


def settings(**keys: str | int) -> MaintenanceConfig:
    return MaintenanceConfig(**{"min_age": "1m", "vacuum_retention": "0s", **keys})


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_batches(engine: str, request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., Batches]:
    """Batches of the parametrized engine (the Spark session only for delta-spark)."""
    spark = request.getfixturevalue("spark") if engine == DELTA_SPARK else None

    def make(schema: StructType = SCHEMA, partition_by: str = "[]") -> Batches:
        return Batches(tmp_path, schema, partition_by, engine=engine, spark=spark)
    return make


def history_after(table: str, version: int) -> list[dict[str, Any]]:
    """The history entries above `version`, oldest first."""
    return sorted((h for h in DeltaTable(table).history() if h["version"] > version), key=lambda h: h["version"])


def commit_actions(table: str, version: int) -> list[dict[str, Any]]:
    log = Path(table) / "_delta_log" / f"{version:020d}.json"
    return [json.loads(line) for line in log.read_text().splitlines()]


def data_files(table: str) -> set[str]:
    return {str(p.relative_to(table)) for p in Path(table).rglob("*.parquet") if "_delta_log" not in p.parts}


def test_a_pass_compacts_small_files_once_old_enough_into_one_optimize_commit(
        make_batches: Callable[..., Batches]) -> None:
    batches = make_batches()
    batches.run(6)
    last_batch = DeltaTable(batches.table).version()
    batch_files = data_files(batches.table)

    young = batches.maintain(settings(min_age="1h"))
    assert (young.compacted_files, young.deferred_files, young.live_files) == (0, 6, 6)

    report = batches.maintain(settings(min_age="1h"), now=time.time() + 7200)
    table = DeltaTable(batches.table)
    assert (report.compacted_files, report.written_files, report.live_files) == (6, 1, 1)
    assert batches.offsets() == list(range(6 * ROWS))
    history = history_after(batches.table, last_batch)
    operations = [h["operation"] for h in history]
    assert "WRITE" not in operations or batches.engine == DELTA_RS, operations
    (optimize,) = [h for h in history if h["operation"] == "OPTIMIZE"]
    assert optimize["operationParameters"].get("predicate") is not None, optimize
    assert operations[-2:] == ["VACUUM START", "VACUUM END"], operations
    if batches.engine == DELTA_RS:  # the claim (an empty commit of the maintenance transaction), then OPTIMIZE
        claim = history[operations.index("OPTIMIZE") - 1]
        assert json.loads(claim["synclib.maintenance"])["operation"] == "claim"
        assert "add" not in {k for a in commit_actions(batches.table, claim["version"]) for k in a}
        assert json.loads(optimize["synclib.maintenance"])["claim"] == table.transaction_version(MAINTENANCE_APP_ID)
    actions = commit_actions(batches.table, optimize["version"])
    assert sum("remove" in a for a in actions) == 6 and sum("add" in a for a in actions) == 1
    assert all(not a[k]["dataChange"] for a in actions for k in ("add", "remove") if k in a)
    assert report.vacuumed_files == 6  # vacuum_retention 0s: the replaced files are deleted at once
    (live,) = data_files(batches.table)
    assert live not in batch_files


def test_closed_dates_are_compacted_fully_and_today_only_once_old_enough(make_batches: Callable[..., Batches]) -> None:
    schema = StructType([*SCHEMA.fields, StructField("date", DateType())])
    batches = make_batches(schema, '["date"]')
    today = dt.datetime.now(dt.timezone.utc).date()
    for batch in range(6):
        date = dt.date(2024, 1, 1) if batch < 3 else today
        rows = pa.record_batch({"partition": [0] * ROWS, "offset": list(range(batch * ROWS, (batch + 1) * ROWS)),
                                "date": pa.array([date] * ROWS, pa.date32())})
        batches.commit(batch, rows)

    report = batches.maintain(settings(min_age="1h"))

    dates = pa.table(DeltaTable(batches.table).get_add_actions(flatten=True))["partition.date"].to_pylist()
    assert Counter(dates) == {dt.date(2024, 1, 1): 1, today: 3}
    assert (report.compacted_files, report.deferred_files) == (3, 3)
    assert batches.offsets() == list(range(6 * ROWS))


def test_partition_values_with_any_characters_are_compacted_and_vacuumed(make_batches: Callable[..., Batches]) -> None:
    schema = StructType([StructField("name", StringType()), StructField("offset", LongType())])
    batches = make_batches(schema, '["name"]')
    names = ["a b:c%d/é=", None, "plain"]
    for batch in range(3):
        batches.commit(batch, pa.record_batch({"name": pa.array(names, pa.large_string()),
                                               "offset": [batch * 3 + i for i in range(3)]}))
    batch_files = data_files(batches.table)

    report = batches.maintain(settings(min_age="0s"))

    assert (report.compacted_files, report.written_files, report.vacuumed_files) == (9, 3, 9)
    data = read_arrow(batches.table).sort_by("offset").to_pydict()
    assert data == {"name": names * 3, "offset": list(range(9))}
    live = data_files(batches.table)
    assert len(live) == 3 and not live & batch_files


def test_batch_commits_concurrent_with_maintenance_stay_exactly_once(make_batches: Callable[..., Batches]) -> None:
    batches = make_batches()
    batches.run(5)
    stop = threading.Event()
    reports = []
    more = 40 if batches.engine == DELTA_RS else 10  # a delta-spark batch takes seconds on this machine

    def maintain() -> None:
        while not stop.is_set():
            reports.append(batches.maintain(settings(min_age="0s", checkpoint_interval=5)))

    thread = threading.Thread(target=maintain)
    thread.start()
    try:
        batches.run(more)
    finally:
        stop.set()
        thread.join()

    total = 5 + more
    assert sum(r.compacted_files for r in reports) > 0
    assert batches.offsets() == list(range(total * ROWS))
    assert DeltaTable(batches.table).transaction_version("synclib-q") == total - 1
    assert read_table_offsets(batches.table) == {("events", 0): total * ROWS}


@pytest.fixture
def on_s3(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """The tests' S3 server, set for this process's delta-rs and pyarrow as the job sets
    `storage.s3` (no Spark session needed, unlike the `s3` fixture)."""
    for name, value in S3Config(**s3_server.storage_settings()).environment({}).items():
        monkeypatch.setenv(name, value)
    return s3_server


def held_off_by_the_commit_lock(table: str, work: Callable[[], T]) -> T:
    """`work()` on a thread while the test holds the commit lock of `table` (as another process's
    commit would): it reaches the lock and commits nothing until the lock is released; its result."""
    lock = commit_lock.lock_file(table)
    assert lock is not None
    results: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(work())
        except Exception as exc:  # noqa: BLE001 (the test thread raises it)
            errors.append(exc)

    version = DeltaTable(table).version()
    thread = threading.Thread(target=run, daemon=True)
    with commit_lock.held(table):
        thread.start()
        wait_until(lambda: waiting_for_lock(lock), 60, "the commit waits for the table's commit lock")
        assert DeltaTable(table).version() == version
    thread.join(120)
    assert not thread.is_alive() and not errors, errors
    return results[0]


@pytest.mark.parametrize("write_path", ["row", "direct"])
def test_on_s3_a_batch_commit_waits_for_the_tables_commit_lock(
        write_path: str, on_s3: S3Server, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """The batch commit (row path: `DeltaStreamWriter.commit`; direct path: `DirectBatchCommit`)
    holds the table's commit lock, which maintenance holds too: on a server that lets a second PUT
    of a log entry replace the first, no two of the host's commits take one version."""
    batches = Batches(tmp_path, table=f"s3://{on_s3.bucket()}/table")
    batches.run(1)
    if write_path == "row":
        held_off_by_the_commit_lock(batches.table, lambda: batches.commit(1))
    else:
        spark: SparkSession = request.getfixturevalue("spark")
        files = TableFiles(batches.table, arrow_schema(SCHEMA), ()).write(iter([batches.plan(1)]))
        added = spark.createDataFrame(pa.Table.from_batches(list(files)))
        held_off_by_the_commit_lock(batches.table, lambda: DirectBatchCommit(batches.writer)(added, 1))
    assert DeltaTable(batches.table).version() == 1
    assert batches.offsets() == list(range(2 * ROWS))
    assert read_table_offsets(batches.table) == {("events", 0): 2 * ROWS}


def test_on_s3_a_maintenance_pass_waits_for_the_tables_commit_lock(on_s3: S3Server, tmp_path: Path) -> None:
    batches = Batches(tmp_path, table=f"s3://{on_s3.bucket()}/table")
    batches.run(3)
    report = held_off_by_the_commit_lock(batches.table, lambda: run_pass(batches.table, settings(min_age="0s")))
    assert report.compacted_files == 3 and report.vacuumed_files == 3, report.notes
    assert report.checkpoint is not None
    assert batches.offsets() == list(range(3 * ROWS))
    batches.run(1)  # a batch commit after the pass
    assert batches.offsets() == list(range(4 * ROWS))
    assert read_table_offsets(batches.table) == {("events", 0): 4 * ROWS}


def log_requests(server: S3Server, since: int, table: str) -> Counter[str]:
    """The requests of the server's log after mark `since` to `table`'s log, as 'METHOD entry'."""
    log = f"{table.split('://', 1)[1]}/_delta_log"
    return Counter(f"{r.method} {r.key.rsplit('/', 1)[-1]}" for r in server.log()[since:] if r.key.startswith(log))


def test_on_s3_consecutive_batch_commits_read_no_older_log_entry(on_s3: S3Server, tmp_path: Path) -> None:
    """After the table's newest version is the writer's own commit, each batch costs a HEAD of that
    entry and a conditional PUT of the next (`synclib.delta.log_append`), and its file one PUT:
    three requests, however long the log since its last checkpoint."""
    batches = Batches(tmp_path, table=f"s3://{on_s3.bucket()}/table")
    batches.run(2)  # batch 0 creates the table, batch 1 learns its newest version
    per_batch = []
    for _ in range(8):
        mark = len(on_s3.log())
        batches.run(1)
        version = batches.next - 1
        assert log_requests(on_s3, mark, batches.table) == {
            f"HEAD {version - 1:020d}.json": 1, f"PUT {version:020d}.json": 1}
        per_batch.append(len(on_s3.log()) - mark)
    assert per_batch == [3] * 8  # the log entry's two requests and the data file's one PUT
    table = DeltaTable(batches.table)
    assert (table.version(), table.transaction_version("synclib-q")) == (9, 9)
    assert batches.offsets() == list(range(10 * ROWS))
    assert read_table_offsets(batches.table) == {("events", 0): 10 * ROWS}


def test_on_s3_an_appended_commit_is_refused_when_another_commit_took_its_version(
        on_s3: S3Server, tmp_path: Path) -> None:
    """A writer elsewhere (no commit lock of this host) commits the version the stream's next batch
    is appended at: the conditional PUT is refused (412) and the batch goes through deltalake, at the
    version after."""
    batches = Batches(tmp_path, table=f"s3://{on_s3.bucket()}/table")
    batches.run(2)
    other = pa.table({"partition": [7], "offset": [-1]})
    write_deltalake(batches.table, other, mode="append")  # version 2, not the stream's
    mark = len(on_s3.log())

    batches.run(1)

    assert log_requests(on_s3, mark, batches.table)[f"PUT {2:020d}.json"] == 1  # the refused create
    table = DeltaTable(batches.table)
    assert table.version() == 3 and table.transaction_version("synclib-q") == 2
    assert [h.get("synclib.batchId") for h in history_after(batches.table, 1)] == [None, 2]
    assert batches.offsets() == [-1, *range(3 * ROWS)]
    assert read_table_offsets(batches.table) == {("events", 0): 3 * ROWS}


def test_on_s3_a_commit_of_another_holder_of_the_commit_lock_is_looked_up_before_appending(
        on_s3: S3Server, tmp_path: Path) -> None:
    """On a server that does not enforce `If-None-Match` the create could not see a commit that took
    the version: when another of the host's writers held the table's commit lock since the stream's
    last commit, the next version is looked up (HEAD) first, and found, the batch goes through
    deltalake instead of PUTting over it."""
    batches = Batches(tmp_path, table=f"s3://{on_s3.bucket()}/table")
    batches.run(2)
    with commit_lock.held(batches.table):  # a maintenance commit, say
        write_deltalake(batches.table, pa.table({"partition": [7], "offset": [-1]}), mode="append")
    mark = len(on_s3.log())

    batches.run(1)

    requests = log_requests(on_s3, mark, batches.table)
    assert requests[f"HEAD {2:020d}.json"] == 1 and requests[f"PUT {2:020d}.json"] == 0
    assert requests[f"PUT {3:020d}.json"] == 1
    assert DeltaTable(batches.table).transaction_version("synclib-q") == 2
    assert batches.offsets() == [-1, *range(3 * ROWS)]


def test_on_s3_delta_spark_batches_after_the_writers_own_are_not_read_first_and_write_no_checksums(
        on_s3: S3Server, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """With a run marker, the delta-spark writer reads the table with delta-rs (its LIST from a
    version, `start-after`) only before its first batch, and on an object store Delta writes no
    `.crc` files; a replayed batch is still skipped and every offset is in the table once."""
    request.getfixturevalue("s3")
    spark: SparkSession = request.getfixturevalue("spark")
    batches = Batches(tmp_path, engine=DELTA_SPARK, spark=spark, table=f"s3://{on_s3.bucket()}/table")
    marker = RunMarker.new()
    start_run(str(batches.checkpoint), marker)
    batches.spark_writer = DeltaSparkBatchWriter(batches.table, str(batches.checkpoint), [], marker.run_id)
    fit_delta_to_object_store(spark, batches.table)
    try:
        batches.run(1)
        mark = len(on_s3.log())
        batches.run(3)
        log = on_s3.log()[mark:]
        assert not [r for r in log if "start-after" in r.query], "the table was read with delta-rs"
        assert not [r for r in log if r.key.endswith(".crc") or ".crc." in r.key]
        batches.spark_writer = DeltaSparkBatchWriter(batches.table, str(batches.checkpoint), [], marker.run_id)
        batches.commit(3)  # replayed by a new writer (a restart): found in the table, skipped
    finally:
        spark.conf.unset("spark.databricks.delta.writeChecksumFile.enabled")
    assert DeltaTable(batches.table).transaction_version("synclib-q") == 3
    assert batches.offsets() == list(range(4 * ROWS))


def test_two_compactions_of_the_same_files_do_not_both_commit(tmp_path: Path) -> None:
    """E.g. a cron `maintain` next to the job's own maintenance (delta-rs finds no conflict between
    two OPTIMIZE commits removing the same files): the later one loses the race for the
    maintenance claim instead of doubling the rows."""
    batches = Batches(tmp_path)
    batches.run(6)
    first, second = DeltaTable(batches.table), DeltaTable(batches.table)  # both at version 5
    reports = [PassReport(), PassReport()]

    compact(first, settings(min_age="0s"), time.time(), reports[0])
    compact(second, settings(min_age="0s"), time.time(), reports[1])

    assert [r.compacted_files for r in reports] == [6, 0]
    assert "conflict" in reports[1].notes[0]
    assert batches.offsets() == list(range(6 * ROWS))
    assert len(DeltaTable(batches.table).file_uris()) == 1


def test_an_open_claim_holds_off_other_compactions_until_it_expires(tmp_path: Path) -> None:
    """A pass that died between its claim and its OPTIMIZE commit blocks compaction until the
    claim expires; a closed claim blocks nothing."""
    batches = Batches(tmp_path)
    batches.run(4)
    table = DeltaTable(batches.table)
    assert maintenance._claim(table, settings(), PassReport(), time.time()) == 1  # and then the pass "dies"

    held = run_pass(batches.table, settings(min_age="0s"))
    assert held.compacted_files == 0 and "held by another pass" in held.notes[0], held.notes

    later = time.time() + settings().time_budget + maintenance.CLAIM_MARGIN_S + 1
    report = run_pass(batches.table, settings(min_age="0s"), now=later)
    assert report.compacted_files == 4, report.notes
    batches.run(2)
    again = run_pass(batches.table, settings(min_age="0s"))
    assert "held by another pass" not in " ".join(again.notes), again.notes
    assert batches.offsets() == list(range(6 * ROWS))


def test_a_new_checkpoint_resumes_from_the_table_after_compaction_vacuum_and_log_cleanup(
        make_batches: Callable[..., Batches]) -> None:
    batches = make_batches()
    batches.run(8)
    old = time.time() - 3600
    for entry in (Path(batches.table) / "_delta_log").iterdir():
        os.utime(entry, (old, old))
    # The newest commits are maintenance ones: compaction, then vacuum's two.
    report = batches.maintain(settings(min_age="0s", checkpoint_interval=1, log_retention="1m"))

    assert report.log_entries_removed > 0
    table = DeltaTable(batches.table)
    assert table.history(1)[0]["operation"] == "VACUUM END"
    assert min(int(e.name[:20]) for e in (Path(batches.table) / "_delta_log").glob("*.json")) == 7
    assert latest_synclib_commit(table)["version"] == 7
    assert read_table_offsets(batches.table) == {("events", 0): 8 * ROWS}
    assert table.transaction_version("synclib-q") == 7  # from the checkpoint
    batches.commit(7)  # the replay of the last batch after a crash is skipped
    assert batches.offsets() == list(range(8 * ROWS))


def test_the_commit_notices_a_table_replaced_under_the_same_path(tmp_path: Path) -> None:
    """The writer keeps the table open between batches; a new table at the same path is not
    mistaken for the old one (whose transaction says batch 0 is done)."""
    batches = Batches(tmp_path)
    batches.run(3)
    shutil.rmtree(batches.table)

    batches.commit(0)

    assert batches.offsets() == list(range(ROWS))


def test_maintain_command_runs_one_pass(tmp_path: Path) -> None:
    batches = Batches(tmp_path)
    batches.run(4)
    config = tmp_path / "forwarder.yaml"
    config.write_text(yaml.safe_dump({
        "kafka": {"bootstrap_servers": "localhost:9092"},
        "source": {"subscribe": "events", "commit_log_topic": "commit-log", "commit_groups": ["leader"]},
        "sink": {"path": batches.table, "maintenance": {"enabled": False, "min_age": "0s"}},
        "checkpoint": {"location": str(batches.checkpoint)},
    }))

    done = subprocess.run([sys.executable, "-m", "synclib", "maintain", "--config", str(config)],
                          capture_output=True, text=True, timeout=120)

    assert done.returncode == 0, done.stderr
    assert "compacted 4 files" in done.stdout and "1 live files" in done.stdout, done.stdout
    bad = subprocess.run([sys.executable, "-m", "synclib", "maintain", "--config", str(config),
                          "--set", "sink.maintenance.min_agee=1s"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "sink.maintenance.min_agee" in bad.stderr, bad.stderr


def test_short_soak_with_a_kill_during_a_maintenance_commit_stays_exactly_once(
        s3_server: S3Server, tmp_path: Path) -> None:
    """75 s at 300 events/s with maintenance every 3 s, one SIGKILL while compaction has written
    its file but not committed it, a 5 s broker pause, the table and the checkpoint on the S3
    server: every offset below the leader's final commit exactly once, compaction keeps the live
    files well below the batch count, and the history (read through the S3 API) records it as
    OPTIMIZE. The job runs on until it has reported 3 passes. On delta-rs, whose compaction files
    the harness tells from a batch's; delta-spark's kills (a table Spark created with column
    mapping, OPTIMIZE racing the batches) are tests/e2e/test_faults.py's crash test."""
    report = soak(tmp_path, seconds=75, rate=300, kills=1, pause_s=5, engine=DELTA_RS, min_passes=3,
                  store=s3_server, interval="3s", min_age="1s", vacuum_retention="0s")
    assert report.exactly_once, report.text()
    assert (report.duplicates, report.gaps, report.beyond_leader) == (0, 0, 0), report.text()
    assert report.kill_windows == {MAINTENANCE: 1}, report.text()
    assert report.maintenance_passes >= 3, report.text()
    storage = S3Config(**s3_server.storage_settings()).environment({})
    history = DeltaTable(report.table, storage_options=storage).history()
    assert any(h["operation"] == "OPTIMIZE" for h in history), report.text()
    # Compaction left fewer live files than the batches wrote (one file each). Counted from the
    # history, not the versions: maintenance commits are versions too, and how many batches fit in
    # the run depends on the machine.
    batch_writes = [h for h in history if h["operation"] == "WRITE" and maintenance.META_MAINTENANCE not in h]
    assert report.live_files < len(batch_writes), report.text()
    metrics = [h.get("operationMetrics") or {} for h in history if h["operation"] == "WRITE"]
    assert not [m for m in metrics if int(m.get("num_removed_files") or 0)], metrics  # no compaction as a batch
