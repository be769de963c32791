"""The run marker (`synclib.spark_checkpoint`: the newest run of a checkpoint wins) and the sink's
two checks: a commit by a run that was taken over, and a replayed batch whose offsets differ from
those the table recorded for it. Two job runs at once: tests/e2e/test_two_runs.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from deltalake import DeltaTable

from synclib import spark_checkpoint
from synclib.delta.commits import ReplayMismatch
from synclib.delta.table import read_table_offsets
from synclib.delta.writer import AddedFiles, DeltaStreamWriter
from synclib.spark_checkpoint import RunMarker, RunSuperseded, check_run, current_run, start_run, superseded
from tests.spark.test_sink import KAFKA_SCHEMA, fake_checkpoint


def test_the_newest_run_owns_the_checkpoint_and_the_other_gets_one_line_naming_it(tmp_path: Path) -> None:
    location = str(tmp_path / "checkpoint")
    first, second = RunMarker.new(), RunMarker.new()
    assert current_run(location) is None

    start_run(location, first)
    check_run(location, first.run_id)
    assert current_run(location) == first
    assert first.pid == os.getpid() and first.host and first.started.endswith("Z")

    start_run(location, second)
    check_run(location, second.run_id)
    with pytest.raises(RunSuperseded) as raised:
        check_run(location, first.run_id)
    line = str(raised.value)
    assert "\n" not in line
    for named in (location, second.run_id, second.host, f"pid {second.pid}", second.started, first.run_id):
        assert named in line
    assert "stop one of the two deployments" in line
    assert json.loads((tmp_path / "checkpoint" / "synclib" / "run").read_text())["run_id"] == second.run_id


def test_a_run_whose_marker_is_gone_or_unreadable_is_told_so(tmp_path: Path) -> None:
    location = str(tmp_path / "checkpoint")
    assert "its run marker is gone" in (superseded(location, "r1") or "")
    marker = tmp_path / "checkpoint" / "synclib" / "run"
    marker.parent.mkdir(parents=True)
    marker.write_text("{not json")
    assert current_run(location) is None
    assert "its run marker is gone" in (superseded(location, "r1") or "")


def test_a_taken_over_run_commits_nothing(tmp_path: Path) -> None:
    location = fake_checkpoint(tmp_path / "checkpoint", "q1", ['{"events":{"0":7}}', '{"events":{"0":9}}'])
    table = str(tmp_path / "table")
    ours, theirs = RunMarker.new(), RunMarker.new()
    start_run(location, ours)
    writer = DeltaStreamWriter(KAFKA_SCHEMA, {"path": table, "checkpointLocation": location, "runId": ours.run_id})
    writer.commit([AddedFiles([])], 0)

    start_run(location, theirs)
    with pytest.raises(RunSuperseded, match=theirs.run_id):
        writer.commit([AddedFiles([])], 1)

    assert DeltaTable(table).version() == 0
    assert read_table_offsets(table) == {("events", 0): 7}


def test_a_replayed_batch_must_end_where_the_table_says_it_ended(tmp_path: Path) -> None:
    location = fake_checkpoint(tmp_path / "checkpoint", "q2", ['{"events":{"0":7}}'])
    table = str(tmp_path / "table")
    writer = DeltaStreamWriter(KAFKA_SCHEMA, {"path": table, "checkpointLocation": location})
    writer.commit([AddedFiles([])], 0)
    writer.commit([AddedFiles([])], 0)  # the same batch again: skipped
    assert DeltaTable(table).version() == 0

    # another run planned batch 0 to other offsets and wrote them over the offset log
    (tmp_path / "checkpoint" / "offsets" / "0").write_text('v1\n{}\n{"events":{"0":5}}\n')
    with pytest.raises(ReplayMismatch) as raised:
        writer.commit([AddedFiles([])], 0)
    line = str(raised.value)
    assert "\n" not in line and "batch 0 of synclib-q2" in line
    assert '{"events":{"0":7}}' in line and '{"events":{"0":5}}' in line
    assert DeltaTable(table).version() == 0
    assert spark_checkpoint.app_id(location) == "synclib-q2"
