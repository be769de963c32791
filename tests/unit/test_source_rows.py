"""Which offsets a micro-batch is read again with: Spark's offset log, and for batch 0 the
source's initialOffsetsFile (no Spark needed to get there)."""

from __future__ import annotations

from pathlib import Path

import pytest

from synclib.dead_letters.source_rows import MicroBatchSourceRows
from synclib.spark_checkpoint import CheckpointError

OPTIONS = {"kafka.bootstrap.servers": "k:9092", "subscribe": "events", "commitLogTopic": "log",
           "synchronizeCommitGroups": "snuba"}


def offset_log(checkpoint: Path, batch_id: int, offsets: str) -> None:
    (checkpoint / "offsets").mkdir(parents=True, exist_ok=True)
    (checkpoint / "offsets" / str(batch_id)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{offsets}\n')


def test_batch_zero_without_the_initial_offsets_file_names_the_option(tmp_path: Path) -> None:
    offset_log(tmp_path, 0, '{"events":{"0":5}}')
    rows = MicroBatchSourceRows(OPTIONS, str(tmp_path))

    with pytest.raises(CheckpointError, match=r"batch 0's start offsets are unknown: .* initialOffsetsFile"):
        rows(None, 0)  # type: ignore[arg-type]  # no session needed to find the offsets


def test_a_batch_missing_from_the_offset_log_is_named(tmp_path: Path) -> None:
    offset_log(tmp_path, 0, '{"events":{"0":5}}')
    rows = MicroBatchSourceRows({**OPTIONS, "InitialOffsetsFile": str(tmp_path / "initial.json")}, str(tmp_path))

    with pytest.raises(CheckpointError, match="no offset log entry for batch 3"):
        rows(None, 3)  # type: ignore[arg-type]
