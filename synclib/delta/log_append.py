"""The stream's next commit appended to a local table's log without listing the log.

deltalake lists `_delta_log` three times per batch commit: the table update before it
(`update_incremental`), and inside `create_write_transaction` the latest-version check and the
post-commit snapshot update (deltalake 1.6; the snapshot it builds is then dropped). On local
storage a listing enumerates the whole directory, so every batch pays in proportion to the log's
length. An object store lists from an offset and does not.

So on local storage, once the table's newest version is known to be this process's own commit of
the stream's previous batch, the next batch's commit is written here: `<version + 1>.json` with
the same actions deltalake writes (the files' add actions, the application transaction, the
commit info with the `synclib.*` metadata), created only if absent (a hard link, which never
replaces a file). Whatever else committed in between (maintenance, another writer) holds that
version, the link fails and the commit goes through deltalake as before, with its table update,
replay check and conflict check. Only tables deltalake reported at writer protocol 2 or lower
(no table features) are appended to. Where the batch commits write the log checkpoints (no
maintenance), a version due for one goes through deltalake, whose post-commit hook writes it.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from deltalake import DeltaTable
from deltalake.transaction import AddAction
from pyarrow import fs

from synclib import __version__
from synclib.delta.table import META_OFFSETS, synclib_metadata
from synclib.locations import filesystem

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
    identity: tuple[int, int]  # its commit file's (st_ino, st_mtime_ns): that file, not a new table's
    checkpoint_interval: int  # the table's `delta.checkpointInterval`

    def checkpoint_due(self) -> bool:
        """Whether deltalake's post-commit hook would write a log checkpoint at the next version
        (it writes one at version v when v + 1 is a multiple of the interval)."""
        return (self.version + 2) % self.checkpoint_interval == 0


_tails: dict[str, Tail] = {}  # by table path
_no_links: set[str] = set()  # tables whose storage refused a hard link (some FUSE mounts): deltalake only


def log_directory(path: str) -> str | None:
    """The `_delta_log` directory of a table on local storage that takes hard links; None elsewhere."""
    if path in _no_links:
        return None
    files, root = filesystem(path)
    return os.path.join(root, "_delta_log") if isinstance(files, fs.LocalFileSystem) else None


def _commit_file(log: str, version: int) -> str:
    return os.path.join(log, f"{version:020d}.json")


def _identity(file: str) -> tuple[int, int] | None:
    try:
        stat = os.stat(file)
    except FileNotFoundError:
        return None
    return stat.st_ino, stat.st_mtime_ns


def previous_batch(path: str, app_id: str, batch_id: int) -> Tail | None:
    """What is known of the table when its newest version is this process's commit of an
    earlier batch of `app_id` than `batch_id` (that commit file still the one written); else None."""
    tail = _tails.get(path)
    log = log_directory(path)
    if tail is None or log is None or tail.app_id != app_id or tail.batch_id >= batch_id:
        return None
    if _identity(_commit_file(log, tail.version)) != tail.identity or _last_checkpoint(log) > tail.version:
        _tails.pop(path, None)  # a new table, or a log checkpoint of later commits (whose files may be gone)
        return None
    return tail


def _last_checkpoint(log: str) -> int:
    """The version of the table's newest log checkpoint (`_last_checkpoint`); -1 when there is none."""
    try:
        with open(os.path.join(log, "_last_checkpoint"), encoding="utf-8") as hint:
            return int(json.load(hint)["version"])
    except FileNotFoundError:
        return -1


def learn(path: str, table: DeltaTable, app_id: str) -> None:
    """Remember the table's newest version (`table` just brought up to date) when it is a commit
    of a batch of `app_id` on a table of writer protocol 2 or lower, read from its commit file."""
    _tails.pop(path, None)
    log = log_directory(path)
    protocol = table.protocol()
    if log is None or protocol.min_writer_version > _MAX_WRITER_VERSION or protocol.writer_features:
        return
    version = table.version()
    file = _commit_file(log, version)
    identity = _identity(file)
    try:
        with open(file, encoding="utf-8") as commit:
            actions = [json.loads(line) for line in commit if line.strip()]
    except FileNotFoundError:
        return
    txns = [a["txn"] for a in actions if "txn" in a]
    infos = [synclib_metadata(a["commitInfo"]) for a in actions if "commitInfo" in a]
    if identity is None or len(txns) != 1 or txns[0].get("appId") != app_id or not infos or infos[0] is None:
        return
    interval = int(table.metadata().configuration.get(_CHECKPOINT_INTERVAL) or _DEFAULT_CHECKPOINT_INTERVAL)
    _tails[path] = Tail(version, app_id, int(txns[0]["version"]), infos[0].get(META_OFFSETS), identity, interval)


def add_json(add: AddAction) -> dict[str, Any]:
    """An add action as deltalake writes it to the log (its path percent-encoded)."""
    return {"add": {"path": quote(add.path, safe=_PATH_SAFE), "partitionValues": dict(add.partition_values),
                    "size": add.size, "modificationTime": add.modification_time,
                    "dataChange": add.data_change, "stats": add.stats}}


def append(path: str, tail: Tail, files: Sequence[AddAction], batch_id: int, offsets: str | None,
           partition_by: Sequence[str], metadata: Mapping[str, Any]) -> bool:
    """Commit `files` as batch `batch_id` at version `tail.version + 1` if no commit holds that
    version yet; False (nothing written) when one does."""
    log = log_directory(path)
    assert log is not None, "append is for tables on local storage"
    now_ms = int(time.time() * 1000)
    actions = [
        {"commitInfo": {"timestamp": now_ms, "operation": "WRITE",
                        "operationParameters": {"partitionBy": json.dumps(list(partition_by)), "mode": "Append"},
                        "clientVersion": f"synclib-{__version__}", **metadata}},
        *(add_json(f) for f in files),
        {"txn": {"appId": tail.app_id, "version": batch_id, "lastUpdated": now_ms}},
    ]
    temporary = os.path.join(log, f"_commit_{uuid.uuid4()}.json.tmp")
    target = _commit_file(log, tail.version + 1)
    with open(temporary, "w", encoding="utf-8") as commit:
        commit.write("".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions))
    try:
        os.link(temporary, target)
    except FileExistsError:
        _tails.pop(path, None)
        return False
    except OSError as exc:
        logger.warning("%s: no hard link in %s (%s): its commits go through deltalake", path, log, exc)
        _no_links.add(path)
        _tails.pop(path, None)
        return False
    finally:
        os.unlink(temporary)
    identity = _identity(target)
    assert identity is not None
    _tails[path] = Tail(tail.version + 1, tail.app_id, batch_id, offsets, identity, tail.checkpoint_interval)
    return True
