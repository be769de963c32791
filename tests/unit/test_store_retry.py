"""The one retry policy (`synclib.store_retry`): synclib's own requests (`synclib.locations`: the run
marker, the checkpoint's files) ride out S3's failure modes through the fault proxy
(harness/fault_proxy.py), an outage past the deadline ends in one line, and the policy reaches every
client's settings. The log entry's put-if-absent: tests/unit/test_log_store.py; S3A's:
tests/spark/test_checkpoint_manager.py."""

from __future__ import annotations

import time

import pytest

from harness.fault_proxy import DELAY, INTERNAL, RESET_AFTER, RESET_BEFORE, SLOW_DOWN, FaultProxy
from harness.object_store import S3Server
from synclib import store_retry
from synclib.locations import read_text, write_text
from synclib.settings.storage import S3Config
from synclib.store_retry import ObjectStoreUnavailable, RetryPolicy, storage_failure, transient_kind


@pytest.mark.parametrize("fault", [SLOW_DOWN, INTERNAL, RESET_BEFORE, RESET_AFTER, DELAY])
def test_synclib_reads_and_writes_ride_out_each_fault(faulty_s3: tuple[S3Server, FaultProxy], fault: str) -> None:
    server, proxy = faulty_s3
    proxy.delay_s = 0.5
    location = f"s3://{server.bucket()}/checkpoint/synclib/run"
    errors_before, retries_before = store_retry.counts()
    proxy.inject(fault, count=2, method="PUT")
    write_text(location, '{"run_id": "a"}')
    proxy.inject(fault, count=2, method="GET")
    assert read_text(location) == '{"run_id": "a"}'
    assert len(proxy.faults(fault)) == (2 if fault == DELAY else 4)  # a delay is no failure: nothing sent again
    errors, retries = store_retry.counts()
    transient = sum(errors.values()) - sum(errors_before.values())
    assert transient == (0 if fault == DELAY else 4)
    assert sum(retries.values()) - sum(retries_before.values()) == transient


def test_an_outage_past_the_deadline_ends_in_one_line_naming_the_store_the_request_and_how_long(
        faulty_s3: tuple[S3Server, FaultProxy]) -> None:
    server, proxy = faulty_s3
    bucket = server.bucket()
    proxy.outage(SLOW_DOWN, 60)
    started = time.monotonic()
    with pytest.raises(ObjectStoreUnavailable) as failed:
        read_text(f"s3://{bucket}/checkpoint/synclib/run")
    assert time.monotonic() - started < 10  # the fixture's deadline (5 s) or the attempts end it, whichever first
    assert len(proxy.faults(SLOW_DOWN)) > 1  # retried (full jitter: how long the attempts take varies)
    line = str(failed.value)
    assert "\n" not in line
    assert line.startswith(f"object store unavailable: s3://{bucket} at {server.endpoint}: "
                           "GET checkpoint/synclib/run failed for ")
    assert "slow-down: " in line and "503 Service Unavailable" in line and "storage.s3.retry_deadline" in line
    assert storage_failure(f"StreamingQueryException: ...\n  ObjectStoreUnavailable: {line}\n") == line


def test_only_transient_failures_are_retried() -> None:
    assert transient_kind(RuntimeError("Server returned non-2xx status code: 503 Service Unavailable: "
                                       "<Error><Code>SlowDown</Code>")) == "slow-down"
    assert transient_kind(RuntimeError("status code: 503 Service Unavailable")) == "503"
    assert transient_kind(RuntimeError("status code: 500 Internal Server Error")) == "5xx"
    # pyarrow's S3 filesystem: the AWS C++ SDK's error names
    assert transient_kind(OSError("AWS Error SLOW_DOWN during ListObjectsV2 operation")) == "slow-down"
    assert transient_kind(OSError("AWS Error INTERNAL_FAILURE during ListObjectsV2 operation")) == "5xx"
    assert transient_kind(RuntimeError("HTTP error: error sending request Debug source: ...")) == "connection"
    assert transient_kind(ConnectionResetError()) == "connection"
    assert transient_kind(RuntimeError("operation timed out")) == "timeout"
    for final in ("status code: 412 Precondition Failed Debug source: retry_timeout: 180s",
                  "status code: 403 Forbidden", "Object at location x not found"):
        assert transient_kind(RuntimeError(final)) is None
    # another client's error, only when it is the object store's and transient
    assert storage_failure("Generic S3 error: Error performing PUT http://h/b/k in 61s, after 9 retries - "
                           "HTTP error: error sending request") is not None
    s3a = ("[STREAM_FAILED] Query [id = q] terminated with exception: Writing Object on checkpoint/offsets/3: "
           "software.amazon.awssdk.services.s3.model.S3Exception: Please reduce your request rate. (Service: S3, "
           "Status Code: 503, Request ID: r):SlowDown")
    assert (storage_failure(s3a) or "").startswith("object store unavailable: slow-down: [STREAM_FAILED]")
    pyarrow = ("OSError: When uploading object with key 'table/part-1.zstd.parquet' in bucket 'b': AWS Error "
               "SLOW_DOWN during PutObject operation: Please reduce your request rate. (Request ID: r)")
    assert (storage_failure(pyarrow) or "").startswith("object store unavailable: slow-down: OSError: When uploading")
    assert storage_failure("Kafka: timed out waiting for the commit log") is None


def test_the_aws_sdks_retries_fit_the_deadline_at_their_longest_backoffs() -> None:
    """pyarrow's retries (the AWS SDK's standard ones: 1 s doubling to 20 s) know no deadline: they
    get as many attempts as fit in it (a 75 s outage took a read task's PUT 72 s at 10 attempts)."""
    assert RetryPolicy(60, 10).sdk_attempts() == 7  # 1 + 2 + 4 + 8 + 16 + 20 = 51 s
    assert RetryPolicy(30, 10).sdk_attempts() == 5  # 15 s; one more would be 31
    assert RetryPolicy(600, 3).sdk_attempts() == 3
    assert RetryPolicy(0.5, 10).sdk_attempts() == 1


def test_the_backoff_is_exponential_with_jitter_and_capped() -> None:
    policy = RetryPolicy()
    for retry in range(1, 12):
        pauses = [policy.backoff_s(retry) for _ in range(200)]
        assert min(pauses) >= 0 and max(pauses) <= min(store_retry.MAX_BACKOFF_S, 0.1 * 2 ** retry)
        assert max(pauses) > 0.5 * min(store_retry.MAX_BACKOFF_S, 0.1 * 2 ** retry)


def test_the_policy_reaches_every_client_from_one_setting() -> None:
    s3 = S3Config(retry_deadline="2m", retry_attempts=8)
    variables = s3.environment({})
    assert RetryPolicy.of(variables) == RetryPolicy(120.0, 8)
    assert store_retry.delta_storage_options(variables) == {
        "max_retries": "7", "retry_timeout": "120s", "backoff_config.init_backoff": "100ms",
        "backoff_config.max_backoff": "15s", "backoff_config.base": "2"}
    hadoop = s3.hadoop_options({})
    assert hadoop["fs.s3a.retry.limit"] == hadoop["fs.s3a.retry.throttle.limit"] == "8"
    assert hadoop["fs.s3a.attempts.maximum"] == "0"
    interval_ms = int(hadoop["fs.s3a.retry.interval"].removesuffix("ms"))
    assert sum(interval_ms * 2 ** (retry + 1) for retry in range(8)) == pytest.approx(120_000, rel=0.01)
    assert RetryPolicy.of({}) == RetryPolicy(store_retry.DEADLINE_S, store_retry.ATTEMPTS)
