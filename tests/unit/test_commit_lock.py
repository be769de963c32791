"""The host-wide commit lock of a table on an object store (`synclib.delta.commit_lock`): held
across processes, as the batch commit (a PySpark Python process) and maintenance (the driver's
interpreter) need it; no lock for local tables."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

from synclib.delta import commit_lock
from tests.support import wait_until, waiting_for_lock

# Holds the lock of argv[1], then creates the file argv[2] and keeps the lock until stdin closes.
_HOLDER = """
import pathlib, sys
from synclib.delta import commit_lock
with commit_lock.held(sys.argv[1]):
    pathlib.Path(sys.argv[2]).touch()
    sys.stdin.read()
"""


def _holder(location: str, marker: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", _HOLDER, location, str(marker)], stdin=subprocess.PIPE, text=True)


def test_a_second_process_waits_until_the_first_releases_the_lock(tmp_path: Path) -> None:
    location = f"s3://bucket-{tmp_path.name}/table"
    lock = commit_lock.lock_file(location)
    assert lock is not None
    first, second = tmp_path / "first", tmp_path / "second"
    holder = _holder(location, first)
    waiter = None
    try:
        wait_until(first.exists, 30, "the first process holds the lock")
        waiter = _holder(f"s3a://bucket-{tmp_path.name}/table/", second)  # the same table, spelt otherwise
        wait_until(lambda: waiting_for_lock(lock), 30, "the second process waits for the lock")
        assert not second.exists()
        assert holder.stdin is not None
        holder.stdin.close()
        assert holder.wait(30) == 0
        wait_until(second.exists, 30, "the second process holds the lock once the first released it")
        assert waiter.stdin is not None
        waiter.stdin.close()
        assert waiter.wait(30) == 0
    finally:
        for process in (holder, waiter):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()


def test_local_tables_take_no_lock_and_the_lock_file_does_not_name_the_table(tmp_path: Path) -> None:
    assert commit_lock.lock_file(str(tmp_path / "table")) is None
    assert commit_lock.lock_file(f"file://{tmp_path}/table") is None
    with commit_lock.held(str(tmp_path / "table")), commit_lock.held(str(tmp_path / "table")):  # no lock: no wait
        pass
    lock = commit_lock.lock_file("s3://secret-bucket/secret-table")
    assert lock is not None and "secret" not in str(lock)
    assert lock != commit_lock.lock_file("s3://secret-bucket/other-table")
    assert lock == commit_lock.lock_file("S3A://secret-bucket/secret-table/")


def test_each_hold_of_a_tables_lock_has_the_next_generation(tmp_path: Path) -> None:
    location = f"s3://bucket/generations-{uuid.uuid4().hex}"
    with commit_lock.held(location) as first:
        assert first is not None
    with commit_lock.held(location) as second, commit_lock.held(f"{location}-other") as other:
        assert second == first + 1 and other == 1
    with commit_lock.held(str(tmp_path / "table")) as local:
        assert local is None
