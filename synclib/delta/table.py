"""What a synclib Delta table holds, read from its log with delta-rs (no Spark needed).

Every synclib commit carries `synclib.*` metadata (`synclib.delta.commits`): top-level commit
info when written by delta-rs, JSON in `userMetadata` when written by delta-spark. The
newest one says which Kafka offsets the table holds, so the job can resume from it and
the status command can report it without starting Spark.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from pyarrow import fs

from synclib.delta import column_mapping
from synclib.locations import filesystem, normalize_location
from synclib.offsets import PartitionOffsets, parse_offsets_json
from synclib.store_retry import delta_storage_options

META_APP_ID = "synclib.appId"
META_BATCH_ID = "synclib.batchId"
META_OFFSETS = "synclib.offsets"
META_VERSION = "synclib.version"
DATE_COLUMN = "date"  # the partition column `partition_by_date` adds (the UTC date of `timestamp`)

_HISTORY_PAGES = (16, 256, None)  # commits read per step of the history walk (None: all)
# Tables kept open by `current_table`, with when each was last brought up to date (monotonic).
_open_tables: dict[str, tuple[DeltaTable, float]] = {}
# A table brought up to date this recently is known current when its next version's commit
# file is absent (log cleanup, which could remove that file, only reaches far older versions).
_TRUST_NEXT_VERSION_S = 60.0


def open_table(path: str) -> DeltaTable | None:
    """The table at `path` (on S3 with the job's retry policy), None when there is none."""
    uri = normalize_location(path)
    options = delta_storage_options() if uri.startswith("s3://") else None
    return DeltaTable(uri, storage_options=options) if DeltaTable.is_deltatable(uri, options) else None


def read_arrow(path: str, columns: list[str] | None = None) -> pa.Table | None:
    """The rows of the Delta table at `path` (only `columns`, when given) as one Arrow table; None
    when there is no table. The one way synclib reads a table's data: the Parquet files are read
    through pyarrow's own filesystem for the location (`synclib.locations.filesystem`: on S3, the
    `storage.s3` settings' S3 filesystem). deltalake's default reads them through a
    filesystem written in Python, which pyarrow's I/O threads may still call while the
    interpreter exits: the process then aborts (SIGABRT, `terminate called without an active
    exception`; deltalake 1.6 with pyarrow 26, delta-io/delta-rs#2184)."""
    table = open_table(path)
    if table is None:
        return None
    files, root = filesystem(path)
    dataset = table.to_pyarrow_dataset(filesystem=fs.SubTreeFileSystem(root, files))
    if not column_mapping.is_mapped(dataset.schema):
        return dataset.to_table(columns=columns)
    # deltalake's dataset reads a column-mapped table's files by the logical names (all null):
    # read them by the physical names, then name the columns as the table does.
    # Partition columns are not in the files: deltalake's fragments name them logically.
    partitions = set(table.metadata().partition_columns)
    logical = column_mapping.logical_schema(dataset.schema)
    physical = pa.schema([logical_field if logical_field.name in partitions else physical_field for logical_field,
                          physical_field in zip(logical, column_mapping.physical_schema(dataset.schema), strict=True)])
    wanted = [logical.field(name) for name in columns] if columns is not None else list(logical)
    data = dataset.replace_schema(physical).to_table(
        columns=[physical.field(logical.get_field_index(f.name)).name for f in wanted])
    return column_mapping.view_as(data, pa.schema(wanted))


def current_table(path: str) -> DeltaTable | None:
    """The table at `path` at its newest version, kept open in this process.

    A call reads only the commits added since the previous one (`update_incremental`), or
    nothing but two file lookups when there are none (the cached version's commit file, to
    notice a table replaced under the same path, and the next version's). delta-rs does not
    advance a table by its own commits, and each update lists the log: on local and HDFS
    storage that costs time in proportion to the log's length (the sink avoids it on local
    storage, `synclib.delta.log_append`).
    """
    uri = normalize_location(path)
    cached = _open_tables.get(path)
    table = None
    if cached is not None:
        table, updated = cached
        files, root = filesystem(uri)
        log = f"{root}/_delta_log"
        if files.get_file_info(f"{log}/{table.version():020d}.json").type == fs.FileType.NotFound:
            table = None
        elif (time.monotonic() - updated > _TRUST_NEXT_VERSION_S
              or files.get_file_info(f"{log}/{table.version() + 1:020d}.json").type != fs.FileType.NotFound):
            table.update_incremental()
    if table is None:
        table = open_table(path)
        if table is None:
            _open_tables.pop(path, None)
            return None
    _open_tables[path] = (table, time.monotonic())
    return table


def holds_batch(table: DeltaTable, app_id: str, batch_id: int) -> bool:
    """Whether the table holds micro-batch `batch_id` of `app_id`: its application transaction's
    version is at or above it (batches commit in order, so every earlier one is there too)."""
    version = table.transaction_version(app_id)
    return version is not None and version >= batch_id


def synclib_metadata(commit: Mapping[str, Any]) -> dict[str, Any] | None:
    """The `synclib.*` metadata of a history entry: top-level (delta-rs) or in userMetadata."""
    if META_OFFSETS in commit:
        return {k: v for k, v in commit.items() if k.startswith("synclib.")}
    user = commit.get("userMetadata")
    if isinstance(user, str):
        try:
            parsed = json.loads(user)
        except ValueError:
            return None
        if isinstance(parsed, dict) and META_OFFSETS in parsed:
            return parsed
    return None


def latest_synclib_commit(table: DeltaTable, app_id: str | None = None,
                          batch_id: int | None = None) -> dict[str, Any] | None:
    """The history entry (`version`, `timestamp`, ...) of the newest commit carrying synclib
    metadata (of batch `batch_id` of `app_id`, when given), searched from the newest commits
    backwards (16, then 256, then all): maintenance commits (compaction, vacuum) carry none and
    are passed over. Maintenance never removes the log entry of the newest synclib commit (see
    `synclib.delta.maintenance`), so a table with synclib commits always yields one; an older
    batch's entry may be gone with the expired log."""
    for limit in _HISTORY_PAGES:
        history = table.history(limit)
        for commit in history:
            metadata = synclib_metadata(commit)
            if metadata is not None and (app_id is None or (
                    metadata.get(META_APP_ID) == app_id and int(metadata.get(META_BATCH_ID, -1)) == batch_id)):
                return commit
        if limit is None or len(history) < limit:
            return None
    return None


def recent_batches(table: DeltaTable, limit: int) -> list[tuple[float, PartitionOffsets]]:
    """The synclib commits among the table's newest `limit` commits, oldest first: when each was
    committed (seconds since the epoch) and the Kafka offsets it holds up to."""
    batches = []
    for commit in table.history(limit):
        offsets = parse_offsets(synclib_metadata(commit))
        if offsets is not None and commit.get("timestamp") is not None:
            batches.append((int(commit["version"]), int(commit["timestamp"]) / 1000, offsets))
    return [(committed, offsets) for _, committed, offsets in sorted(batches, key=lambda batch: batch[0])]


def latest_metadata(table: DeltaTable) -> dict[str, Any] | None:
    """The newest synclib commit's `synclib.*` metadata; None when the table has none."""
    commit = latest_synclib_commit(table)
    return None if commit is None else synclib_metadata(commit)


def parse_offsets(metadata: Mapping[str, Any] | None) -> PartitionOffsets | None:
    """The Kafka offsets in a commit's `synclib.*` metadata (Spark's JSON there); None without."""
    if metadata is None or not metadata.get(META_OFFSETS):
        return None
    return parse_offsets_json(metadata[META_OFFSETS])


def read_table_offsets(path: str) -> PartitionOffsets | None:
    """The Kafka offsets of the table's latest synclib commit; None when the table does not
    exist or has none."""
    table = open_table(path)
    return None if table is None else parse_offsets(latest_metadata(table))


@dataclass(frozen=True)
class TableSummary:
    """A table's latest version, its rows and the synclib batch it holds: the job's summary and
    the status command's `table`."""

    path: str
    version: int
    rows: int | None  # from the files' stats; None when a file has none
    app_id: str | None
    batch_id: int | None
    offsets: PartitionOffsets | None

    def to_json(self) -> dict[str, Any]:
        """The status command's `table` in its JSON."""
        return {"path": self.path, "version": self.version, "rows": self.rows, "batch_id": self.batch_id}


def table_summary(path: str, table: DeltaTable | None = None) -> TableSummary | None:
    """Version, row count and latest synclib batch of the table at `path` (`table`: it, opened
    already); None when it does not exist."""
    table = table if table is not None else open_table(path)
    if table is None:
        return None
    records = pa.table(table.get_add_actions(flatten=True))["num_records"]
    rows = None if records.null_count else int(pc.sum(records).as_py() or 0)
    metadata = latest_metadata(table) or {}
    batch_id = metadata.get(META_BATCH_ID)
    return TableSummary(path=path, version=table.version(), rows=rows, app_id=metadata.get(META_APP_ID),
                        batch_id=None if batch_id is None else int(batch_id),
                        offsets=parse_offsets(metadata))
