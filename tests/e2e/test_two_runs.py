"""Two runs of the job at once on one table and checkpoint, on S3 (a retried job whose old run is
still alive, a double deploy): the newest run wins, the older stops with one line naming the
checkpoint and the other run, and the table holds every released offset exactly once, with no
lost commit; Spark writes its checkpoint in place (no temporary object, no rename). On delta-spark,
what `auto` picks on a Spark cluster with Delta: the takeover is the run marker's, the same for both
engines, and each engine's refusal of a commit another writer took the version of is
tests/e2e/test_maintenance.py's (`test_on_s3_*`). The marker and the sink's checks alone:
tests/unit/test_run_marker.py."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from harness.job_files import delta_batches, verify_table
from harness.job_world import KafkaWorld
from harness.object_store import S3Server, kind
from synclib.delta.table import read_arrow
from synclib.exit_codes import ExitCode
from synclib.settings.values import DELTA_SPARK
from tests.e2e.test_faults import finished, run_job, stopped, world  # noqa: F401 (world: a fixture)
from tests.support import wait_until

WAIT_S = 600.0  # bounded, not a timing: Spark starts and runs its first batch in minutes at load 25 on 2 cores


def commit_versions(table: Path) -> list[int]:
    return sorted(int(name[:20]) for name in os.listdir(table / "_delta_log") if re.fullmatch(r"\d{20}\.json", name))


@pytest.mark.slow
def test_a_second_run_takes_over_and_the_first_stops_with_one_line(
        world: KafkaWorld, s3: S3Server, spark: SparkSession, tmp_path: Path) -> None:  # noqa: F811
    bucket = s3.bucket()
    stored = s3.directory / "data" / bucket
    config = world.config(tmp_path, sink={"path": f"s3://{bucket}/table", "engine": DELTA_SPARK,
                                          "maintenance": {"enabled": False}},
                          checkpoint={"location": f"s3a://{bucket}/checkpoint"},
                          storage={"s3": s3.storage_settings()})
    first = run_job(tmp_path, config, "first")
    wait_until(lambda: delta_batches(stored / "table") or first.returncode is not None, WAIT_S,
               "the first run to commit a batch")
    assert first.returncode is None, first.tail()

    second = run_job(tmp_path, config, "second")
    output = finished(first, ExitCode.SUPERSEDED)
    marker: dict[str, Any] = json.loads((stored / "checkpoint" / "synclib" / "run").read_text())
    lines = [line for line in output.splitlines() if line.startswith("forwarder: ")]
    assert len(lines) == 1, output[-6000:]
    for named in (f"checkpoint s3a://{bucket}/checkpoint", marker["run_id"], marker["host"],
                  f"pid {marker['pid']}", marker["started"], "stop one of the two deployments"):
        assert named in lines[0], lines[0]
    assert f"run {marker['run_id']} (host" in second.output()

    at_takeover = len(delta_batches(stored / "table"))
    released = world.committed()
    wait_until(lambda: verify_table(stored / "table", world.events, released).covers(released)
               or second.returncode is not None, WAIT_S, "the second run to forward what the leader released since")
    committed = world.finish_producing()
    wait_until(lambda: verify_table(stored / "table", world.events, committed).covers(committed)
               or second.returncode is not None, WAIT_S, "the second run to forward everything")
    stopped(second)

    verdict = verify_table(stored / "table", world.events, committed)
    assert verdict.holds_exactly(committed), verdict
    batches = delta_batches(stored / "table")
    assert len(batches) > at_takeover
    assert len({app for app, _ in batches}) == 1  # one checkpoint, one query
    assert [batch for _, batch in batches] == list(range(batches[0][1], batches[0][1] + len(batches))), batches
    versions = commit_versions(stored / "table")
    assert versions == list(range(len(versions))), versions  # no commit overwritten or missing

    delta_rs = read_arrow(f"s3://{bucket}/table", columns=["partition", "offset"])
    assert delta_rs is not None and delta_rs.num_rows == verdict.rows
    by_spark = spark.read.format("delta").load(f"s3a://{bucket}/table")
    assert by_spark.count() == verdict.rows
    assert by_spark.select("partition", "offset").distinct().count() == verdict.rows

    # Spark's checkpoint entries PUT in place (synclib's PutIfAbsentCheckpointFileManager), not renamed
    spark_files = [r for r in s3.log() if r.key.startswith(f"{bucket}/checkpoint/")
                   and not r.key.startswith(f"{bucket}/checkpoint/synclib")]
    assert [r for r in spark_files if r.method == "PUT" and r.key == f"{bucket}/checkpoint/commits/0"]
    assert not [r for r in spark_files if ".tmp" in r.key or kind(r) == "DELETE"]
    assert "Could not use FileContext API" not in first.output() + second.output()
