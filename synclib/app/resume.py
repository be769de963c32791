"""Where a run resumes from: Spark's checkpoint, or the table's own offsets when the
checkpoint is new (lost or replaced) and the table already holds synclib batches; where the
source keeps the offsets its first batch starts from."""

from __future__ import annotations

import json
import logging

from synclib import spark_checkpoint
from synclib.delta import table
from synclib.offsets import to_offsets_json
from synclib.settings import ForwarderConfig

logger = logging.getLogger("synclib.forwarder")


def starting_offsets_from_table(config: ForwarderConfig, table_path: str | None) -> str | None:
    """The `startingOffsets` option (Spark's offsets JSON) the latest synclib commit of the table
    at `table_path` (None: there is none yet) gives a new checkpoint (`sink.resume_from_table`);
    None when the checkpoint, or `source.starting_offsets` for a new table, decides."""
    if (not config.sink.resume_from_table or table_path is None
            or spark_checkpoint.query_id(config.checkpoint.location) is not None):
        return None
    recorded = table.read_table_offsets(table_path)
    if not recorded:
        return None
    starting = json.dumps(to_offsets_json(recorded))
    logger.info("new checkpoint on an existing table: resuming from the table's offsets %s", starting)
    return starting


def initial_offsets_file(checkpoint_location: str) -> str:
    """The source's `initialOffsetsFile`: inside the checkpoint, so a new checkpoint starts afresh."""
    return spark_checkpoint.synclib_file(checkpoint_location, spark_checkpoint.INITIAL_OFFSETS)
