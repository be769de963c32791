"""The tests' S3 server (S3Proxy, harness/object_store.py): what it implements of what exactly once
needs, and the job's check of its S3 locations before Spark starts (synclib.app.storage).

What S3Proxy 4.1.0 (filesystem backend) does, established here: listing from an offset
(start-after, as delta-rs lists the log from a version) and multipart uploads (pyarrow's writes) work;
a conditional PUT (`If-None-Match: *`) of an existing key is refused (412), as AWS S3 refuses it, so
a second create of the same Delta log entry loses and delta-rs commits at the next version (2.6.0
overwrote it); delta-rs's bulk delete (DeleteObjects with `x-amz-checksum-sha256`, which vacuum and
log cleanup send) works (3.0.0 refused the header); a directory marker is listed under its own prefix,
as S3A probes a directory (3.0.0 left it out). docs/operations/object-storage.md says what follows.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from deltalake import DeltaTable, write_deltalake

from harness.fault_proxy import INTERNAL, SLOW_DOWN, FaultProxy
from harness.object_store import S3Server
from synclib.app.storage import StorageUnavailable, check_storage
from synclib.embedded.broker import free_port
from synclib.exit_codes import ExitCode
from synclib.locations import s3_filesystem
from synclib.settings import ForwarderConfig
from synclib.settings.storage import S3Config
from tests.forwarder_runs import ROOT


def job_yaml(s3: dict[str, object], bucket: str) -> dict[str, object]:
    return {
        "kafka": {"bootstrap_servers": "127.0.0.1:9092"},
        "source": {"subscribe": "events", "commit_log_topic": "commit-log", "commit_groups": ["leader"]},
        "sink": {"path": f"s3://{bucket}/events"},
        "checkpoint": {"location": f"s3a://{bucket}/checkpoint"},
        "storage": {"s3": s3},
    }


def job_config(s3: dict[str, object], bucket: str) -> ForwarderConfig:
    return ForwarderConfig.model_validate(job_yaml(s3, bucket))


def test_listing_from_an_offset_and_multipart_uploads(s3_server: S3Server) -> None:
    filesystem = s3_filesystem(S3Config(**s3_server.storage_settings()).environment({}))
    bucket = s3_server.bucket()
    for name in ("00.json", "01.json", "02.json", "03.json"):
        with filesystem.open_output_stream(f"{bucket}/log/{name}") as out:
            out.write(name.encode())
    big = b"x" * (24 << 20)  # above pyarrow's part size (a smaller file is one PUT): a multipart upload
    with filesystem.open_output_stream(f"{bucket}/big") as out:
        out.write(big)

    assert filesystem.get_file_info(f"{bucket}/big").size == len(big)
    uploads = s3_server.requests()
    assert uploads["POST"] >= 2  # CreateMultipartUpload and CompleteMultipartUpload
    table = f"s3://{bucket}/table"
    storage = S3Config(**s3_server.storage_settings()).environment({})
    for rows in ([1, 2], [3], [4]):
        write_deltalake(table, pa.table({"a": rows}), mode="append", storage_options=storage)
    # delta-rs finds the newest version by listing the log from an offset (start-after)
    files = pa.table(DeltaTable(table, storage_options=storage, version=1).get_add_actions(flatten=True))
    assert sum(files["num_records"].to_pylist()) == 3
    assert DeltaTable(table, storage_options=storage).version() == 2


def test_delta_rs_vacuum_deletes_the_files_an_overwrite_removed(s3_server: S3Server) -> None:
    """delta-rs deletes in bulk (DeleteObjects with `x-amz-checksum-sha256`, which S3Proxy 3.0.0
    refused with 501 NotImplemented)."""
    bucket = s3_server.bucket()
    table = f"s3://{bucket}/table"
    storage = S3Config(**s3_server.storage_settings()).environment({})
    write_deltalake(table, pa.table({"a": [1]}), storage_options=storage)
    write_deltalake(table, pa.table({"a": [2]}), mode="overwrite", storage_options=storage)
    delta = DeltaTable(table, storage_options=storage)
    removed = delta.vacuum(retention_hours=0, dry_run=True, enforce_retention_duration=False)
    assert len(removed) == 1

    assert delta.vacuum(retention_hours=0, dry_run=False, enforce_retention_duration=False) == removed
    stored = s3_server.directory / "data" / bucket / "table"
    assert not (stored / removed[0]).exists()
    assert [f.rsplit("/", 1)[-1] for f in delta.file_uris()] == [p.name for p in stored.glob("*.parquet")]


def test_a_conditional_put_of_an_existing_key_is_refused(s3_server: S3Server) -> None:
    """`If-None-Match: *` (put if absent, how delta-rs commits a log entry): refused with 412 when
    the key exists, as AWS S3 does, so of two writers of one Delta version one loses and retries."""
    bucket = s3_server.bucket()
    assert s3_server.put(bucket, "log/1.json", b"first", {"If-None-Match": "*"}) == 200
    second = s3_server.put(bucket, "log/1.json", b"second", {"If-None-Match": "*"})

    kept = (s3_server.directory / "data" / bucket / "log" / "1.json").read_bytes()
    assert (second, kept) == (412, b"first")


def test_a_directory_marker_is_listed_under_its_own_prefix(s3_server: S3Server) -> None:
    """S3A finds a directory with a HEAD, then a LIST of `dir/`, so an empty one (the marker `dir/` its
    mkdirs writes) only where that listing holds the marker, as AWS S3's does. Spark's checkpoint
    manager on S3 needs it: Hadoop's FileContext creates `offsets/0` only in a directory it finds."""
    bucket = s3_server.bucket()
    assert s3_server.put(bucket, "checkpoint/offsets/", b"") == 200

    assert s3_server.list_keys(bucket, "checkpoint/offsets/") == ["checkpoint/offsets/"]


def test_an_http_endpoint_set_in_the_environment_alone_passes_the_check(
        s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """`AWS_ENDPOINT_URL=http://...` and `AWS_ALLOW_HTTP=true`, as delta-rs reads them, with no
    endpoint and no `allow_http` in the file."""
    settings = {k: v for k, v in s3_server.storage_settings().items() if k not in ("endpoint", "allow_http")}
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")

    check_storage(job_config(settings, s3_server.bucket()))  # nothing to say


def test_the_job_checks_its_locations_before_spark_starts(s3_server: S3Server) -> None:
    bucket = s3_server.bucket()
    settings = s3_server.storage_settings()
    check_storage(job_config(settings, bucket))  # nothing to say

    with pytest.raises(StorageUnavailable) as wrong_secret:
        check_storage(job_config({**settings, "secret_access_key": "not-the-secret"}, bucket))
    message = str(wrong_secret.value)
    assert message.startswith(f"cannot list s3://{bucket}/events (sink.path) at {s3_server.endpoint}: ")
    assert "check storage.s3.access_key_id and storage.s3.secret_access_key" in message
    assert "not-the-secret" not in message and "\n" not in message

    with pytest.raises(StorageUnavailable, match=r"check storage\.s3\.endpoint") as nothing_there:
        check_storage(job_config({**settings, "endpoint": f"http://127.0.0.1:{free_port()}"}, bucket), timeout_s=2)
    assert "\n" not in str(nothing_there.value)

    with pytest.raises(StorageUnavailable, match=r"storage\.s3\.allow_http"):
        check_storage(job_config({**settings, "allow_http": False}, bucket))

    with pytest.raises(StorageUnavailable, match=r"bucket 'no-such-bucket' does not exist .*; check sink\.path$"):
        check_storage(job_config(settings, "no-such-bucket"))


def test_the_check_asks_a_busy_server_again_within_the_retry_deadline(
        faulty_s3: tuple[S3Server, FaultProxy]) -> None:
    """A throttling or failing server (503 SlowDown, 500) does not stop the job before it starts:
    the check asks again under `storage.s3.retry_deadline`, past which it says so in one line."""
    server, proxy = faulty_s3
    bucket = server.bucket()
    proxy.inject(SLOW_DOWN, count=2, method="GET")
    check_storage(job_config(server.storage_settings(), bucket))  # nothing to say
    assert len(proxy.faults(SLOW_DOWN)) == 2

    proxy.outage(INTERNAL, 60)
    with pytest.raises(StorageUnavailable) as failed:
        check_storage(job_config({**server.storage_settings(), "retry_deadline": "2s"}, bucket))
    message = str(failed.value)
    assert message.startswith(f"cannot list s3://{bucket}/events (sink.path): object store unavailable: "), message
    assert "\n" not in message and "storage.s3.retry_deadline" in message and len(proxy.faults(INTERNAL)) > 1


def test_the_dead_letter_commands_check_the_locations_before_spark_starts(s3_server: S3Server, tmp_path: Path) -> None:
    """`jobs/dead_letters.py` reads `storage.s3` as the job does: refused credentials are one line, exit 4."""
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job_yaml({**s3_server.storage_settings(), "secret_access_key": "not-the-secret"},
                                            s3_server.bucket())))
    listed = subprocess.run([sys.executable, str(ROOT / "jobs" / "dead_letters.py"), "--config", str(path), "list"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120,
                            env={k: v for k, v in os.environ.items() if not k.startswith("AWS_")})
    assert listed.returncode == ExitCode.STORAGE, listed.stderr[-2000:]
    assert listed.stderr.startswith("dead_letters: cannot list s3://") and listed.stderr.count("\n") == 1, listed.stderr
    assert "check storage.s3.access_key_id" in listed.stderr and "not-the-secret" not in listed.stderr
