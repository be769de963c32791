"""The status contract (synclib/source/status.py) shared by the planner, the console output and the status command."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from synclib.leader.commitlog import Commit
from synclib.source.state import LOCAL_BEHIND, UNKNOWN
from synclib.source.status import (
    CommitLogStatus,
    PartitionStatus,
    PlannedBatch,
    PlannerEvent,
    PlannerStatus,
    StatusFormatError,
    group_offsets,
    leader_commit_age,
)

FULL = PlannerStatus(
    updated_at=1767261600.5,
    partitions=(
        PartitionStatus("events", 0, LOCAL_BEHIND, follower_offset=5, leader_offset=8,
                        leader_offsets={"snuba": 8, "search": 9}, high_watermark=20, stale=False,
                        seconds_since_leader_commit=1.5),
        PartitionStatus("events", 1, UNKNOWN, follower_offset=3, leader_offsets={"snuba": 4, "search": None}),
    ),
    commit_log=CommitLogStatus(applied=3, skipped_malformed=1, last_commit_time={"snuba": 1767261599.0},
                               last_error="KafkaTimeoutError: no answer"),
    batches=(PlannedBatch({"events": {"0": 8, "1": 3}}, ((1767261599.25, 2), (1767261599.5, 1))),),
    events=(PlannerEvent(7, 1767261600.0, "INFO", "synclib.source.datasource", "events[0]: UNKNOWN -> LOCAL_BEHIND"),),
)


def test_to_json_and_back_is_the_same_status_with_the_derived_counts_written() -> None:
    document = json.loads(json.dumps(FULL.to_json()))

    assert PlannerStatus.parse(json.dumps(document)) == FULL
    first = document["partitions"][0]
    assert (first["state"], first["leader_offsets"]) == ("LOCAL_BEHIND", {"snuba": 8, "search": 9})
    assert (first["lag"], first["held_back"], first["ready"]) == (15, 12, 3)
    assert (document["partitions"][1]["lag"], document["partitions"][1]["held_back"]) == (None, None)
    assert document["commit_log"]["skipped_malformed"] == 1


def test_absent_keys_take_their_defaults() -> None:
    status = PlannerStatus.parse(json.dumps({"partitions": [{"topic": "t", "partition": 2, "state": "UNKNOWN"}]}))

    assert status == PlannerStatus(partitions=(PartitionStatus("t", 2, UNKNOWN),))
    assert PlannerStatus.parse(json.dumps({})) == PlannerStatus()
    assert status.partitions[0].stale is None and status.commit_log.applied == 0


@pytest.mark.parametrize(("document", "error"), [
    ([], "status: Input should be an object, got []"),
    ({"partitions": {}}, "status.partitions: Input should be a valid array, got {}"),
    ({"partitions": [{"partition": 0, "state": "UNKNOWN"}]}, "status.partitions[0].topic: missing"),
    ({"partitions": [{"topic": "t", "partition": True, "state": "UNKNOWN"}]},
     "status.partitions[0].partition: Input should be a valid integer, got True"),
    ({"partitions": [{"topic": "t", "partition": 0, "state": "WAITING"}]},
     "status.partitions[0].state: Input should be 'UNKNOWN', 'LOCAL_BEHIND', 'REMOTE_BEHIND' or 'SYNCHRONIZED', "
     "got 'WAITING'"),
    ({"partitions": [{"topic": "t", "partition": 0, "state": "UNKNOWN", "leader_offsets": {"g": "5"}}]},
     "status.partitions[0].leader_offsets.g: Input should be a valid integer, got '5'"),
    ({"commit_log": {"skipped_malformed": 1.5}},
     "status.commit_log.skipped_malformed: Input should be a valid integer, got 1.5"),
])
def test_a_document_of_another_shape_is_refused_naming_the_value(document: object, error: str) -> None:
    with pytest.raises(StatusFormatError) as raised:
        PlannerStatus.parse(json.dumps(document))

    assert str(raised.value) == error


def test_read_returns_none_until_a_whole_document_is_there_and_write_replaces_it(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "status.json"
    assert PlannerStatus.read(str(path)) is None
    path.parent.mkdir()
    path.write_text(json.dumps(FULL.to_json())[:40])  # a writer that bypassed `write`, caught mid-way
    assert PlannerStatus.read(str(path)) is None

    FULL.write(str(path))

    assert PlannerStatus.read(str(path)) == FULL
    assert os.listdir(path.parent) == ["status.json"]


def test_group_offsets_and_the_age_of_the_gating_groups_newest_commit() -> None:
    tp = ("events", 0)
    commits = {"snuba": {tp: Commit("snuba", "events", 0, 8, orig_message_ts=100.0)},
               "search": {tp: Commit("search", "events", 0, 6, orig_message_ts=90.0)}}
    untimed = {"snuba": {tp: Commit("snuba", "events", 0, 8)}}

    assert group_offsets(tp, commits) == {"snuba": 8, "search": 6}
    assert group_offsets(("events", 1), commits) == {"snuba": None, "search": None}
    assert leader_commit_age(tp, commits, now=102.04) == 12.0
    assert leader_commit_age(tp, {**commits, "other": {}}, now=102.0) is None
    assert leader_commit_age(tp, untimed, now=102.0) is None
