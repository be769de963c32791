"""Kafka security end to end (issue 18): the job on an Apache Kafka that authenticates.

One broker (tests.kafka_security) serves SASL_PLAINTEXT (SCRAM-SHA-256 and PLAIN), SSL with
client certificates and SASL_SSL (SCRAM-SHA-512). For each protocol one `--available-now`
forwarder run reads the events, follows the leader's commit log, publishes its own commit
log and commits its consumer group, and `python -m synclib status` connects, all with the
same settings, the secrets coming from `${VAR}` in the YAML. A wrong password, an unknown
user, an untrusted certificate and a hostname mismatch stop the job before Spark starts
with one line naming the broker, protocol and mechanism, and no secret anywhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic

from harness.apache_kafka import KafkaCluster
from synclib.kafka.admin import group_offsets
from synclib.leader.commitlog import decode_commit
from tests import librdkafka
from tests.forwarder_runs import ROOT, forwarder_command, table_offsets, write_config
from tests.kafka_security import (
    OPENSSL,
    PASSWORD,
    PLAIN_PASSWORD,
    PLAIN_USER,
    SASL_SSL_LISTENER,
    SSL_LISTENER,
    USER,
    Pki,
    make_pki,
    secured_cluster,
)
from tests.support import produce_values, publish_commit

GROUP = "snuba-consumers"
# kafka-python's names of the profiles' client settings -> librdkafka's (with '_' for '.').
LIBRDKAFKA_NAMES = {"sasl_plain_username": "sasl_username", "sasl_plain_password": "sasl_password",
                    "ssl_cafile": "ssl_ca_location", "ssl_certfile": "ssl_certificate_location",
                    "ssl_keyfile": "ssl_key_location"}
WRONG_PASSWORD = "not-the-password-93b1"
# One line within this long: the check's own deadline is kafka.connect_timeout (10s); a
# rejected credential or certificate is not retried.
FAILURE_MAX_S = 8.0

pytestmark = [pytest.mark.slow, pytest.mark.skipif(OPENSSL is None, reason="no openssl to make the test CA")]


@dataclass(frozen=True)
class Profile:
    """How a client reaches the secured broker: the YAML `kafka.security`, the environment its
    `${VAR}`s come from, and the same as kafka-python kwargs for the test's own clients."""

    bootstrap: str
    security: Mapping[str, Any]
    env: Mapping[str, str] = field(default_factory=dict)
    client: Mapping[str, Any] = field(default_factory=dict)

    def client_config(self) -> dict[str, Any]:
        return {"bootstrap_servers": self.bootstrap, **self.client}

    def producer(self) -> Producer:
        """The test's own librdkafka producer, with the same credentials."""
        return librdkafka.producer(self.bootstrap, **{LIBRDKAFKA_NAMES.get(k, k): v for k, v in self.client.items()})


@dataclass(frozen=True)
class Secured:
    pki: Pki
    cluster: KafkaCluster

    def profile(self, name: str) -> Profile:
        ca, cert, key = str(self.pki.ca), str(self.pki.client_cert), str(self.pki.client_key)
        sasl_env = {"KAFKA_USERNAME": USER, "KAFKA_PASSWORD": PASSWORD}
        sasl_yaml = {"username": "${KAFKA_USERNAME}", "password": "${KAFKA_PASSWORD}"}
        if name == "SCRAM-SHA-256":
            return Profile(self.cluster.bootstrap_servers,
                           {"protocol": "SASL_PLAINTEXT", "sasl_mechanism": name, **sasl_yaml}, sasl_env,
                           {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": name,
                            "sasl_plain_username": USER, "sasl_plain_password": PASSWORD})
        if name == "PLAIN":
            return Profile(self.cluster.bootstrap_servers,
                           {"protocol": "SASL_PLAINTEXT", "sasl_mechanism": name, **sasl_yaml},
                           {"KAFKA_USERNAME": PLAIN_USER, "KAFKA_PASSWORD": PLAIN_PASSWORD},
                           {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": name,
                            "sasl_plain_username": PLAIN_USER, "sasl_plain_password": PLAIN_PASSWORD})
        if name == "SSL":
            return Profile(self.cluster.bootstrap_for(SSL_LISTENER),
                           {"protocol": "SSL", "ssl_cafile": ca, "ssl_certfile": cert, "ssl_keyfile": key}, {},
                           {"security_protocol": "SSL", "ssl_cafile": ca, "ssl_certfile": cert, "ssl_keyfile": key})
        assert name == "SASL_SSL"
        return Profile(self.cluster.bootstrap_for(SASL_SSL_LISTENER),
                       {"protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "ssl_cafile": ca, **sasl_yaml},
                       sasl_env,
                       {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "ssl_cafile": ca,
                        "sasl_plain_username": USER, "sasl_plain_password": PASSWORD})


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    directory = tmp_path_factory.mktemp("secured-kafka")
    pki = make_pki(directory / "pki")
    with secured_cluster(pki, directory / "kafka") as cluster:
        yield Secured(pki, cluster)


def create_topics(profile: Profile, *names_partitions: tuple[str, int]) -> None:
    admin = KafkaAdminClient(**profile.client_config())
    try:
        admin.create_topics([NewTopic(name, partitions, 1) for name, partitions in names_partitions])
    finally:
        admin.close()


def run(command: list[str], env: Mapping[str, str]) -> tuple[int, str, str, float]:
    """Run to its end with `env` added; exit code, stdout, stderr, seconds."""
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
                               **env})
    return done.returncode, done.stdout, done.stderr, time.monotonic() - started


def status(config: Path, env: Mapping[str, str], *args: str) -> tuple[int, str, str, float]:
    return run([sys.executable, "-m", "synclib", "status", "--config", str(config), *args], env)


def published_commits(profile: Profile, topic: str) -> dict[tuple[str, int], int]:
    """The forwarder's own commit log: the newest offset per (topic, partition)."""
    consumer = KafkaConsumer(**profile.client_config(), enable_auto_commit=False, consumer_timeout_ms=3000)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        newest: dict[tuple[str, int], int] = {}
        for record in consumer:
            commit = decode_commit(record.key, record.value, record.headers)
            newest[(commit.topic, commit.partition)] = commit.offset
        return newest
    finally:
        consumer.close()


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "PLAIN", "SSL", "SASL_SSL"])
def test_the_job_status_commit_log_and_group_commits_work_over_each_protocol(
        secured: Secured, mechanism: str, tmp_path: Path) -> None:
    profile = secured.profile(mechanism)
    suffix = uuid.uuid4().hex[:8]
    events, commit_log, published = f"events-{suffix}", f"commit-log-{suffix}", f"forwarded-{suffix}"
    create_topics(profile, (events, 2), (commit_log, 1), (published, 1))
    producer = profile.producer()
    for partition in (0, 1):
        produce_values(producer, events, partition, 6)
    released = {0: 4, 1: 6}  # the leader has committed these; offsets 4 and 5 of partition 0 wait
    for partition, offset in released.items():
        publish_commit(producer, commit_log, GROUP, events, partition, offset)
    group = f"forwarder-{suffix}"
    config = write_config(tmp_path, "job", profile.bootstrap, {
        "subscribe": events, "commit_log_topic": commit_log, "commit_groups": [GROUP],
        "consumer_group": group, "commit_to_consumer_group": True, "publish_commit_log": published,
    }, kafka={"security": dict(profile.security)})
    assert PASSWORD not in config.read_text() and PLAIN_PASSWORD not in config.read_text()

    code, out, err, elapsed = run(forwarder_command(config, "--available-now"), profile.env)
    assert code == 0, f"forwarder exited {code} after {elapsed:.0f}s:\n{out[-3000:]}\n{err[-6000:]}"
    expected = {(events, p): o for p, o in released.items()}
    assert table_offsets(str(tmp_path / "job" / "table")) == expected
    admin = KafkaAdminClient(**profile.client_config())
    try:
        assert group_offsets(admin, group) == expected  # the consumer-group commit
    finally:
        admin.close()
    assert published_commits(profile, published) == expected  # the commit-log publisher

    code, status_out, status_err, _ = status(config, profile.env, "--json")
    assert code == 0, status_err
    partitions = {(p["topic"], p["partition"]): p for p in json.loads(status_out)["partitions"]}
    assert {tp: p["follower_offset"] for tp, p in partitions.items()} == expected
    assert {tp: p["leader_offset"] for tp, p in partitions.items()} == expected
    for text in (out, err, status_out, status_err):
        assert PASSWORD not in text and PLAIN_PASSWORD not in text
    secret = profile.env.get("KAFKA_PASSWORD", PASSWORD).encode()  # Spark had it in its options
    assert not [str(f) for f in tmp_path.rglob("*") if f.is_file() and secret in f.read_bytes()]


FAILURES = {
    # name: (profile, YAML changes, environment changes, what the line must say)
    "wrong password": ("SCRAM-SHA-256", {}, {"KAFKA_PASSWORD": WRONG_PASSWORD},
                       ["SASL_PLAINTEXT", "SCRAM-SHA-256", f"'{USER}'", "password"]),
    "unknown user": ("PLAIN", {}, {"KAFKA_USERNAME": "nobody"},
                     ["SASL_PLAINTEXT", "PLAIN", "'nobody'", "password"]),
    "untrusted certificate": ("SASL_SSL", {"ssl_cafile": "other_ca"}, {},
                              ["SASL_SSL", "SCRAM-SHA-512", "not trusted", "ssl_cafile"]),
    "hostname mismatch": ("SSL", {"bootstrap": "localhost"}, {},
                          ["SSL", "does not name 'localhost'", "ssl_check_hostname"]),
}


def failing_config(secured: Secured, case: str, directory: Path) -> tuple[Path, dict[str, str], str, list[str]]:
    mechanism, changes, env_changes, expected = FAILURES[case]
    profile = secured.profile(mechanism)
    security = dict(profile.security)
    bootstrap = profile.bootstrap
    if changes.get("ssl_cafile") == "other_ca":
        security["ssl_cafile"] = str(secured.pki.other_ca)
    if changes.get("bootstrap") == "localhost":
        bootstrap = bootstrap.replace("127.0.0.1", "localhost")
    suffix = uuid.uuid4().hex[:8]
    config = write_config(directory, "job", bootstrap, {
        "subscribe": f"events-{suffix}", "commit_log_topic": f"commit-log-{suffix}", "commit_groups": [GROUP],
    }, kafka={"security": security})
    return config, {**profile.env, **env_changes}, bootstrap, expected


@pytest.mark.parametrize("case", list(FAILURES))
def test_a_rejected_credential_or_certificate_is_one_line_within_seconds(
        secured: Secured, case: str, tmp_path: Path) -> None:
    """Through the status command, which runs the job's own check (`check_job_kafka`) without
    a JVM; the forwarder's exit on the same check is the next test."""
    config, env, bootstrap, expected = failing_config(secured, case, tmp_path)
    code, out, err, elapsed = status(config, env)
    assert code == 1, f"{out}\n{err}"
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("status: ") and bootstrap in lines[0], lines[0]
    for part in expected:
        assert part in lines[0], f"{part!r} not in {lines[0]!r}"
    assert elapsed < FAILURE_MAX_S, f"{elapsed:.1f}s: {lines[0]}"
    for secret in (PASSWORD, PLAIN_PASSWORD, WRONG_PASSWORD):
        assert secret not in out + err


def test_the_forwarder_stops_on_a_wrong_password_before_spark_starts_with_one_line_and_exit_3(
        secured: Secured, tmp_path: Path) -> None:
    config, env, bootstrap, expected = failing_config(secured, "wrong password", tmp_path)
    code, out, err, elapsed = run(forwarder_command(config), env)
    assert code == 3, f"exit {code}\n{out}\n{err[-3000:]}"
    # spark-submit passes the Python driver's stderr on through its own stdout
    last = out.strip().splitlines()[-1]
    assert last.startswith(f"forwarder: Kafka at {bootstrap} ") and all(part in last for part in expected), last
    assert [line for line in (out + err).splitlines() if "forwarder:" in line] == [last]
    assert "Traceback" not in out + err and "PYTHON_STREAMING_DATA_SOURCE" not in out + err
    assert not (tmp_path / "job" / "checkpoint").exists()  # Spark's query never started
    for secret in (PASSWORD, WRONG_PASSWORD):
        assert secret not in out + err
    print(f"wrong password: exit 3 after {elapsed:.1f}s (spark-submit's JVM included): {last}")


# --- unreachable or misconfigured brokers (no security needed) --------------------------------

def test_an_unreachable_broker_stops_the_forwarder_with_one_line_after_the_connect_timeout(tmp_path: Path) -> None:
    config = write_config(tmp_path, "job", "127.0.0.1:1", {
        "subscribe": "events", "commit_log_topic": "commit-log", "commit_groups": [GROUP]},
        kafka={"connect_timeout": "3s"})
    code, out, err, elapsed = run(forwarder_command(config), {})
    assert code == 3, f"exit {code}\n{out}\n{err[-3000:]}"
    line = "forwarder: cannot reach Kafka at 127.0.0.1:1 (connection refused) after 3s; check kafka.bootstrap_servers"
    assert out.strip().splitlines()[-1] == line
    assert "Traceback" not in out + err
    assert not (tmp_path / "job" / "checkpoint").exists()
    print(f"unreachable: exit 3 after {elapsed:.1f}s (spark-submit's JVM included)")


def test_a_missing_commit_log_topic_is_one_line_listing_the_topics_there(
        bootstrap_servers: str, new_topic: Any, tmp_path: Path) -> None:
    # The line lists the first topics in name order (and how many more): a name sorting before the
    # session's other topics is among them however many tests ran before.
    events = new_topic("0-events", 1)
    config = write_config(tmp_path, "job", bootstrap_servers, {
        "subscribe": events, "commit_log_topic": "no-such-commit-log", "commit_groups": [GROUP]})
    code, out, err, _ = status(config, {})
    assert code == 1, out + err
    assert err.strip().splitlines() == [err.strip()]
    assert err.startswith(f"status: topic 'no-such-commit-log' (source.commit_log_topic) does not exist on Kafka "
                          f"at {bootstrap_servers}; topics there: "), err
    assert events in err
