"""`storage.s3`: one definition, mapped once to delta-rs's options (the AWS_* variables) and to
Hadoop's S3A settings; unset settings come from the environment; secrets never shown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from synclib.locations import hadoop_location, normalize_location
from synclib.settings import ConfigError, load_config
from synclib.settings.storage import S3Config, is_s3

SECRET, TOKEN = "wJalr-s3cr3t-EXAMPLEKEY", "session-t0ken-EXAMPLE"
BASE = {
    "kafka": {"bootstrap_servers": "k1:9092"},
    "source": {"subscribe": "events", "commit_log_topic": "commit-log", "commit_groups": ["leader"]},
    "sink": {"path": "s3://bucket/events"},
    "checkpoint": {"location": "s3a://bucket/checkpoint"},
}


def load(tmp_path: Path, storage: dict[str, object]) -> S3Config:
    path = tmp_path / "forwarder.yaml"
    path.write_text(yaml.safe_dump({**BASE, "storage": {"s3": storage}}))
    return load_config(path).storage.s3


def test_settings_from_the_file_and_variables_map_to_delta_rs_and_s3a(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("S3_SECRET", SECRET)
    s3 = load(tmp_path, {"endpoint": "http://127.0.0.1:9000", "path_style": True, "allow_http": True,
                         "access_key_id": "AKIDEXAMPLE", "secret_access_key": "${S3_SECRET}"})
    environ = {"AWS_SESSION_TOKEN": TOKEN}

    assert s3.environment(environ) == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_SESSION_TOKEN": TOKEN,
        "AWS_ALLOW_HTTP": "true", "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false", "AWS_CONDITIONAL_PUT": "etag",
        "AWS_S3_ALLOW_UNSAFE_RENAME": "false", "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required",
        "AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required", "SYNCLIB_S3_RETRY_DEADLINE_S": "60",
        "SYNCLIB_S3_RETRY_ATTEMPTS": "10"}
    assert s3.hadoop_options(environ) == {
        "fs.s3a.attempts.maximum": "0", "fs.s3a.retry.limit": "10", "fs.s3a.retry.interval": "29ms",
        "fs.s3a.retry.throttle.limit": "10", "fs.s3a.retry.throttle.interval": "29ms",
        "fs.s3a.input.stream.type": "classic", "fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "fs.s3a.path.style.access": "true",
        "fs.s3a.endpoint.region": "us-east-1", "fs.s3a.endpoint": "http://127.0.0.1:9000",
        "fs.s3a.connection.ssl.enabled": "false", "fs.s3a.access.key": "AKIDEXAMPLE",
        "fs.s3a.secret.key": SECRET, "fs.s3a.session.token": TOKEN,
        "fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider"}
    assert s3.problem(environ) is None


def test_the_standard_variables_fill_what_the_file_leaves_unset(tmp_path: Path) -> None:
    s3 = load(tmp_path, {"region": "eu-west-1"})
    environ = {"AWS_ENDPOINT_URL": "https://s3.example.com", "AWS_REGION": "us-west-2",
               "AWS_ACCESS_KEY_ID": "AKIDENV", "AWS_SECRET_ACCESS_KEY": SECRET}

    variables = s3.environment(environ)
    assert (variables["AWS_ENDPOINT_URL"], variables["AWS_REGION"], variables["AWS_ACCESS_KEY_ID"],
            variables["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"]) == ("https://s3.example.com", "eu-west-1", "AKIDENV", "true")
    options = s3.hadoop_options(environ)
    assert (options["fs.s3a.connection.ssl.enabled"], options["fs.s3a.aws.credentials.provider"]) == (
        "true", "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider")
    assert "AWS_ENDPOINT_URL" not in S3Config().environment({})  # AWS S3 itself: the SDKs' own endpoints
    assert "fs.s3a.access.key" not in S3Config().hadoop_options({})  # the SDKs' default credential chain


@pytest.mark.parametrize(("storage", "environ", "setting"), [
    pytest.param({"endpoint": "http://127.0.0.1:9000"}, {}, "storage.s3.allow_http", id="plain-http"),
    pytest.param({"access_key_id": "AKID"}, {}, "storage.s3.secret_access_key", id="key-without-secret"),
    pytest.param({}, {"AWS_S3_ALLOW_UNSAFE_RENAME": "true"}, "AWS_S3_ALLOW_UNSAFE_RENAME", id="unsafe-rename"),
])
def test_settings_that_cannot_work_name_the_setting(
        tmp_path: Path, storage: dict[str, object], environ: dict[str, str], setting: str) -> None:
    problem = load(tmp_path, storage).problem(environ)
    assert problem is not None and problem[0] == setting


LOCAL = "http://127.0.0.1:9000"


@pytest.mark.parametrize(("storage", "environ", "allowed"), [
    pytest.param({}, {"AWS_ENDPOINT_URL": LOCAL, "AWS_ALLOW_HTTP": "true"}, True, id="environment-only"),
    pytest.param({"endpoint": LOCAL}, {"AWS_ALLOW_HTTP": "TRUE"}, True, id="endpoint-in-file"),
    pytest.param({}, {"AWS_ENDPOINT_URL": LOCAL, "AWS_ALLOW_HTTP": "1"}, True, id="one"),
    pytest.param({}, {"AWS_ENDPOINT_URL": LOCAL, "AWS_ALLOW_HTTP": "false"}, False, id="variable-false"),
    pytest.param({}, {"AWS_ENDPOINT_URL": LOCAL}, False, id="neither"),
    pytest.param({"allow_http": False}, {"AWS_ENDPOINT_URL": LOCAL, "AWS_ALLOW_HTTP": "true"}, False,
                 id="file-false-wins"),
    pytest.param({"allow_http": True}, {"AWS_ENDPOINT_URL": LOCAL, "AWS_ALLOW_HTTP": "false"}, True,
                 id="file-true-wins"),
])
def test_aws_allow_http_in_the_environment_counts_as_the_setting(
        tmp_path: Path, storage: dict[str, object], environ: dict[str, str], allowed: bool) -> None:
    """An http:// endpoint is allowed by `storage.s3.allow_http` or, when the file leaves it unset, by
    `AWS_ALLOW_HTTP` as delta-rs reads it; with neither the one line names both."""
    s3 = load(tmp_path, storage)

    assert s3.environment(environ)["AWS_ALLOW_HTTP"] == str(allowed).lower()
    problem = s3.problem(environ)
    if allowed:
        assert problem is None
    else:
        assert problem == ("storage.s3.allow_http", f"the endpoint {LOCAL} is plain HTTP: set it (or "
                                                    "AWS_ALLOW_HTTP) true for a local server")


def test_a_bad_endpoint_is_refused_when_the_file_is_read(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"storage\.s3\.endpoint: expected an http:// or https:// URL"):
        load(tmp_path, {"endpoint": "127.0.0.1:9000"})


def test_secrets_are_masked_in_the_logged_configuration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "forwarder.yaml"
    path.write_text(yaml.safe_dump({**BASE, "storage": {"s3": {"secret_access_key": SECRET, "session_token": TOKEN}}}))
    config = load_config(path)

    shown = json.dumps(config.redacted()) + repr(config)
    assert SECRET not in shown and TOKEN not in shown
    assert config.redacted()["storage"]["s3"]["secret_access_key"] == "***"


def test_s3a_locations_are_read_as_s3() -> None:
    assert normalize_location("s3a://bucket/checkpoint") == "s3://bucket/checkpoint"
    assert normalize_location("s3://bucket/table") == "s3://bucket/table"
    assert is_s3("s3a://b/x") and is_s3("S3://b/x") and not is_s3("gs://b/x") and not is_s3("/tmp/x")


def test_spark_gets_an_s3_checkpoint_as_s3a() -> None:
    """Hadoop's FileContext (Spark's checkpoint managers) binds S3A to `s3a://` only."""
    assert hadoop_location("s3://bucket/checkpoint") == hadoop_location("s3a://bucket/checkpoint") == \
        "s3a://bucket/checkpoint"
    assert hadoop_location("gs://bucket/checkpoint") == "gs://bucket/checkpoint"
    assert hadoop_location("relative/checkpoint") == normalize_location("relative/checkpoint")
