"""A table by name (`sink.table`) through a real Hive metastore on embedded Derby (PySpark's own
jars), across two job runs, each its own Spark session: the first creates the table and its
dead-letter table by name and forwards with delta-spark (`saveAsTable`); the second, with a new
checkpoint and delta-rs, finds the table by name in the metastore and resumes from its offsets
exactly once; `status` and `maintain` then find both by name. Embedded Derby admits one JVM at a
time, so the runs are sequential and the test reads the tables back by the locations the catalog
gave them. In-process tests of creation, clustering and bad input: tests/spark/test_catalog.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness.job_world import JobRun, job_config, write_config
from harness.poison import ERROR_COLUMN
from synclib import spark_checkpoint
from synclib.delta.table import read_arrow
from tests.forwarder_runs import ROOT, run_status
from tests.poison import EVENTS_PER_PARTITION, POISON, good_rows, poison_rows, produce_poisoned
from tests.support import publish_commit

TABLE = "spark_catalog.default.events"
JOB_TIMEOUT_S = 600.0


def hive_conf(tmp_path: Path) -> dict[str, str]:
    """SPARK_CONF_DIR for the job runs: the tests' spark-defaults.conf and a Hive metastore on
    embedded Derby under tmp_path (its derby.log too)."""
    directory = tmp_path / "spark-conf"
    directory.mkdir()
    defaults = (ROOT / "tests" / "spark-conf" / "spark-defaults.conf").read_text()
    metastore = tmp_path / "metastore"
    defaults += "\n".join((
        "", "spark.sql.catalogImplementation hive",
        f"spark.hadoop.javax.jdo.option.ConnectionURL jdbc:derby:;databaseName={metastore}/metastore_db;create=true",
        f"spark.sql.warehouse.dir {tmp_path / 'warehouse'}",
        f"spark.driver.extraJavaOptions -Dderby.system.home={metastore}", ""))
    (directory / "spark-defaults.conf").write_text(defaults)
    return {"SPARK_CONF_DIR": str(directory)}


def rows(location: str, *columns: str) -> list[tuple[Any, ...]]:
    data = read_arrow(location, columns=list(columns))
    return [] if data is None else sorted(zip(*(data.column(c).to_pylist() for c in columns), strict=True))


def test_a_table_by_name_is_created_forwarded_and_resumed_exactly_once_in_a_new_session(
        producer: Any, bootstrap_servers: str, new_topic: Any, tmp_path: Path) -> None:
    events, log = new_topic("named-events", 2), new_topic("named-log")
    produce_poisoned(producer, events)
    half = EVENTS_PER_PARTITION // 2
    for partition in (0, 1):
        publish_commit(producer, log, "snuba", events, partition, half)
    sink = {"path": None, "table": TABLE, "engine": "delta-spark", "table_properties": {"synclib.owner": "tests"},
            "dead_letters": {"enabled": True, "error_column": ERROR_COLUMN}}
    first = write_config(tmp_path / "first.yaml", job_config(
        bootstrap_servers, events, log, tmp_path, "snuba", transform="harness.poison:parse_events", sink=sink))
    env = hive_conf(tmp_path)

    run = JobRun(first, tmp_path, "first", ["--available-now"], env=env)
    assert run.wait(JOB_TIMEOUT_S) == 0, run.tail()

    record = spark_checkpoint.recorded_tables(str(tmp_path / "checkpoint"))
    assert record is not None and record.table == TABLE, record
    assert record.location == str(tmp_path / "warehouse" / "events")  # the metastore's managed location
    assert record.dead_letters_table == f"{TABLE}_dead_letters"
    assert rows(record.location, "partition", "offset") == good_rows(half)
    assert rows(record.dead_letters_location, "partition", "offset", "error_class") == poison_rows(half)

    # A new session (another spark-submit), a new checkpoint, the other engine: the table is found by
    # name in the metastore and the run resumes from the offsets it records.
    for partition in (0, 1):
        publish_commit(producer, log, "snuba", events, partition, EVENTS_PER_PARTITION)
    second = write_config(tmp_path / "second.yaml", job_config(
        bootstrap_servers, events, log, tmp_path, "snuba", transform="harness.poison:parse_events",
        sink={**sink, "engine": "delta-rs"}, checkpoint={"location": str(tmp_path / "checkpoint-2")}))
    run = JobRun(second, tmp_path, "second", ["--available-now"], env=env)
    assert run.wait(JOB_TIMEOUT_S) == 0, run.tail()

    assert "resuming from the table's offsets" in run.output()
    assert rows(record.location, "partition", "offset") == good_rows()  # each once
    assert rows(record.dead_letters_location, "partition", "offset", "error_class") == poison_rows()

    status = run_status("--config", str(second), "--json")  # no Spark: the locations the job recorded
    assert status.returncode == 0, status.stderr
    report = json.loads(status.stdout)
    assert report["dead_letters"] == {"path": record.dead_letters_location, "by_topic": {events: len(POISON)}}
    assert {(p["partition"], p["follower_offset"]) for p in report["partitions"]} == {
        (0, EVENTS_PER_PARTITION), (1, EVENTS_PER_PARTITION)}
    maintain = subprocess.run([sys.executable, "-m", "synclib", "maintain", "--config", str(second)], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
    assert maintain.returncode == 0 and maintain.stdout.startswith(f"{TABLE}: "), maintain
