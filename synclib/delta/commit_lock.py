"""A host-wide lock per Delta table on an object store, held around each of synclib's delta-rs commits.

A server that does not enforce conditional PUTs (`If-None-Match: *`: S3Proxy before 3.0, older
MinIO and Ceph) accepts two PUTs of one `_delta_log/<n>.json`, the later silently replacing the
earlier commit. The writers a delta-rs job runs on its table, the batch commit and maintenance,
all run on the driver host: as Delta's `S3SingleDriverLogStore` serializes one JVM's commits,
each holds this lock while it commits, and delta-rs commits the version after the newest it
lists, so no two of them write one version. A file lock (`fcntl.flock`), not a threading lock:
PySpark may run the batch commit in a Python process of its own beside the driver's interpreter
(the kernel releases a dead process's lock). Local tables commit atomically (a rename, or
`synclib.delta.log_append`'s hard link) and take no lock; writers on other hosts are not covered.

The lock file counts the holds begun (its *generation*, written as a hold begins, so a holder
killed mid-commit is counted too): a holder that finds the generation of its own last commit
knows that none of the host's writers has touched the log since, without a request
(`synclib.delta.log_append` appends the stream's next commit on that knowledge).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from synclib.locations import normalize_location, on_object_store

logger = logging.getLogger(__name__)

SLOW_WAIT_S = 0.1  # a longer wait for the lock is logged (DEBUG)


def lock_file(location: str) -> Path | None:
    """The lock file of the table at `location` (named by a hash of its URI, which never shows);
    None for a table on local storage, which is not locked."""
    uri = normalize_location(location).rstrip("/")
    if not on_object_store(uri):
        return None
    directory = Path(tempfile.gettempdir()) / f"synclib-commit-locks-{os.getuid()}"
    return directory / f"{hashlib.sha256(uri.encode()).hexdigest()[:32]}.lock"


@contextlib.contextmanager
def held(location: str) -> Iterator[int | None]:
    """Hold the commit lock of the table at `location`, waiting as long as another holds it; gives
    this hold's generation (the holds begun, this one included). A table on local storage is not
    locked (generation None). Not reentrant: a holder taking it again waits forever."""
    path = lock_file(location)
    if path is None:
        yield None
        return
    path.parent.mkdir(mode=0o700, exist_ok=True)
    started = time.monotonic()
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        waited = time.monotonic() - started
        if waited > SLOW_WAIT_S:
            logger.debug("waited %.0f ms for the commit lock of %s", waited * 1000, location)
        generation = int(os.pread(descriptor, 32, 0) or b"0") + 1
        os.pwrite(descriptor, b"%d" % generation, 0)  # the count only grows: nothing to truncate
        yield generation
    finally:
        os.close(descriptor)  # releases the lock
