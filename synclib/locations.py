"""Files at a location Spark and pyarrow both understand: local paths, `file:` URIs and the object
stores pyarrow supports (credentials from the environment: for `s3://` and `s3a://`, the `AWS_*`
variables the job sets from `storage.s3`, as delta-rs reads them). On Databricks, `dbfs:/x` is read
through its FUSE mount `/dbfs/x`; `/Volumes/...` and `/dbfs/...` paths are local paths.

A file on S3 is read with one GET through obstore (the object_store crate delta-rs uses, from the
same variables); pyarrow's input stream would first HEAD it. synclib's own requests through obstore
are sent under the job's retry policy (`synclib.store_retry.send`), obstore's own retries off."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Mapping
from functools import cache
from typing import Any
from urllib.parse import urlsplit

import obstore
from obstore.exceptions import NotFoundError
from obstore.store import S3Store
from pyarrow import fs

from synclib.store_retry import RetryPolicy, send


def normalize_location(location: str) -> str:
    """`location` as Spark, pyarrow and delta-rs all read it: local paths made absolute, `dbfs:/` via
    FUSE, `s3a://` as `s3://` (pyarrow knows only the latter; the job maps both to Hadoop's S3A)."""
    if location[:6].lower() == "s3a://":
        return "s3://" + location[6:]
    if location.startswith("dbfs:/"):
        return "/dbfs/" + location[len("dbfs:/"):].lstrip("/")
    if ":" not in location.split("/", 1)[0]:
        return os.path.abspath(location)
    return location


def hadoop_location(location: str) -> str:
    """`location` as Spark's JVM gets a streaming checkpoint: normalized, with `s3://` as `s3a://`. Both
    are S3A there, but Hadoop's FileContext, which Spark's checkpoint managers use, binds S3A to `s3a://`
    only: on `s3://` Spark falls back to renames through the FileSystem API and warns at every start."""
    uri = normalize_location(location)
    return "s3a://" + uri[len("s3://"):] if uri.startswith("s3://") else uri


def on_object_store(location: str) -> bool:
    """Whether `location` (normalized) is a URI of a remote store (`s3://`, `gs://`, `abfss://`, ...),
    not a local path or `file:` URI: no atomic rename there, and put-if-absent only where the
    server enforces it."""
    scheme = urlsplit(location).scheme.lower()
    return bool(scheme) and scheme != "file"


def filesystem(location: str) -> tuple[fs.FileSystem, str]:
    """pyarrow's filesystem for `location` and the path in it: for `s3://` and `s3a://` the S3
    filesystem of the process's `AWS_*` variables (`s3_filesystem`), else pyarrow's own choice."""
    uri = normalize_location(location)
    if uri.startswith("s3://"):
        return s3_filesystem(os.environ), uri[len("s3://"):].rstrip("/")
    files, path = fs.FileSystem.from_uri(uri)
    return files, str(path)


def read_text(location: str) -> str | None:
    """The UTF-8 text of the file at `location`, None when there is none."""
    if (object_key := _s3_object(location)) is not None:
        store, key = object_key
        try:
            return send(store_name(store), f"GET {key}", lambda: bytes(obstore.get(store, key).bytes())).decode("utf-8")
        except (FileNotFoundError, NotFoundError):
            return None
    files, path = filesystem(location)
    try:
        with files.open_input_stream(path) as stream:
            return bytes(stream.read()).decode("utf-8")
    except FileNotFoundError:
        return None


def _s3_object(location: str) -> tuple[S3Store, str] | None:
    """obstore's client for the bucket of an `s3://` or `s3a://` location, and the object's key."""
    uri = normalize_location(location)
    if not uri.startswith("s3://"):
        return None
    bucket, _, key = uri[len("s3://"):].partition("/")
    return _bucket(bucket, os.environ.get("AWS_ENDPOINT_URL")), key


@cache
def _bucket(bucket: str, endpoint: str | None) -> S3Store:
    """obstore's client for `bucket` at `endpoint` (the other `AWS_*` variables as first asked)."""
    return s3_store(f"s3://{bucket}")


def s3_store(url: str) -> S3Store:
    """obstore's client for `url` (`s3://bucket[/prefix]`) from the `AWS_*` variables, its own retries
    off: synclib's requests are retried by `synclib.store_retry.send`, once."""
    store: S3Store = S3Store.from_url(url, retry_config={"max_retries": 0})
    return store


def store_name(store: S3Store) -> str:
    """`s3://bucket/prefix at endpoint`, for a line about a request to `store`."""
    prefix = f"/{store.prefix}" if store.prefix else ""
    return f"s3://{store.config.get('bucket')}{prefix} at {os.environ.get('AWS_ENDPOINT_URL', 'AWS S3')}"


def write_text(location: str, text: str) -> None:
    """Write `text` to the file at `location` whole: on S3 one PUT (which replaces an object whole);
    elsewhere a temporary file of its own beside it, then moved over it (a reader sees the old file
    or the new one, never half of one, where a move is a rename)."""
    if (object_key := _s3_object(location)) is not None:
        store, key = object_key
        data = text.encode("utf-8")
        send(store_name(store), f"PUT {key}", lambda: obstore.put(store, key, data))  # the same whole object again
        return
    files, path = filesystem(location)
    directory, name = path.rsplit("/", 1)
    files.create_dir(directory, recursive=True)
    temporary = f"{directory}/.{name}-{uuid.uuid4().hex}.tmp"
    try:
        with files.open_output_stream(temporary) as stream:
            stream.write(text.encode("utf-8"))
        files.move(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            files.delete_file(temporary)
        raise


_SDK_VARIABLES = ("AWS_REQUEST_CHECKSUM_CALCULATION", "AWS_RESPONSE_CHECKSUM_VALIDATION")


def s3_filesystem(variables: Mapping[str, str], timeout_s: float | None = None) -> fs.S3FileSystem:
    """pyarrow's S3 filesystem for the standard `AWS_*` variables in `variables` (endpoint, region,
    credentials, `AWS_ALLOW_HTTP`, `AWS_VIRTUAL_HOSTED_STYLE_REQUEST`), as delta-rs reads them;
    retried as the job's policy says (`storage.s3.retry_attempts`); `timeout_s` bounds each request
    and turns retries off (a check, not a job)."""
    endpoint = variables.get("AWS_ENDPOINT_URL")
    options: dict[str, Any] = {
        "region": variables.get("AWS_REGION", "us-east-1"),
        "access_key": variables.get("AWS_ACCESS_KEY_ID"),
        "secret_key": variables.get("AWS_SECRET_ACCESS_KEY"),
        "session_token": variables.get("AWS_SESSION_TOKEN"),
        "force_virtual_addressing": bool(endpoint) and variables.get("AWS_VIRTUAL_HOSTED_STYLE_REQUEST") == "true",
        # a file written is one PUT when it is smaller than a part (a one-row batch's), not a
        # multipart upload of three requests; an error opening it shows when it is closed
        "allow_delayed_open": True,
    }
    if endpoint:
        scheme, _, address = endpoint.partition("://")
        options.update(endpoint_override=address, scheme=scheme)
    for name in _SDK_VARIABLES:  # the AWS SDK reads these from the process environment only
        if name in variables:
            os.environ[name] = variables[name]
    if timeout_s is not None:
        options.update(connect_timeout=timeout_s, request_timeout=timeout_s,
                       retry_strategy=fs.AwsStandardS3RetryStrategy(max_attempts=1))
    else:  # the AWS SDK's standard retries (exponential backoff, jitter), as many as fit the job's deadline
        options.update(retry_strategy=fs.AwsStandardS3RetryStrategy(max_attempts=RetryPolicy.of(variables).sdk_attempts()))
    return fs.S3FileSystem(**{key: value for key, value in options.items() if value is not None})
