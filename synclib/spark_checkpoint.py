"""Spark's streaming checkpoint: what it says about its query and micro-batches, and the files
synclib keeps inside it.

The sink needs two facts Spark keeps in `checkpointLocation`:

- `metadata` (JSON `{"id": "<uuid>"}`): the query id, written when the checkpoint is
  created and stable across restarts. It names the sink's Delta application transaction,
  so a new (or lost) checkpoint, whose batch ids restart at 0, never collides with an old one.
- `offsets/<batchId>`: written before batch N runs; line 1 is the log version, line 2
  the batch metadata, then one line per source with that source's end offsets JSON
  (`-` when a source has none).

synclib keeps its own files under `<checkpointLocation>/synclib/` (`synclib_file`), so that a new
checkpoint starts without them: the source's first start offsets (`INITIAL_OFFSETS`) and the
running embedded broker's address (`EMBEDDED_BROKER`).

Locations are read as `synclib.locations` says (local paths, object stores, Databricks' FUSE).
"""

from __future__ import annotations

import json

from synclib.locations import normalize_location, read_text

APP_ID_PREFIX = "synclib-"
INITIAL_OFFSETS = "initial-offsets.json"
EMBEDDED_BROKER = "embedded-broker.json"


class CheckpointError(RuntimeError):
    """The checkpoint lacks a file the sink needs (it is not a Spark streaming checkpoint)."""


def synclib_file(location: str, name: str) -> str:
    """The location of synclib's file `name` inside the checkpoint at `location`."""
    return f"{normalize_location(location).rstrip('/')}/synclib/{name}"


def _read_text(location: str, name: str) -> str | None:
    return read_text(f"{location.rstrip('/')}/{name}")


def query_id(location: str) -> str | None:
    """The streaming query id recorded in the checkpoint, None before the query first started."""
    text = _read_text(location, "metadata")
    if text is None:
        return None
    return str(json.loads(text.splitlines()[0])["id"])


def app_id(location: str) -> str:
    """The Delta application-transaction id for the query that owns this checkpoint."""
    query = query_id(location)
    if query is None:
        raise CheckpointError(f"no query metadata in checkpoint {location!r}")
    return APP_ID_PREFIX + query


def batch_offsets(location: str, batch_id: int) -> str | None:
    """The first source's end offsets JSON for `batch_id`, None when it has none."""
    text = _read_text(location, f"offsets/{batch_id}")
    if text is None:
        raise CheckpointError(f"no offset log entry for batch {batch_id} in {location!r}")
    lines = text.splitlines()
    if lines[0] != "v1":
        raise CheckpointError(f"offset log version {lines[0]!r} of batch {batch_id} in "
                              f"{location!r} is not supported (expected v1)")
    if len(lines) < 3 or lines[2] == "-":
        return None
    return lines[2]
