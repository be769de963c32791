"""Operations: Kafka security for every client, lag in Kafka's tools, chained forwarders and
leaders without a commit log, through the job as operators run it (the Databricks jobs:
tests/unit/test_databricks.py)."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path

import pytest

from synclib.delta.table import read_arrow
from synclib.kafka.client_config import for_admin, for_consumer, for_producer
from synclib.kafka.reader import consumer_settings
from synclib.settings import ConfigError, SourceOptions, load_config
from tests import mock_cluster
from tests.forwarder_runs import commit_group, committed_offsets, run_forwarder, table_offsets, write_config
from tests.support import produce_values, publish_commit

# --- Kafka security --------------------------------------------------------------------------

SECURITY_CASES = {
    "SASL_SSL SCRAM-SHA-512": (
        {"protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "username": "forwarder",
         "password": "${TEST_KAFKA_PASSWORD}", "ssl_cafile": "/etc/kafka/ca.pem"},
        {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "forwarder",
         "sasl_plain_password": "s3cr3t", "ssl_cafile": "/etc/kafka/ca.pem"}),
    "SASL_SSL SCRAM-SHA-256 with a client certificate": (
        {"protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256", "username": "forwarder",
         "password": "${TEST_KAFKA_PASSWORD}", "ssl_cafile": "/etc/kafka/ca.pem",
         "ssl_certfile": "/etc/kafka/client.pem", "ssl_keyfile": "/etc/kafka/client.key",
         "ssl_password": "${TEST_KAFKA_PASSWORD}"},
        {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": "forwarder",
         "sasl_plain_password": "s3cr3t", "ssl_cafile": "/etc/kafka/ca.pem",
         "ssl_certfile": "/etc/kafka/client.pem", "ssl_keyfile": "/etc/kafka/client.key", "ssl_password": "s3cr3t"}),
    "SASL_PLAINTEXT PLAIN": (
        {"protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "username": "forwarder",
         "password": "${TEST_KAFKA_PASSWORD}"},
        {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_plain_username": "forwarder",
         "sasl_plain_password": "s3cr3t"}),
    "SSL with a client certificate, no hostname check": (
        {"protocol": "SSL", "ssl_cafile": "/etc/kafka/ca.pem", "ssl_certfile": "/etc/kafka/client.pem",
         "ssl_keyfile": "/etc/kafka/client.key", "ssl_check_hostname": False},
        {"security_protocol": "SSL", "ssl_cafile": "/etc/kafka/ca.pem", "ssl_certfile": "/etc/kafka/client.pem",
         "ssl_keyfile": "/etc/kafka/client.key", "ssl_check_hostname": False}),
}


def security_config(tmp_path: Path, security: dict) -> Path:
    return write_config(tmp_path, "secure", "broker-1:9096", {
        "subscribe": "events", "commit_log_topic": "snuba-commit-log", "commit_groups": ["snuba-consumers"],
        "consumer_group": "forwarder", "commit_to_consumer_group": True, "publish_commit_log": "forwarder-log"},
        kafka={"security": security})


@pytest.mark.parametrize(("security", "expected"), SECURITY_CASES.values(), ids=SECURITY_CASES.keys())
def test_security_settings_reach_every_kafka_client_of_the_job(tmp_path, monkeypatch, security, expected):
    monkeypatch.setenv("TEST_KAFKA_PASSWORD", "s3cr3t")
    config = load_config(security_config(tmp_path, security))
    options = SourceOptions.from_spark(config.source_options("broker-1:9096"))
    client = options.client_config
    clients = {
        # planner metadata, follower and group poller admin, consumer-group commits
        "admin": for_admin(client),
        # commit-log follower
        "consumer": for_consumer(client),
        # executors reading the events
        "executor consumer": consumer_settings(client),
        # publishing this forwarder's own commit log
        "producer": for_producer(client),
    }
    for name, kwargs in clients.items():
        assert {k: kwargs.get(k) for k in expected} == expected, name
        assert kwargs["bootstrap_servers"] == ["broker-1:9096"], name
    assert "s3cr3t" not in json.dumps(config.redacted()) + repr(config)


@pytest.mark.parametrize(("security", "key", "fragment"), [
    ({"protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI", "username": "u", "password": "p"},
     "kafka.security.sasl_mechanism", "'PLAIN', 'SCRAM-SHA-256', 'SCRAM-SHA-512'"),
    ({"protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "password": "p"}, "kafka.security.username",
     "required when kafka.security.protocol is SASL_SSL"),
    ({"protocol": "SSL", "ssl_keyfile": "client.key"}, "kafka.security.ssl_certfile",
     "required with kafka.security.ssl_keyfile"),
    ({"protocol": "SSL", "ssl_password": "p"}, "kafka.security.ssl_password",
     "only used with kafka.security.ssl_keyfile"),
    ({"protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "username": "u", "password": "p",
      "ssl_check_hostname": False}, "kafka.security.ssl_check_hostname", "is an SSL setting"),
], ids=["unsupported mechanism", "sasl without username", "key without certificate",
        "key password without key", "hostname check without ssl"])
def test_invalid_security_combinations_are_config_errors(tmp_path, security, key, fragment):
    with pytest.raises(ConfigError, match=f"secure.yaml: {re.escape(key)}: .*{re.escape(fragment)}"):
        load_config(security_config(tmp_path, security))


# --- through the job: lag in Kafka's tools, chained forwarders, group offsets ---------------

def leader_source(events: str, log: str, leader: str, group: str, **more: object) -> dict:
    return {"subscribe": events, "commit_log_topic": log, "commit_groups": [leader], "consumer_group": group,
            **more}


@pytest.mark.slow
@mock_cluster.NO_GROUP_OFFSET_LISTING
def test_chained_forwarders_and_lag_in_the_consumer_group(bootstrap_servers, producer, new_topic, tmp_path):
    """Forwarder A follows the leader, commits to its group and publishes its own commit log;
    forwarder B follows A's commit log. B never holds more than A, and ends equal to it."""
    events, leader_log, a_log = new_topic("events", 2), new_topic("leader-log"), new_topic("a-log")
    leader, a_group, b_group = (f"{name}-{uuid.uuid4().hex[:8]}" for name in ("leader", "fwd-a", "fwd-b"))
    a = write_config(tmp_path, "a", bootstrap_servers, leader_source(
        events, leader_log, leader, a_group, commit_to_consumer_group=True, publish_commit_log=a_log))
    b = write_config(tmp_path, "b", bootstrap_servers, leader_source(events, a_log, a_group, b_group))
    a_table, b_table = str(tmp_path / "a" / "table"), str(tmp_path / "b" / "table")

    def leader_commits(offsets: dict[int, int]) -> None:
        for partition, offset in offsets.items():
            publish_commit(producer, leader_log, leader, events, partition, offset)

    produce_values(producer, events, 0, 10)
    produce_values(producer, events, 1, 10)
    leader_commits({0: 6, 1: 3})
    run_forwarder(a, "--available-now")
    first = {(events, 0): 6, (events, 1): 3}
    assert table_offsets(a_table) == first
    assert committed_offsets(bootstrap_servers, a_group) == first  # what lag tooling reads

    leader_commits({0: 10, 1: 8})  # the leader moves on; A has not run since
    run_forwarder(b, "--available-now")
    assert table_offsets(b_table) == first  # B is gated by A, not by the leader

    run_forwarder(a, "--available-now")
    second = {(events, 0): 10, (events, 1): 8}
    assert table_offsets(a_table) == committed_offsets(bootstrap_servers, a_group) == second
    run_forwarder(b, "--available-now")
    assert table_offsets(b_table) == second


@pytest.mark.slow
@mock_cluster.NO_GROUP_OFFSET_LISTING
def test_leader_without_commit_log_through_the_job(bootstrap_servers, producer, new_topic, tmp_path):
    """remote_offsets: group gates on the leader group's committed offsets, polled from Kafka."""
    events = new_topic("events", 3)
    for partition in range(3):
        produce_values(producer, events, partition, 8)
    leader = f"leader-{uuid.uuid4().hex[:8]}"
    commit_group(bootstrap_servers, leader, events, {0: 5, 1: 8})  # partition 2: nothing committed
    config = write_config(tmp_path, "fwd", bootstrap_servers, {
        "subscribe": events, "remote_offsets": "group", "commit_groups": [leader]})

    run_forwarder(config, "--available-now")

    assert table_offsets(str(tmp_path / "fwd" / "table")) == {(events, 0): 5, (events, 1): 8, (events, 2): 0}
    assert sorted(read_rows(str(tmp_path / "fwd" / "table"))) == [(0, o) for o in range(5)] + [(1, o) for o in range(8)]


def read_rows(path: str) -> list[tuple[int, int]]:
    table = read_arrow(path, columns=["partition", "offset"])
    return list(zip(table["partition"].to_pylist(), table["offset"].to_pylist(), strict=True))
