"""What a synclib Delta table holds, read from its log with delta-rs (no Spark needed).

Every synclib commit carries `synclib.*` metadata (see `synclib.delta.writer`): top-level commit
info when written by delta-rs, JSON in `userMetadata` when written by delta-spark. The
newest one says which Kafka offsets the table holds, so the job can resume from it and
the status command can report it without starting Spark.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Optional

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from synclib.delta import checkpoint

META_APP_ID = "synclib.appId"
META_BATCH_ID = "synclib.batchId"
META_OFFSETS = "synclib.offsets"
META_VERSION = "synclib.version"

_HISTORY_PAGE = 16


def open_table(path: str) -> Optional[DeltaTable]:
    uri = checkpoint.normalize_location(path)
    return DeltaTable(uri) if DeltaTable.is_deltatable(uri) else None


def _synclib_metadata(commit: Mapping[str, Any]) -> Optional[dict[str, Any]]:
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


def latest_metadata(table: DeltaTable) -> Optional[dict[str, Any]]:
    """The newest synclib commit's `synclib.*` metadata (the last 16 commits, then all history)."""
    limit: Optional[int] = _HISTORY_PAGE
    while True:
        history = table.history(limit)
        for commit in history:
            found = _synclib_metadata(commit)
            if found is not None:
                return found
        if limit is None or len(history) < limit:
            return None
        limit = None


def parse_offsets(metadata: Optional[Mapping[str, Any]]) -> Optional[dict[str, Any]]:
    if metadata is None or not metadata.get(META_OFFSETS):
        return None
    return json.loads(metadata[META_OFFSETS])


def read_table_offsets(path: str) -> Optional[dict[str, Any]]:
    """The source offsets (Spark's JSON, e.g. `{"events": {"0": 23}}`) of the table's latest
    synclib commit; None when the table does not exist or has none."""
    table = open_table(path)
    return None if table is None else parse_offsets(latest_metadata(table))


@dataclass(frozen=True)
class TableSummary:
    version: int
    rows: Optional[int]  # from the files' stats; None when a file has none
    app_id: Optional[str]
    batch_id: Optional[int]
    offsets: Optional[dict[str, Any]]


def table_summary(path: str) -> Optional[TableSummary]:
    """Version, row count and latest synclib batch of the table; None when it does not exist."""
    table = open_table(path)
    if table is None:
        return None
    records = pa.table(table.get_add_actions(flatten=True))["num_records"]
    rows = None if records.null_count else int(pc.sum(records).as_py() or 0)
    metadata = latest_metadata(table) or {}
    batch_id = metadata.get(META_BATCH_ID)
    return TableSummary(version=table.version(), rows=rows, app_id=metadata.get(META_APP_ID),
                        batch_id=None if batch_id is None else int(batch_id),
                        offsets=parse_offsets(metadata))
