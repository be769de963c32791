"""What every synclib commit records, and the check that a replayed batch is the one the table
holds: the exactly-once contract both writers keep (`synclib.delta.writer`,
`synclib.delta.spark_writer`). Reading those commits back: `synclib.delta.table`."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from deltalake import DeltaTable

from synclib import __version__
from synclib.delta.table import (
    META_APP_ID,
    META_BATCH_ID,
    META_OFFSETS,
    META_VERSION,
    latest_synclib_commit,
    parse_offsets,
    synclib_metadata,
)
from synclib.offsets import parse_offsets_json

logger = logging.getLogger(__name__)


def commit_metadata(app_id: str, batch_id: int, offsets: str | None) -> dict[str, Any]:
    """The `synclib.*` commit metadata of one micro-batch (`offsets`: the source's JSON)."""
    return {META_APP_ID: app_id, META_BATCH_ID: batch_id, META_OFFSETS: offsets,
            META_VERSION: __version__}


class ReplayMismatch(RuntimeError):
    """A batch the table holds already was planned with other offsets than the table recorded."""


def check_replay(table: DeltaTable, path: str, app_id: str, batch_id: int, offsets: str | None) -> None:
    """A batch the table holds already (a replay after a crash between the Delta commit and
    Spark's) is skipped; it must be the batch the table holds: its end offsets those recorded
    with its commit. Two runs of one checkpoint that planned batch `batch_id` differently would
    otherwise lose or duplicate the offsets between the two ends. Unchecked (logged) when the
    commit's log entry has expired."""
    commit = latest_synclib_commit(table, app_id, batch_id)
    if commit is None:
        logger.info("batch %d of %s is already in %s: skipped (its commit's log entry has expired)",
                    batch_id, app_id, path)
        return
    recorded = synclib_metadata(commit)
    if not same_offsets(offsets, recorded):
        raise ReplayMismatch(
            f"batch {batch_id} of {app_id} is in {path} (version {commit.get('version')}) with end offsets "
            f"{(recorded or {}).get(META_OFFSETS)}, but the checkpoint's offsets/{batch_id} says {offsets}: two runs "
            f"planned this batch differently; stop every run of this checkpoint and start one")
    logger.info("batch %d of %s is already in %s: skipped", batch_id, app_id, path)


def same_offsets(offsets: str | None, metadata: Mapping[str, Any] | None) -> bool:
    """Whether the commit `metadata` (`synclib.*`) records the end offsets `offsets` (the source's JSON)."""
    if metadata is None:
        return False
    return (parse_offsets_json(offsets) if offsets else None) == parse_offsets(metadata)
