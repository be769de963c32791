"""Table maintenance: what a pass does to a synclib table, exactly once while it runs, resume
from the table after compaction, vacuum, checkpoints and log cleanup, the `maintain` command,
and the short CI version of `python -m benchmarks.soak` (a kill during a maintenance commit).

The table-level tests drive the forwarder's own delta-rs writer (`DeltaStreamWriter.write` and
`.commit`, with a checkpoint directory shaped like Spark's), so they need neither Spark nor Kafka.
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
from pathlib import Path

import pyarrow as pa
import yaml
from deltalake import DeltaTable
from pyspark.sql.types import DateType, LongType, StringType, StructField, StructType

from benchmarks.soak import soak
from synclib.delta.maintenance import COMPACTED_PREFIX, PassReport, compact, run_pass
from synclib.delta.table import latest_synclib_commit, read_table_offsets
from synclib.delta.writer import DeltaStreamWriter
from synclib.settings.job import MaintenanceConfig
from tests.job_files import MAINTENANCE

SCHEMA = StructType([StructField("partition", LongType()), StructField("offset", LongType())])
ROWS = 10  # per batch


class Batches:
    """Micro-batches of ROWS offsets of partition 0 through the forwarder's writer."""

    def __init__(self, root: Path, schema: StructType = SCHEMA, partition_by: str = "[]") -> None:
        self.table = str(root / "table")
        self.checkpoint = root / "checkpoint"
        (self.checkpoint / "offsets").mkdir(parents=True)
        (self.checkpoint / "metadata").write_text(json.dumps({"id": "q"}))
        self.writer = DeltaStreamWriter(schema, {"path": self.table, "checkpointLocation": str(self.checkpoint),
                                                 "partitionBy": partition_by, "logCheckpoints": "false"})
        self.next = 0

    def commit(self, batch: int, rows: pa.RecordBatch | None = None) -> None:
        end = (batch + 1) * ROWS
        (self.checkpoint / "offsets" / str(batch)).write_text(f'v1\n{{}}\n{{"events":{{"0":{end}}}}}\n')
        rows = rows or pa.record_batch({"partition": [0] * ROWS, "offset": list(range(end - ROWS, end))})
        self.writer.commit([self.writer.write(iter([rows]))], batch)

    def run(self, count: int) -> None:
        for _ in range(count):
            self.commit(self.next)
            self.next += 1

    def offsets(self) -> list[int]:
        return sorted(DeltaTable(self.table).to_pyarrow_table(columns=["offset"])["offset"].to_pylist())


def settings(**keys: str | int) -> MaintenanceConfig:
    return MaintenanceConfig(**{"min_age": "1m", "vacuum_retention": "0s", **keys})


def test_a_pass_compacts_small_files_once_old_enough_into_one_commit(tmp_path: Path) -> None:
    batches = Batches(tmp_path)
    batches.run(12)

    young = run_pass(batches.table, settings())
    assert (young.compacted_files, young.deferred_files, young.live_files) == (0, 12, 12)

    report = run_pass(batches.table, settings(), now=time.time() + 120)
    table = DeltaTable(batches.table)
    assert (report.compacted_files, report.written_files, report.live_files) == (12, 1, 1)
    assert [Path(uri).name.startswith(COMPACTED_PREFIX) for uri in table.file_uris()] == [True]
    assert batches.offsets() == list(range(12 * ROWS))
    compaction = next(h for h in table.history() if "synclib.maintenance" in h)
    assert json.loads(compaction["synclib.maintenance"]) == {"operation": "compaction", "removed": 12, "added": 1}
    log = Path(batches.table) / "_delta_log" / f"{compaction['version']:020d}.json"
    actions = [json.loads(line) for line in log.read_text().splitlines()]
    assert all(not a[k]["dataChange"] for a in actions for k in ("add", "remove") if k in a)
    assert report.vacuumed_files == 12  # vacuum_retention 0s: the replaced files are deleted at once
    assert len(list(Path(batches.table).glob("*.parquet"))) == 1


def test_closed_dates_are_compacted_fully_and_today_only_once_old_enough(tmp_path: Path) -> None:
    schema = StructType([*SCHEMA.fields, StructField("date", DateType())])
    batches = Batches(tmp_path, schema, '["date"]')
    today = dt.datetime.now(dt.timezone.utc).date()
    for batch in range(6):
        date = dt.date(2024, 1, 1) if batch < 3 else today
        rows = pa.record_batch({"partition": [0] * ROWS, "offset": list(range(batch * ROWS, (batch + 1) * ROWS)),
                                "date": pa.array([date] * ROWS, pa.date32())})
        batches.commit(batch, rows)

    report = run_pass(batches.table, settings(min_age="1h"))

    dates = pa.table(DeltaTable(batches.table).get_add_actions(flatten=True))["partition.date"].to_pylist()
    assert Counter(dates) == {dt.date(2024, 1, 1): 1, today: 3}
    assert (report.compacted_files, report.deferred_files) == (3, 3)


def test_partition_values_with_any_characters_are_compacted_and_vacuumed(tmp_path: Path) -> None:
    schema = StructType([StructField("name", StringType()), StructField("offset", LongType())])
    batches = Batches(tmp_path, schema, '["name"]')
    names = ["a b:c%d/é=", None, "plain"]
    for batch in range(3):
        batches.commit(batch, pa.record_batch({"name": pa.array(names, pa.large_string()),
                                               "offset": [batch * 3 + i for i in range(3)]}))

    report = run_pass(batches.table, settings(min_age="0s"))

    assert (report.compacted_files, report.written_files, report.vacuumed_files) == (9, 3, 9)
    data = DeltaTable(batches.table).to_pyarrow_table().sort_by("offset").to_pydict()
    assert data == {"name": names * 3, "offset": list(range(9))}
    data_files = [p for p in Path(batches.table).rglob("*.parquet") if "_delta_log" not in p.parts]
    assert len(data_files) == 3 and all(p.name.startswith(COMPACTED_PREFIX) for p in data_files)


def test_batch_commits_concurrent_with_maintenance_stay_exactly_once(tmp_path: Path) -> None:
    batches = Batches(tmp_path)
    batches.run(5)
    stop = threading.Event()
    reports = []

    def maintain() -> None:
        while not stop.is_set():
            reports.append(run_pass(batches.table, settings(min_age="0s", checkpoint_interval=5)))

    thread = threading.Thread(target=maintain)
    thread.start()
    try:
        batches.run(40)
    finally:
        stop.set()
        thread.join()

    assert sum(r.compacted_files for r in reports) > 0
    assert batches.offsets() == list(range(45 * ROWS))
    assert DeltaTable(batches.table).transaction_version("synclib-q") == 44
    assert read_table_offsets(batches.table) == {"events": {"0": 45 * ROWS}}


def test_two_compactions_of_the_same_files_do_not_both_commit(tmp_path: Path) -> None:
    """E.g. a cron `maintain` next to the job's own maintenance: the later one loses a conflict
    (their application transaction) instead of doubling the rows."""
    batches = Batches(tmp_path)
    batches.run(6)
    first, second = DeltaTable(batches.table), DeltaTable(batches.table)  # both at version 5
    reports = [PassReport(), PassReport()]

    compact(first, settings(min_age="0s"), time.time(), reports[0])
    compact(second, settings(min_age="0s"), time.time(), reports[1])

    assert [r.compacted_files for r in reports] == [6, 0]
    assert "conflict" in reports[1].notes[0]
    assert batches.offsets() == list(range(6 * ROWS))
    assert [Path(uri).name.startswith(COMPACTED_PREFIX) for uri in DeltaTable(batches.table).file_uris()] == [True]


def test_a_new_checkpoint_resumes_from_the_table_after_compaction_vacuum_and_log_cleanup(tmp_path: Path) -> None:
    batches = Batches(tmp_path)
    batches.run(20)
    old = time.time() - 3600
    for entry in (Path(batches.table) / "_delta_log").iterdir():
        os.utime(entry, (old, old))
    # The newest commits are maintenance ones: compaction, then vacuum's two.
    report = run_pass(batches.table, settings(min_age="0s", checkpoint_interval=1, log_retention="1m"))

    assert report.log_entries_removed > 0
    table = DeltaTable(batches.table)
    assert table.history(1)[0]["operation"].startswith("VACUUM")
    assert min(int(e.name[:20]) for e in (Path(batches.table) / "_delta_log").glob("*.json")) == 19
    assert latest_synclib_commit(table)["version"] == 19
    assert read_table_offsets(batches.table) == {"events": {"0": 20 * ROWS}}
    assert table.transaction_version("synclib-q") == 19  # from the checkpoint
    batches.commit(19)  # the replay of the last batch after a crash is skipped
    assert batches.offsets() == list(range(20 * ROWS))


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


def test_short_soak_with_a_kill_during_a_maintenance_commit_stays_exactly_once(tmp_path: Path) -> None:
    """75 s at 300 events/s with maintenance every 3 s, one SIGKILL while compaction has written
    its file but not committed it, a 5 s broker pause: every offset below the leader's final
    commit exactly once, and compaction keeps the live files well below the batch count."""
    report = soak(tmp_path, seconds=75, rate=300, kills=1, pause_s=5,
                  interval="3s", min_age="1s", vacuum_retention="0s")
    assert report.exactly_once, report.text()
    assert (report.duplicates, report.gaps, report.beyond_leader) == (0, 0, 0), report.text()
    assert report.kill_windows == {MAINTENANCE: 1}, report.text()
    assert report.maintenance_passes >= 3, report.text()
    assert report.live_files < report.versions / 4, report.text()
