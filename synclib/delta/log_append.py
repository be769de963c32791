"""The stream's next commit appended to a table's log without deltalake, when the table's newest
version is known to be this process's own commit of the stream's previous batch.

deltalake (1.6) reads the log three times per batch commit: the table update before it
(`update_incremental`, which replays every commit since the last log checkpoint again), and in
`create_write_transaction` the latest-version check and the post-commit snapshot (built, then
dropped). On local storage each read lists the whole directory; on S3 the update GETs every
commit since the last log checkpoint, so a batch costs one request more per version.

So once the table's newest version is this process's commit of the stream's previous batch, the
next batch's commit is written here: `<version + 1>.json` with the actions deltalake writes (the
files' add actions, the application transaction, the commit info with the `synclib.*` metadata),
created only if absent (`synclib.delta.log_store`: a hard link on local storage, a PUT with
`If-None-Match: *` on S3). Whatever else committed in between (maintenance, another writer)
holds that version, the create fails and the commit goes through deltalake as before, with its
table update, replay check and conflict check. Before appending, the previous commit's entry
must still be the one written (its identity: a table replaced under the path, or a log cleaned up
past it, sends the commit through deltalake; cleanup removes entries oldest first, so the next
version's entry cannot be gone while that one is there), and on local storage no log checkpoint
may be newer than it.

On an S3 server that does not enforce `If-None-Match` a create cannot see a commit that took the
version; there the host's writers all commit under the table's commit lock
(`synclib.delta.commit_lock`), whose generation says whether any of them held it since this
process's commit: if one did, the next version's entry is looked up (one HEAD) before appending.
Only tables deltalake reported at writer protocol 2 or lower (no table features) are appended to.
Where the batch commits write the log checkpoints, a version due for one goes through deltalake,
whose post-commit hook writes it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from deltalake import DeltaTable
from deltalake.transaction import AddAction

from synclib import __version__
from synclib.delta.log_store import Identity, LocalLog, log_of
from synclib.delta.table import META_OFFSETS, synclib_metadata
from synclib.locations import read_text

logger = logging.getLogger(__name__)

# deltalake's percent-encoding of an add action's path (its `serde_path`): everything but
# these ASCII characters is encoded.
_PATH_SAFE = "!$&'()+,-./:;=@_~"
_MAX_WRITER_VERSION = 2  # writer protocol 2: appendOnly and column invariants, no table features
_CHECKPOINT_INTERVAL, _DEFAULT_CHECKPOINT_INTERVAL = "delta.checkpointInterval", 100


@dataclass(frozen=True)
class Tail:
    """The table's newest version: the commit of batch `batch_id` of `app_id` with end `offsets`."""

    version: int
    app_id: str
    batch_id: int
    offsets: str | None
    identity: Identity  # its log entry's: that entry, not a new table's
    checkpoint_interval: int  # the table's `delta.checkpointInterval`
    generation: int | None  # the commit lock's hold in which it was written or read (None: no lock)

    def checkpoint_due(self) -> bool:
        """Whether deltalake's post-commit hook would write a log checkpoint at the next version
        (it writes one at version v when v + 1 is a multiple of the interval)."""
        return (self.version + 2) % self.checkpoint_interval == 0


_tails: dict[str, Tail] = {}  # by table path


def _last_checkpoint(log: LocalLog) -> int:
    """The version of the table's newest log checkpoint (`_last_checkpoint`); -1 when there is none."""
    text = read_text(f"{log.directory}/_last_checkpoint")
    return -1 if text is None else int(json.loads(text)["version"])


def previous_batch(path: str, app_id: str, batch_id: int, generation: int | None) -> Tail | None:
    """What is known of the table when its newest version is this process's commit of an
    earlier batch of `app_id` than `batch_id` (its entry still the one written); else None.
    `generation`: the commit lock's current hold."""
    tail = _tails.get(path)
    log = log_of(path)
    if tail is None or log is None or tail.app_id != app_id or tail.batch_id >= batch_id:
        return None
    if (log.identity(tail.version) != tail.identity
            or (isinstance(log, LocalLog) and _last_checkpoint(log) > tail.version)
            or (generation is not None and tail.generation is not None
                and generation - tail.generation > 1 and log.identity(tail.version + 1) is not None)):
        forget(path)  # a new table, a commit of another writer, or a log checkpoint of later commits
        return None
    return tail


def forget(path: str) -> None:
    """The table's newest version is no longer known (a commit goes through deltalake)."""
    _tails.pop(path, None)


def learn(path: str, table: DeltaTable, app_id: str, generation: int | None) -> None:
    """Remember the table's newest version (`table` just brought up to date) when it is a commit
    of a batch of `app_id` on a table of writer protocol 2 or lower, read from its log entry."""
    forget(path)
    log = log_of(path)
    protocol = table.protocol()
    if log is None or protocol.min_writer_version > _MAX_WRITER_VERSION or protocol.writer_features:
        return
    version = table.version()
    entry = log.read(version)
    if entry is None:
        return
    data, identity = entry
    actions = [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]
    txns = [a["txn"] for a in actions if "txn" in a]
    infos = [synclib_metadata(a["commitInfo"]) for a in actions if "commitInfo" in a]
    if len(txns) != 1 or txns[0].get("appId") != app_id or not infos or infos[0] is None:
        return
    interval = int(table.metadata().configuration.get(_CHECKPOINT_INTERVAL) or _DEFAULT_CHECKPOINT_INTERVAL)
    _tails[path] = Tail(version, app_id, int(txns[0]["version"]), infos[0].get(META_OFFSETS), identity, interval,
                        generation)


def add_json(add: AddAction) -> dict[str, Any]:
    """An add action as deltalake writes it to the log (its path percent-encoded)."""
    return {"add": {"path": quote(add.path, safe=_PATH_SAFE), "partitionValues": dict(add.partition_values),
                    "size": add.size, "modificationTime": add.modification_time,
                    "dataChange": add.data_change, "stats": add.stats}}


def append(path: str, tail: Tail, files: Sequence[AddAction], batch_id: int, offsets: str | None,
           partition_by: Sequence[str], metadata: Mapping[str, Any], generation: int | None) -> bool:
    """Commit `files` as batch `batch_id` at version `tail.version + 1` if no commit holds that
    version yet; False (nothing written) when one does. `generation`: the commit lock's hold."""
    log = log_of(path)
    assert log is not None, "append is for tables whose log synclib writes"
    now_ms = int(time.time() * 1000)
    actions = [
        {"commitInfo": {"timestamp": now_ms, "operation": "WRITE",
                        "operationParameters": {"partitionBy": json.dumps(list(partition_by)), "mode": "Append"},
                        "clientVersion": f"synclib-{__version__}", **metadata}},
        *(add_json(f) for f in files),
        {"txn": {"appId": tail.app_id, "version": batch_id, "lastUpdated": now_ms}},
    ]
    data = "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions).encode("utf-8")
    identity = log.create(tail.version + 1, data)
    if identity is None:
        forget(path)
        return False
    _tails[path] = Tail(tail.version + 1, tail.app_id, batch_id, offsets, identity, tail.checkpoint_interval,
                        generation)
    return True
