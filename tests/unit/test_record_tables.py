"""The docs' table renderers (benchmarks/record_tables.py) on runs written here; the records they
render from, kept and joined: test_records.py."""

from __future__ import annotations

from benchmarks.record_tables import s3_faults_table


def test_s3_faults_are_a_row_per_window_and_the_outage_with_a_column_per_engine() -> None:
    def window(fault: str, exits: list[str], moved: float | None) -> dict[str, object]:
        return {"fault": fault, "fraction": 0.3, "seconds": 20.0, "requests_faulted": 12, "exits": exits,
                "moved_after_s": moved}

    outage = {"seconds": 75.0, "exit_code": 4, "ended_after_s": 22.0, "resumed_after_s": 25.8,
              "line": "forwarder: object store unavailable: s3://b at http://h: GET run failed for 20.0 s (9 tries)"}
    runs = [{"engine": "delta-rs", "windows": [window("slow-down", [], 0.5)], "outage": outage,
             "exactly_once": True, "rows": 72490},
            {"engine": "delta-spark", "windows": [window("slow-down", ["exit 1: forwarder: the query failed"], None)],
             "outage": {**outage, "exit_code": None}, "exactly_once": False, "rows": 10}]

    lines = s3_faults_table({"runs": [{"s3_faults": runs}]}).splitlines()

    assert lines[0] == "| fault | delta-rs | delta-spark |"
    assert lines[2] == ("| slow-down, 20 s, 30% of the requests | rode it out (12 requests met it); the table moved "
                        "0.5 s after | **exited** 1x (exit 1: forwarder: the query failed) |")
    assert lines[3].startswith("| every request 503 for 75 s | exit 4 after 22 s, one line: `forwarder: object store "
                               "unavailable: s3://b at http://h: GET run failed for 20.0 s`; restarted")
    assert "| **did not exit**; restarted" in lines[3]
    assert lines[4] == "| exactly once against the leader's commits | yes (72,490 rows) | **no** (10 rows) |"
