"""A Delta log entry created only if absent on S3 (`synclib.delta.log_store`), through the fault
proxy (harness/fault_proxy.py): each transient failure of the PUT is retried, a retry whose first
attempt took effect (its answer lost) counts as created, another writer's entry never does. Local
storage and the appends above it: tests/unit/test_log_append.py."""

from __future__ import annotations

import json

import pytest

from harness.fault_proxy import INTERNAL, RESET_AFTER, RESET_BEFORE, SLOW_DOWN, FaultProxy
from harness.object_store import S3Server
from synclib.delta.log_store import ObjectStoreLog, entry_name, log_of


def entry(app_id: str, batch: int) -> bytes:
    """A log entry as synclib appends one: the batch's application transaction and commit info."""
    return "\n".join(json.dumps(action) for action in (
        {"commitInfo": {"timestamp": 1767261600000 + batch, "operation": "WRITE"}},
        {"txn": {"appId": app_id, "version": batch, "lastUpdated": 1767261600000 + batch}})).encode() + b"\n"


def log(server: S3Server) -> tuple[ObjectStoreLog, str]:
    bucket = server.bucket()
    found = log_of(f"s3://{bucket}/table")
    assert isinstance(found, ObjectStoreLog)
    return found, f"{bucket}/table/_delta_log/"


@pytest.mark.parametrize("fault", [SLOW_DOWN, INTERNAL, RESET_BEFORE, RESET_AFTER])
def test_a_put_failing_transiently_is_retried_and_a_lost_answer_is_our_own_entry(
        faulty_s3: tuple[S3Server, FaultProxy], fault: str) -> None:
    server, proxy = faulty_s3
    entries, prefix = log(server)
    data = entry("synclib-q", 3)
    proxy.inject(fault, count=1, method="PUT", key=prefix)
    identity = entries.create(3, data)
    assert identity is not None and proxy.faults(fault) == [(fault, "PUT", prefix + entry_name(3))]
    assert entries.read(3) == (data, identity)
    if fault == RESET_AFTER:  # the first PUT took effect: the retry was refused, and found our bytes
        puts = [r for r in server.log() if r.method == "PUT" and r.key == prefix + entry_name(3)]
        assert len(puts) == 2


def test_another_writers_entry_is_a_conflict_even_after_a_lost_answer(faulty_s3: tuple[S3Server, FaultProxy]) -> None:
    server, proxy = faulty_s3
    entries, prefix = log(server)
    theirs = entry("synclib-other", 3)
    assert entries.create(3, theirs) is not None
    proxy.inject(RESET_BEFORE, count=1, method="PUT", key=prefix)  # our first attempt lost, then a 412
    assert entries.create(3, entry("synclib-q", 3)) is None
    assert entries.create(3, entry("synclib-other", 4)) is None  # the same writer, another batch: not this one
    assert entries.read(3) is not None and entries.read(3)[0] == theirs  # type: ignore[index]
