"""The `kafka.*` options mapped to kafka-python client settings (synclib/settings/kafka.py), and the
isolation level read back from them (synclib/kafka/client_config.py)."""

import pytest

from synclib.kafka.client_config import isolation_level
from synclib.settings.kafka import KafkaConfigError, kafka_client_config
from synclib.settings.model import is_secret


def test_java_style_names_map_to_kafka_python():
    config = kafka_client_config({
        "kafka.bootstrap.servers": "a:9092, b:9092",
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.username": "user",
        "kafka.sasl.password": "secret",
        "kafka.ssl.ca.location": "/etc/ca.pem",
        "kafka.request.timeout.ms": "15000",
        "kafka.check.crcs": "false",
        "subscribe": "events",
    })
    assert config == {
        "bootstrap_servers": ["a:9092", "b:9092"],
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "user",
        "sasl_plain_password": "secret",
        "ssl_cafile": "/etc/ca.pem",
        "request_timeout_ms": 15000,
        "check_crcs": False,
    }


def test_jaas_config_gives_plain_credentials():
    jaas = 'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="p";'
    assert kafka_client_config({"kafka.sasl.jaas.config": jaas}) == {
        "sasl_plain_username": "u", "sasl_plain_password": "p"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"kafka.no.such.setting": "1"}, "kafka.no.such.setting"),
        ({"kafka.request.timeout.ms": "soon"}, "kafka.request.timeout.ms"),
        ({"kafka.group.id": "x"}, "managed by synclib"),
        ({"kafka.check.crcs": "maybe"}, "not a bool"),
    ],
)
def test_bad_options_name_the_option(options, message):
    with pytest.raises(KafkaConfigError, match=message):
        kafka_client_config(options)


def test_bad_secret_value_is_not_echoed():
    with pytest.raises(KafkaConfigError) as error:
        kafka_client_config({"kafka.sasl.jaas.config": "username=\"u\" hunter2"})
    assert "hunter2" not in str(error.value)


def test_secret_option_names_are_recognised():
    assert is_secret("kafka.sasl.password") and is_secret("kafka.sasl.jaas.config")
    assert not is_secret("kafka.sasl.username")


@pytest.mark.parametrize("given", ["read_committed", " READ_COMMITTED "])
def test_isolation_level_takes_spark_s_option_name(given):
    config = kafka_client_config({"kafka.isolation.level": given})
    assert config == {"isolation_level": "read_committed"}
    assert isolation_level(config) == "read_committed"
    assert isolation_level({}) == "read_uncommitted"  # kafka-python's default


def test_an_unknown_isolation_level_is_named():
    with pytest.raises(KafkaConfigError) as error:
        kafka_client_config({"kafka.isolation.level": "committed"})
    assert str(error.value) == ("option 'kafka.isolation.level': 'committed' is not one of "
                                "read_uncommitted, read_committed")
