"""The `storage:` section: how `s3://` and `s3a://` locations are reached (the table, the
dead-letter table, Spark's checkpoint), defined once and mapped once to each client:

- `S3Config.environment()`: the standard `AWS_*` variables, which are also delta-rs's storage
  option names and what pyarrow's S3 filesystem reads; the job sets them for its own process and
  for the Python workers (`synclib.app.storage`);
- `S3Config.hadoop_options()`: Hadoop's S3A settings (`fs.s3a.*`) for Spark's JVM: the
  checkpoint, Spark's Delta writer and reader.

The retry policy (`retry_deadline`, `retry_attempts`) goes the same two ways: to the Python side as
two variables beside the `AWS_*` ones (`synclib.store_retry`, which maps them to obstore, deltalake
and pyarrow), to S3A as its retry limits and intervals.

A setting left unset falls back to the process's own `AWS_*` variable, as every AWS tool does
(`allow_http` to `AWS_ALLOW_HTTP`, read as delta-rs reads it).
Commits stay atomic: delta-rs commits with a conditional PUT (`If-None-Match: *`,
`aws_conditional_put`), never with an unsafe rename (`AWS_S3_ALLOW_UNSAFE_RENAME` is refused);
Spark's Delta writer keeps Delta's default LogStore for S3, the single-driver one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from synclib.settings.model import Invalid, Section
from synclib.settings.values import Boolean, PositiveDuration, PositiveInt, SecretString, String
from synclib.store_retry import ATTEMPTS, ATTEMPTS_VARIABLE, DEADLINE_S, DEADLINE_VARIABLE

S3_SCHEMES = ("s3", "s3a")
# Set by synclib for every s3 location; a process environment naming another value is refused.
UNSAFE_RENAME = "AWS_S3_ALLOW_UNSAFE_RENAME"
_CONDITIONAL_PUT = "AWS_CONDITIONAL_PUT"
_S3A = "org.apache.hadoop.fs.s3a.S3AFileSystem"
_ALLOW_HTTP = "AWS_ALLOW_HTTP"
MAX_ATTEMPTS = 20
_TRUE = ("1", "true", "on", "yes", "y")  # a true boolean variable, as delta-rs's object store reads one


def is_s3(location: str) -> bool:
    """True for an `s3://` or `s3a://` location."""
    return urlsplit(location).scheme.lower() in S3_SCHEMES


def _endpoint(raw: Any) -> str:
    if not isinstance(raw, str) or urlsplit(raw).scheme not in ("http", "https") or not urlsplit(raw).netloc:
        raise Invalid("an http:// or https:// URL")
    return raw.rstrip("/")


class S3Config(Section):
    """`storage.s3`: the S3 API server of `s3://` and `s3a://` locations. Unset settings fall back
    to the standard variables `AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ALLOW_HTTP`, `AWS_ACCESS_KEY_ID`,
    `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`."""

    endpoint: String | None = None
    """The S3 API's URL, for an S3-compatible server (unset: `AWS_ENDPOINT_URL`, else AWS S3 itself)."""
    region: String | None = None
    """The bucket's region (unset: `AWS_REGION`, else `us-east-1`)."""
    path_style: Boolean = False
    """Address buckets as `endpoint/bucket/key`, as most S3-compatible servers need (AWS S3: virtual hosts)."""
    allow_http: Boolean | None = None
    """Allow an `http://` endpoint (a local server) (unset: `AWS_ALLOW_HTTP`, else off: only `https://`)."""
    access_key_id: String | None = None
    """The access key id, e.g. `${S3_ACCESS_KEY_ID}` (unset: `AWS_ACCESS_KEY_ID`, else the SDKs' default chain)."""
    secret_access_key: SecretString | None = None
    """The secret access key, e.g. `${S3_SECRET_ACCESS_KEY}` (unset: `AWS_SECRET_ACCESS_KEY`)."""
    session_token: SecretString | None = None
    """A session token of temporary credentials (unset: `AWS_SESSION_TOKEN`)."""
    retry_deadline: PositiveDuration = DEADLINE_S
    """How long a request failing transiently (503 SlowDown, 5xx, a reset, a timeout) is retried, with
    exponential backoff and jitter, before the job stops with exit code 4 (synclib's own requests,
    delta-rs, S3A)."""
    retry_attempts: PositiveInt = ATTEMPTS
    """The most attempts of one request within `retry_deadline` (S3A: its retry limits; pyarrow: its attempts)."""

    @field_validator("retry_attempts", mode="after")
    @classmethod
    def _attempts(cls, value: int) -> int:
        if value > MAX_ATTEMPTS:  # S3A's backoff doubles with each retry: its interval is scaled down by 2^attempts
            raise Invalid(f"an integer from 1 to {MAX_ATTEMPTS}")
        return value

    @field_validator("endpoint", mode="after")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return None if value is None else _endpoint(value)

    def resolved(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """Each setting's value, from the section or else from `environ` (default: os.environ);
        keys are the section's setting names, absent when neither has one."""
        env = os.environ if environ is None else environ
        values = {
            "endpoint": self.endpoint or env.get("AWS_ENDPOINT_URL"),
            "region": self.region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION"),
            "access_key_id": self.access_key_id or env.get("AWS_ACCESS_KEY_ID"),
            "secret_access_key": (self.secret_access_key.get_secret_value() if self.secret_access_key
                                  else env.get("AWS_SECRET_ACCESS_KEY")),
            "session_token": (self.session_token.get_secret_value() if self.session_token
                              else env.get("AWS_SESSION_TOKEN")),
        }
        return {key: value for key, value in values.items() if value}

    def http_allowed(self, environ: Mapping[str, str] | None = None) -> bool:
        """`allow_http`, or else `AWS_ALLOW_HTTP` of `environ` (default: os.environ)."""
        if self.allow_http is not None:
            return self.allow_http
        env = os.environ if environ is None else environ
        return env.get(_ALLOW_HTTP, "").strip().lower() in _TRUE

    def problem(self, environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
        """(setting, what is wrong) when these settings cannot be used as they are, else None."""
        env = os.environ if environ is None else environ
        values = self.resolved(env)
        endpoint = values.get("endpoint")
        if endpoint and urlsplit(endpoint).scheme == "http" and not self.http_allowed(env):
            return "storage.s3.allow_http", (f"the endpoint {endpoint} is plain HTTP: set it (or {_ALLOW_HTTP}) "
                                             "true for a local server")
        if bool(values.get("access_key_id")) != bool(values.get("secret_access_key")):
            return ("storage.s3.secret_access_key" if values.get("access_key_id") else "storage.s3.access_key_id",
                    "an access key id and a secret access key go together")
        if env.get(UNSAFE_RENAME, "").strip().lower() in ("1", "true", "yes"):
            return UNSAFE_RENAME, ("commits by rename are not atomic on S3: unset it "
                                   "(synclib commits with a conditional PUT)")
        return None

    def environment(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """The `AWS_*` variables (= delta-rs storage options) for these settings."""
        values = self.resolved(environ)
        names = {"endpoint": "AWS_ENDPOINT_URL", "region": "AWS_REGION", "access_key_id": "AWS_ACCESS_KEY_ID",
                 "secret_access_key": "AWS_SECRET_ACCESS_KEY", "session_token": "AWS_SESSION_TOKEN"}
        variables = {names[key]: value for key, value in values.items()}
        variables.setdefault("AWS_REGION", "us-east-1")
        if "endpoint" in values:  # S3-compatible servers: no checksums the AWS SDKs add by default since 2025
            variables.update(AWS_REQUEST_CHECKSUM_CALCULATION="when_required",
                             AWS_RESPONSE_CHECKSUM_VALIDATION="when_required")
        variables.update({
            _ALLOW_HTTP: "true" if self.http_allowed(environ) else "false",
            "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false" if self.path_style else "true",
            _CONDITIONAL_PUT: "etag",  # commits by If-None-Match: * (put if absent)
            UNSAFE_RENAME: "false",
            DEADLINE_VARIABLE: f"{self.retry_deadline:g}",
            ATTEMPTS_VARIABLE: str(self.retry_attempts),
        })
        return variables

    def hadoop_options(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        """Hadoop's S3A settings (`fs.s3a.*`, and `fs.s3.impl` so `s3://` is S3A too). Delta's LogStore
        for both schemes stays its default, `S3SingleDriverLogStore`."""
        values = self.resolved(environ)
        # S3A has no deadline: its backoff after retry i is about interval * 2^(i+1) (Hadoop's
        # exponential retry policy), so the interval is scaled for the pauses to add up to the deadline.
        # The SDK's own retries inside each S3A attempt are off (`attempts.maximum` 0): one policy.
        interval_ms = max(1, round(self.retry_deadline * 1000 / (2 ** (self.retry_attempts + 1) - 2)))
        options = {
            "fs.s3a.attempts.maximum": "0",
            "fs.s3a.retry.limit": str(self.retry_attempts),
            "fs.s3a.retry.interval": f"{interval_ms}ms",
            "fs.s3a.retry.throttle.limit": str(self.retry_attempts),
            "fs.s3a.retry.throttle.interval": f"{interval_ms}ms",
            # Reads through S3A's own input stream and retry policy: hadoop-aws 3.5's default stream,
            # the analytics accelerator's, retries under a policy of its own, and a connection reset
            # of a checkpoint entry's GET failed the query at its first attempt.
            "fs.s3a.input.stream.type": "classic",
            "fs.s3.impl": _S3A,
            "fs.s3a.path.style.access": "true" if self.path_style else "false",
            "fs.s3a.endpoint.region": values.get("region", "us-east-1"),
        }
        if "endpoint" in values:
            options["fs.s3a.endpoint"] = values["endpoint"]
            options["fs.s3a.connection.ssl.enabled"] = str(urlsplit(values["endpoint"]).scheme == "https").lower()
        if "access_key_id" in values and "secret_access_key" in values:
            options["fs.s3a.access.key"] = values["access_key_id"]
            options["fs.s3a.secret.key"] = values["secret_access_key"]
            if "session_token" in values:
                options["fs.s3a.session.token"] = values["session_token"]
                options["fs.s3a.aws.credentials.provider"] = (
                    "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider")
            else:
                options["fs.s3a.aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        return options


class StorageConfig(Section):
    """`storage`: how object-store locations are reached (see [Object storage](operations/object-storage.md))."""

    s3: S3Config = Field(default_factory=S3Config)
