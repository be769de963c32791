"""The pre-flight check's lines without a broker: nothing listening, an unknown host, no secret."""

from __future__ import annotations

import time

import pytest

from synclib.kafka.preflight import KafkaUnavailable, check_kafka, describe_security


def test_nothing_listening_is_one_line_after_the_deadline() -> None:
    started = time.monotonic()
    with pytest.raises(KafkaUnavailable) as failure:
        check_kafka({"bootstrap_servers": ["127.0.0.1:1"]}, None, 1.0)
    assert str(failure.value) == ("cannot reach Kafka at 127.0.0.1:1 (connection refused) after 1s; "
                                  "check kafka.bootstrap_servers")
    assert time.monotonic() - started < 3.0


def test_each_server_is_named_with_its_own_cause() -> None:
    with pytest.raises(KafkaUnavailable) as failure:
        check_kafka({"bootstrap_servers": ["127.0.0.1:1", "no-such-host.invalid:9092"]}, None, 0.5)
    line = str(failure.value)
    assert line.startswith("cannot reach Kafka at 127.0.0.1:1,no-such-host.invalid:9092 (127.0.0.1:1: connection "
                           "refused; no-such-host.invalid:9092: cannot resolve 'no-such-host.invalid'"), line
    assert "\n" not in line


def test_the_security_description_names_protocol_mechanism_and_user_but_no_password() -> None:
    config = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
              "sasl_plain_username": "forwarder", "sasl_plain_password": "s3cret"}
    assert describe_security(config) == "SASL_SSL, SCRAM-SHA-512 as user 'forwarder'"
    with pytest.raises(KafkaUnavailable) as failure:
        check_kafka({"bootstrap_servers": ["127.0.0.1:1"], **config}, None, 0.3)
    assert "SASL_SSL, SCRAM-SHA-512 as user 'forwarder'" in str(failure.value)
    assert "s3cret" not in str(failure.value)
