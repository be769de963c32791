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
running embedded broker's address (`EMBEDDED_BROKER`), and the run marker (`RUN`, `RunMarker`):
which run of the job owns the checkpoint now, and the tables by name with the locations the job's
catalog gave them (`TABLES`, `TableRecord`: `status` and `maintain` run without Spark). The newest
run wins: a run writes its marker before its query starts, and a running run checks it before
planning a batch and before each Delta commit (`check_run`), so a run that another one replaced
stops before it writes either.

Locations are read as `synclib.locations` says (local paths, object stores, Databricks' FUSE).
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from dataclasses import asdict, dataclass

from synclib.locations import normalize_location, read_text, write_text

APP_ID_PREFIX = "synclib-"
INITIAL_OFFSETS = "initial-offsets.json"
EMBEDDED_BROKER = "embedded-broker.json"
RUN = "run"
TABLES = "tables.json"


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


@dataclass(frozen=True)
class TableRecord:
    """`<checkpoint>/synclib/tables.json`: a table by name (`sink.table`) and its dead-letter table,
    where the job's catalog placed them, and whether the platform maintains the main one."""

    table: str
    location: str
    dead_letters_table: str | None = None
    dead_letters_location: str | None = None
    left_to_platform: bool = False


def record_tables(location: str, record: TableRecord) -> None:
    """Keep `record` in the checkpoint at `location`, replacing the previous one."""
    write_text(synclib_file(location, TABLES), json.dumps(asdict(record)))


def recorded_tables(location: str) -> TableRecord | None:
    """The tables the job last recorded in the checkpoint at `location`; None when there are none."""
    text = read_text(synclib_file(location, TABLES))
    return None if text is None else TableRecord(**json.loads(text))


class RunSuperseded(RuntimeError):
    """Another run of the job started on this checkpoint: this one must stop (the newest run wins)."""


@dataclass(frozen=True)
class RunMarker:
    """One run of the job on a checkpoint: `<checkpoint>/synclib/run` as JSON, these fields."""

    run_id: str
    host: str
    pid: int
    started: str  # UTC, ISO 8601 to the second

    @classmethod
    def new(cls) -> RunMarker:
        """A marker for this process, now."""
        return cls(uuid.uuid4().hex, socket.gethostname(), os.getpid(),
                   time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))

    def describe(self) -> str:
        return f"run {self.run_id} (host {self.host}, pid {self.pid}, started {self.started})"


def start_run(location: str, marker: RunMarker) -> None:
    """Make `marker` the checkpoint's current run, replacing any other (before the query starts)."""
    write_text(synclib_file(location, RUN), json.dumps(asdict(marker)))


def current_run(location: str) -> RunMarker | None:
    """The run marker of the checkpoint at `location`; None when there is none (or it is unreadable)."""
    text = read_text(synclib_file(location, RUN))
    try:
        return None if text is None else RunMarker(**json.loads(text))
    except (ValueError, TypeError):
        return None


def superseded(location: str, run_id: str) -> str | None:
    """Why run `run_id` must stop, in one line, when the checkpoint's marker names another run or
    none (the checkpoint was deleted under it); None while it is still the checkpoint's run."""
    marker = current_run(location)
    if marker is not None and marker.run_id == run_id:
        return None
    other = ("its run marker is gone (the checkpoint was deleted or replaced under this run)" if marker is None
             else f"{marker.describe()} took it over")
    return (f"another run of this job owns checkpoint {location}: {other}, so run {run_id} stopped "
            f"before writing anything more (the newest run wins); stop one of the two deployments "
            f"and do not retry this run while the other runs")


def check_run(location: str, run_id: str) -> None:
    """Raise `RunSuperseded` unless run `run_id` is the checkpoint's current run (one GET)."""
    reason = superseded(location, run_id)
    if reason is not None:
        raise RunSuperseded(reason)
