"""The delta-rs sink's batch commits appended to a local table's log by synclib
(`synclib.delta.log_append`) once the table's newest version is its own: the same actions as
deltalake's commits, read back by deltalake; anything else at that version sends the commit
through deltalake."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from pyspark.sql.types import LongType, StringType, StructField, StructType

from synclib.delta.table import read_arrow, read_table_offsets
from synclib.delta.writer import DeltaStreamWriter
from tests.spark.test_sink import fake_checkpoint

SCHEMA = StructType([StructField("name", StringType()), StructField("n", LongType())])
NAMES = ["a b:c%d/é=", None, "plain"]


def log(table: str, version: int) -> dict[str, list[dict[str, Any]]]:
    actions: dict[str, list[dict[str, Any]]] = {}
    for line in (Path(table) / "_delta_log" / f"{version:020d}.json").read_text().splitlines():
        ((kind, action),) = json.loads(line).items()
        actions.setdefault(kind, []).append(action)
    return actions


def writer_of(tmp_path: Path, batches: int, **options: str) -> tuple[DeltaStreamWriter, str]:
    location = fake_checkpoint(tmp_path / "checkpoint", "q", [f'{{"t":{{"0":{3 * (b + 1)}}}}}' for b in range(batches)])
    table = str(tmp_path / "table")
    return DeltaStreamWriter(SCHEMA, {"path": table, "checkpointLocation": location, "partitionBy": '["name"]',
                                      **options}), table


def commit(writer: DeltaStreamWriter, batch: int) -> None:
    rows = pa.record_batch({"name": pa.array(NAMES, pa.large_string()), "n": [3 * batch + i for i in range(3)]})
    writer.commit([writer.write(iter([rows]))], batch)


def engine(table: str, version: int) -> str:
    (info,) = log(table, version)["commitInfo"]
    return str(info["clientVersion"]).split("-")[0]


def test_batches_after_the_tables_own_newest_commit_are_appended_as_deltalake_writes_them(tmp_path: Path) -> None:
    writer, table = writer_of(tmp_path, 3, logCheckpoints="false")

    for batch in range(3):
        commit(writer, batch)

    assert [engine(table, v) for v in range(3)] == ["delta", "synclib", "synclib"]  # deltalake creates it
    paths = [sorted(a["path"].rsplit("/", 1)[0] for a in log(table, v)["add"]) for v in range(3)]
    assert paths[0] == paths[1] == paths[2]  # partition directories encoded as deltalake encodes them
    assert [log(table, v)["txn"][0]["version"] for v in range(3)] == [0, 1, 2]
    assert log(table, 2)["commitInfo"][0]["synclib.offsets"] == '{"t":{"0":9}}'
    fresh = DeltaTable(table)
    assert (fresh.version(), fresh.transaction_version("synclib-q")) == (2, 2)
    assert read_table_offsets(table) == {("t", 0): 9}
    data = read_arrow(table).sort_by("n")
    assert data.to_pydict() == {"name": NAMES * 3, "n": list(range(9))}


def test_a_version_another_commit_took_sends_the_batch_through_deltalake(tmp_path: Path) -> None:
    writer, table = writer_of(tmp_path, 3, logCheckpoints="false")
    commit(writer, 0)
    commit(writer, 1)
    write_deltalake(table, pa.table({"name": pa.array(["other"], pa.large_string()), "n": [100]}),
                    mode="append", partition_by=["name"])  # version 2: not the stream's

    commit(writer, 2)
    commit(writer, 2)  # replayed: skipped

    assert [engine(table, v) for v in range(4)] == ["delta", "synclib", "delta", "delta"]
    assert "txn" not in log(table, 2)
    assert log(table, 3)["txn"][0]["version"] == 2
    fresh = DeltaTable(table)
    assert (fresh.version(), fresh.transaction_version("synclib-q")) == (3, 2)
    assert sorted(read_arrow(table)["n"].to_pylist()) == [*range(9), 100]


def test_a_log_checkpoint_after_the_streams_newest_commit_sends_the_batch_through_deltalake(tmp_path: Path) -> None:
    """Other commits after the stream's, checkpointed, their entries gone with the expired log: the
    version after the stream's commit is free again, and must not be taken."""
    writer, table = writer_of(tmp_path, 3, logCheckpoints="false")
    commit(writer, 0)
    commit(writer, 1)  # version 1, appended
    for n in (100, 101):  # versions 2 and 3
        write_deltalake(table, pa.table({"name": pa.array(["other"], pa.large_string()), "n": [n]}),
                        mode="append", partition_by=["name"])
    DeltaTable(table).create_checkpoint()
    (Path(table) / "_delta_log" / f"{2:020d}.json").unlink()

    commit(writer, 2)

    assert not (Path(table) / "_delta_log" / f"{2:020d}.json").exists()
    assert log(table, 4)["txn"][0]["version"] == 2
    assert DeltaTable(table).transaction_version("synclib-q") == 2
    assert sorted(read_arrow(table)["n"].to_pylist()) == [*range(9), 100, 101]


def test_versions_due_for_a_log_checkpoint_commit_through_deltalake_when_the_commits_write_them(
        tmp_path: Path) -> None:
    writer, table = writer_of(tmp_path, 7)  # logCheckpoints defaults to true
    commit(writer, 0)
    DeltaTable(table).alter.set_table_properties({"delta.checkpointInterval": "3"})  # version 1

    for batch in range(1, 7):  # versions 2..7
        commit(writer, batch)

    # deltalake writes a log checkpoint at version v when v + 1 is a multiple of the interval
    assert [engine(table, v) for v in range(8)] == [
        "delta", "delta", "delta", "synclib", "synclib", "delta", "synclib", "synclib"]
    checkpoints = sorted(p.name for p in (Path(table) / "_delta_log").glob("*.checkpoint.parquet"))
    assert checkpoints == [f"{2:020d}.checkpoint.parquet", f"{5:020d}.checkpoint.parquet"]
    fresh = DeltaTable(table)
    assert (fresh.version(), fresh.transaction_version("synclib-q")) == (7, 6)
    assert sorted(read_arrow(table)["n"].to_pylist()) == list(range(21))
