"""A Delta table's log entries created only where none exists: put-if-absent without deltalake.

- Local storage: the entry is written to a temporary file beside it and hard-linked to its
  name; a link never replaces a file. An entry's identity is its file's (inode, mtime).
- `s3://` (and `s3a://`): one PUT with `If-None-Match: *` through obstore, the Python binding of
  the object_store crate deltalake itself uses, configured from the same `AWS_*` variables
  (`AWS_CONDITIONAL_PUT=etag` included). AWS S3 and S3Proxy 3 refuse it with 412 when the key
  exists. An entry's identity is its ETag. Each request is retried under the job's policy
  (`synclib.store_retry.send`); a PUT retried after a lost answer (the first attempt took effect,
  its answer never came) finds its own entry: an existing entry with exactly the bytes meant for
  it counts as created. The bytes are the entry's own: its application transaction (the query's
  app id and batch id) and its commit info (the run's timestamp), so another writer's entry,
  even of the same batch, never has them.

A server that does not enforce `If-None-Match` accepts a second PUT of one key; that case is the
caller's to exclude (`synclib.delta.log_append`: the table's host-wide commit lock).
"""

from __future__ import annotations

import logging
import os
import uuid
from dataclasses import dataclass
from functools import cache

from obstore import get, head, put
from obstore.exceptions import AlreadyExistsError, NotFoundError
from obstore.store import S3Store
from pyarrow import fs

from synclib.locations import filesystem, normalize_location, s3_store, store_name
from synclib.store_retry import send

logger = logging.getLogger(__name__)

Identity = tuple[int, int] | str  # (st_ino, st_mtime_ns) of a local file; an object's ETag

_no_links: set[str] = set()  # tables whose storage refused a hard link (some FUSE mounts)


def entry_name(version: int) -> str:
    return f"{version:020d}.json"


@dataclass(frozen=True)
class LocalLog:
    """The `_delta_log` directory of a table on local storage."""

    table: str
    directory: str

    def identity(self, version: int) -> Identity | None:
        try:
            stat = os.stat(os.path.join(self.directory, entry_name(version)))
        except FileNotFoundError:
            return None
        return stat.st_ino, stat.st_mtime_ns

    def read(self, version: int) -> tuple[bytes, Identity] | None:
        identity = self.identity(version)
        try:
            with open(os.path.join(self.directory, entry_name(version)), "rb") as entry:
                data = entry.read()
        except FileNotFoundError:
            return None
        return (data, identity) if identity is not None else None

    def create(self, version: int, data: bytes) -> Identity | None:
        """Create entry `version` holding `data`; its identity, or None when the entry exists (or
        the storage takes no hard links: then this table's entries are left to deltalake)."""
        temporary = os.path.join(self.directory, f"_commit_{uuid.uuid4()}.json.tmp")
        target = os.path.join(self.directory, entry_name(version))
        with open(temporary, "wb") as entry:
            entry.write(data)
        try:
            os.link(temporary, target)
        except FileExistsError:
            return None
        except OSError as exc:
            logger.warning("%s: no hard link in %s (%s): its commits go through deltalake", self.table,
                           self.directory, exc)
            _no_links.add(self.table)
            return None
        finally:
            os.unlink(temporary)
        return self.identity(version)


@dataclass(frozen=True)
class ObjectStoreLog:
    """The `_delta_log` prefix of a table on S3."""

    store: S3Store

    def identity(self, version: int) -> Identity | None:
        name = entry_name(version)
        try:
            return str(send(store_name(self.store), f"HEAD {name}", lambda: head(self.store, name))["e_tag"])
        except (FileNotFoundError, NotFoundError):
            return None

    def read(self, version: int) -> tuple[bytes, Identity] | None:
        name = entry_name(version)

        def get_whole() -> tuple[bytes, Identity]:  # the body read inside the retry: a reset may cut it
            result = get(self.store, name)
            return result.bytes().to_bytes(), str(result.meta["e_tag"])

        try:
            return send(store_name(self.store), f"GET {name}", get_whole)
        except (FileNotFoundError, NotFoundError):
            return None

    def create(self, version: int, data: bytes) -> Identity | None:
        """Create entry `version` holding `data` (`If-None-Match: *`); its ETag, or None when
        another writer's entry holds the version. Safe to retry: an attempt whose answer was lost
        leaves our own entry, which the next attempt's 412 finds by its bytes."""
        name = entry_name(version)
        try:
            return str(send(store_name(self.store), f"PUT {name} (If-None-Match: *)",
                            lambda: put(self.store, name, data, mode="create"))["e_tag"])
        except AlreadyExistsError:
            existing = self.read(version)  # our own PUT, whose answer was lost before a retry?
            return existing[1] if existing is not None and existing[0] == data else None


Log = LocalLog | ObjectStoreLog


@cache
def _s3_log(uri: str) -> ObjectStoreLog:
    return ObjectStoreLog(s3_store(f"{uri.rstrip('/')}/_delta_log"))


def log_of(path: str) -> Log | None:
    """The log of the table at `path` where synclib creates entries itself: local storage taking
    hard links and `s3://`; None elsewhere (other object stores: deltalake only)."""
    uri = normalize_location(path)
    if uri.startswith("s3://"):
        return _s3_log(uri)
    if path in _no_links:
        return None
    files, root = filesystem(path)
    return LocalLog(path, os.path.join(root, "_delta_log")) if isinstance(files, fs.LocalFileSystem) else None
