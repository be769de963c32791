"""The forwarder's console output from Spark's progress JSON and the source's status (no Spark)."""

from __future__ import annotations

import json
from typing import Any

from synclib.app.progress import ProgressReporter, format_summary
from synclib.delta.table import TableSummary
from synclib.source.state import SynchronizedPartitionState
from synclib.source.status import PartitionStatus, PlannerStatus


def status(state: str, follower: int, leader: int | None, hwm: int, stale: bool = False) -> PlannerStatus:
    return PlannerStatus(partitions=(PartitionStatus(
        "events", 0, SynchronizedPartitionState(state), follower_offset=follower, leader_offset=leader,
        high_watermark=hwm, stale=stale),))


def progress(batch: int, second: int, rows: int, ran: bool = True) -> dict[str, Any]:
    durations = {"triggerExecution": 40, **({"addBatch": 30} if ran else {})}
    return {"batchId": batch, "timestamp": f"2026-01-01T10:00:{second:02d}.000Z", "numInputRows": rows,
            "durationMs": durations}


def test_progress_shows_each_batch_and_the_gate_and_the_table_when_a_partition_waits() -> None:
    now = [0.0]
    reporter = ProgressReporter(table_every_s=10, clock=lambda: now[0])

    first = reporter.update([progress(0, 1, 5)], status("LOCAL_BEHIND", 5, 8, 20))
    again = reporter.update([progress(0, 1, 5), progress(1, 2, 3)], status("SYNCHRONIZED", 8, 8, 20))
    idle = reporter.update([progress(2, 12, 0, ran=False)], status("REMOTE_BEHIND", 8, 6, 25, stale=True))

    assert first[0] == ("10:00:01 batch 0: 5 rows in 40 ms (5 this run); "
                        "held back for the leader: 12; ready: 3; 1 LOCAL_BEHIND")
    assert first[1].splitlines()[1].split() == ["events", "0", "LOCAL_BEHIND", "5", "8", "20", "12"]
    assert again == ["10:00:02 batch 1: 3 rows in 40 ms (8 this run); "
                     "held back for the leader: 12; ready: 0; 1 SYNCHRONIZED"]
    assert idle[0] == ("10:00:12 idle: nothing newly committed; "
                       "held back for the leader: 17; ready: 0; 1 REMOTE_BEHIND; 1 STALE")
    assert idle[1].splitlines()[1].split()[-1] == "STALE"
    assert (reporter.batches, reporter.rows) == (2, 8)


def test_progress_before_the_first_planning_and_with_malformed_commit_log_messages() -> None:
    reporter = ProgressReporter()

    early = reporter.update([progress(0, 1, 0, ran=False)], None)
    skipped = PlannerStatus.parse(json.dumps({**status("SYNCHRONIZED", 8, 8, 8).to_json(),
                                       "commit_log": {"applied": 2, "skipped_malformed": 3}}))
    later = reporter.update([progress(1, 2, 0, ran=False)], skipped)

    assert early == ["10:00:01 idle: nothing newly committed; no partitions yet"]
    assert later[0].endswith("; 1 SYNCHRONIZED; 3 malformed commit-log messages skipped")


def test_the_summary_compares_what_was_written_with_what_the_leader_committed() -> None:
    summary = TableSummary(path="/t", version=3, rows=30, app_id="synclib-q", batch_id=3,
                           offsets={("events", 0): 20, ("events", 1): 10})
    state = PlannerStatus.parse(json.dumps({"partitions": [
        {"topic": "events", "partition": 0, "state": "LOCAL_BEHIND", "follower_offset": 18,
         "leader_offset": 20, "high_watermark": 25, "stale": False},
        {"topic": "events", "partition": 1, "state": "LOCAL_BEHIND", "follower_offset": 8,
         "leader_offset": 12, "high_watermark": 12, "stale": False}]}))

    text = format_summary("/data/events", summary, state, "forwarder stopped (done)")

    lines = text.splitlines()
    assert lines[:2] == ["forwarder stopped (done)",
                         "Delta table /data/events: version 3, 30 rows, last batch 3 of synclib-q"]
    assert [line.split() for line in lines[3:]] == [
        ["events", "0", "19", "19", "25", "5", "SYNCHRONIZED"],
        ["events", "1", "9", "11", "12", "0", "LOCAL_BEHIND"]]
    assert format_summary("/t", None, None, "done").endswith("not created yet (the leader committed nothing)")


def many(count: int) -> PlannerStatus:
    """`count` partitions holding back about their number: every 64th (from 7) stale and behind
    its follower, the other odd ones synchronized, the even ones with 5 ready."""
    def one(i: int) -> PartitionStatus:
        stale = i % 64 == 7
        state = "REMOTE_BEHIND" if stale else "SYNCHRONIZED" if i % 2 else "LOCAL_BEHIND"
        return PartitionStatus("events", i, SynchronizedPartitionState(state), follower_offset=100,
                               leader_offset=90 if stale else 100 if i % 2 else 105, high_watermark=100 + i,
                               stale=stale)
    return PlannerStatus(partitions=tuple(one(i) for i in range(count)))


def test_hundreds_of_partitions_list_the_stale_and_most_held_back_and_summarise_the_rest() -> None:
    reporter = ProgressReporter(table_rows=6)
    state = many(256)

    line, table_text = reporter.update([progress(0, 1, 5)], state)

    held = sum(p.held_back or 0 for p in state.partitions)
    assert line == (f"10:00:01 batch 0: 5 rows in 40 ms (5 this run); held back for the leader: {held}; "
                    "ready: 631; 128 LOCAL_BEHIND, 4 REMOTE_BEHIND, 124 SYNCHRONIZED; 4 STALE")
    rows = table_text.splitlines()
    # stale first (the most held back of them first), then the others by what they hold back
    assert [row.split()[1] for row in rows[1:7]] == ["199", "135", "71", "7", "255", "253"]
    shown_held = sum(int(row.split()[6]) for row in rows[1:7])
    assert rows[7:] == [f"... 250 more partitions (128 LOCAL_BEHIND, 122 SYNCHRONIZED), "
                        f"holding back {held - shown_held}; every partition: `status --json`, "
                        "or logging.partition_table_rows: null"]
    assert len(ProgressReporter(table_rows=None).update([progress(0, 1, 5)], state)[1].splitlines()) == 257


def test_the_summary_of_hundreds_of_partitions_lists_the_most_held_back() -> None:
    state = many(64)
    summary = TableSummary(path="/t", version=1, rows=6400, app_id="synclib-q", batch_id=1,
                           offsets={(p.topic, p.partition): 100 for p in state.partitions})

    lines = format_summary("/t", summary, state, "done", rows=3).splitlines()

    assert [line.split()[1] for line in lines[3:6]] == ["63", "61", "59"]
    assert lines[6].startswith("... 61 more partitions (")
    assert len(format_summary("/t", summary, state, "done", rows=None).splitlines()) == 3 + 64
