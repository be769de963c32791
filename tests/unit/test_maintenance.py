"""A maintenance pass is one log line when it did something, and only a DEBUG line when it did not
(synclib/delta/maintenance.py; what a pass does to a table: tests/e2e/test_maintenance.py)."""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from synclib.delta.maintenance import PassReport, timed_pass


def nothing(table: DeltaTable, now: float, report: PassReport) -> None:
    report.version = table.version()


def compacting(table: DeltaTable, now: float, report: PassReport) -> None:
    nothing(table, now, report)
    report.compacted_files, report.written_files = 2, 1


@pytest.mark.parametrize(("work", "level"), [(nothing, logging.DEBUG), (compacting, logging.INFO)])
def test_a_pass_is_logged_at_info_only_when_it_did_something(tmp_path: Path, caplog: pytest.LogCaptureFixture,
                                                             work, level: int) -> None:
    write_deltalake(str(tmp_path), pa.table({"n": [1]}))
    caplog.set_level(logging.DEBUG, logger="synclib.delta.maintenance")

    timed_pass(str(tmp_path), None, work)

    assert [(r.levelno, r.getMessage().split(";")[0]) for r in caplog.records
            if r.name == "synclib.delta.maintenance"] == [
        (level, f"maintenance: compacted {2 if level == logging.INFO else 0} files (0.0 MiB) into "
                f"{1 if level == logging.INFO else 0}")]
