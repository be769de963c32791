"""The source's settings (synclib/settings/source.py), one model for the YAML `source:` section and the
Spark options: YAML -> Spark options -> model round trip, Spark option errors."""

import json
import logging
import re
from pathlib import Path

import pytest
import yaml

from synclib.settings import SourceConfig, SourceOptionError, SourceOptions, load_config
from synclib.settings.kafka import kafka_client_config

CONF = Path(__file__).resolve().parents[2] / "conf"
SECRET = "hunter2-s3cr3t"
SPARK_OPTIONS = {
    "kafka.bootstrap.servers": "k1:9092,k2:9092",
    "subscribe": "events",
    "commitLogTopic": "commit-log",
    "synchronizeCommitGroups": "leader",
}
# Every reader option of synchronized_kafka (docs/configuration.md), besides kafka.*.
OPTION_NAMES = {
    "subscribe", "subscribePattern", "assign", "commitLogTopic", "synchronizeCommitGroups", "consumerGroup",
    "startingOffsets", "initialOffsetReset", "maxOffsetsPerTrigger", "failOnDataLoss", "includeHeaders",
    "staleAfter", "brokerTimeout", "commitLogTimeout", "readStallTimeout", "commitToConsumerGroup",
    "publishCommitLog", "remoteOffsets", "statusFile", "initialOffsetsFile", "runId", "runCheckpoint",
    "endingOffsets", "pollTimeoutMs", "remotePollInterval", "awaitLeaderCommits", "minBatchInterval",
    "kafka.bootstrap.servers",
}


def yaml_config(tmp_path, source, kafka=None):
    path = tmp_path / "forwarder.yaml"
    path.write_text(yaml.safe_dump({
        "kafka": {"bootstrap_servers": "k:9092", **(kafka or {})},
        "source": source,
        "sink": {"path": "s3://lake/events"},
        "checkpoint": {"location": "s3://lake/checkpoint"},
    }))
    return load_config(path)


def source_settings(model):
    return {name: getattr(model, name) for name in SourceConfig.model_fields}


ROUND_TRIPS = {
    "subscribe, every setting": {
        "subscribe": ["events", "audit"], "commit_log_topic": "log", "commit_groups": ["a", "b"],
        "consumer_group": "forwarder", "starting_offsets": "committed", "initial_offset_reset": "latest",
        "max_offsets_per_trigger": 500, "fail_on_data_loss": False, "include_headers": True,
        "stale_after": "1.5s", "broker_timeout": "2m", "commit_log_timeout": "250ms", "read_stall_timeout": "1h",
        "commit_to_consumer_group": True, "publish_commit_log": "forwarder-log",
    },
    "pattern and leader group offsets": {
        "subscribe_pattern": "events-.*", "remote_offsets": "group", "commit_groups": ["leader"],
    },
    "assign and offsets": {
        "assign": {"events": [0, 1]}, "commit_log_topic": "log", "commit_groups": ["leader"],
        "starting_offsets": {"events": {0: 23, 1: -2}},
    },
}


@pytest.mark.parametrize("source", ROUND_TRIPS.values(), ids=ROUND_TRIPS.keys())
def test_yaml_to_spark_options_to_model_round_trips(tmp_path, source):
    config = yaml_config(tmp_path, source)
    options = config.source_options("k:9092")

    parsed = SourceOptions.from_spark(options)

    assert source_settings(parsed) == source_settings(config.source)
    assert parsed.client_config == kafka_client_config(options)
    source_options = {k: v for k, v in options.items() if k == "kafka.bootstrap.servers" or "." not in k}
    assert source_options.items() <= parsed.spark_options().items()
    assert SourceOptions.from_spark({**options, **parsed.spark_options()}) == parsed


def test_shipped_configs_round_trip(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "b-1.example.com:9096")
    monkeypatch.setenv("KAFKA_USERNAME", "forwarder")
    monkeypatch.setenv("KAFKA_PASSWORD", SECRET)
    for name in ("local.yaml", "cluster-example.yaml"):
        config = load_config(CONF / name)
        parsed = SourceOptions.from_spark(config.source_options("b-1.example.com:9096"))
        assert source_settings(parsed) == source_settings(config.source), name


def test_every_reader_option_is_a_setting_alias():
    aliases = {field.serialization_alias for field in SourceOptions.model_fields.values()}
    assert aliases - {None} == OPTION_NAMES


def test_spark_option_keys_are_case_insensitive_and_empty_values_unset():
    options = SourceOptions.from_spark({
        "KAFKA.BOOTSTRAP.SERVERS": "k:9092", "SubScribe": "events", "commitlogtopic": "log",
        "SYNCHRONIZECOMMITGROUPS": " a , b ", "maxOffsetsPerTrigger": " 100 ", "FAILONDATALOSS": "False",
        "consumerGroup": "", "subscribePattern": "  ",
    })
    assert (options.subscribe, options.commit_log_topic, options.commit_groups) == ("events", "log", ("a", "b"))
    assert (options.max_offsets_per_trigger, options.fail_on_data_loss, options.consumer_group) == (100, False, None)
    assert options.client_config["bootstrap_servers"] == ["k:9092"]


def test_spark_durations_are_seconds_or_take_a_unit():
    options = SourceOptions.from_spark({**SPARK_OPTIONS, "staleAfter": "1.5", "brokerTimeout": "2m",
                                        "remotePollInterval": "0.2"})
    assert (options.stale_after, options.broker_timeout, options.remote_poll_interval) == (1.5, 120.0, 0.2)
    assert (options.commit_log_timeout, options.read_stall_timeout) == (120.0, 120.0)


def test_yaml_durations_need_a_unit(tmp_path):
    with pytest.raises(ValueError, match=re.escape("source.stale_after: expected a duration such as '500ms'")):
        yaml_config(tmp_path, {"subscribe": "events", "commit_log_topic": "log", "commit_groups": ["g"],
                               "stale_after": 5})


def test_starting_offsets_as_offsets():
    options = SourceOptions.from_spark({**SPARK_OPTIONS, "startingOffsets": '{"events": {"0": 3, "1": -2}}'})
    assert options.starting == {("events", 0): 3, ("events", 1): -2}
    assert SourceOptions.from_spark({**SPARK_OPTIONS, "startingOffsets": "LATEST"}).starting == "latest"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"kafka.bootstrap.servers": ""}, "option 'kafka.bootstrap.servers': missing required option"),
        ({"subscribePattern": "x.*"},
         "option 'subscribePattern': cannot be combined with 'subscribe'; set exactly one of 'subscribe', "
         "'subscribePattern', 'assign'"),
        ({"subscribe": ""},
         "option 'subscribe': missing; set exactly one of 'subscribe', 'subscribePattern', 'assign'"),
        ({"commitLogTopic": " "},
         "option 'commitLogTopic': missing required option (needed when 'remoteOffsets' is commit_log)"),
        ({"synchronizeCommitGroups": " , "},
         "option 'synchronizeCommitGroups': expected a non-empty list of group ids (without commas), got ','"),
        ({"startingOffsets": "{not json"},
         "option 'startingOffsets': expected 'earliest', 'latest', 'committed' or offsets JSON such as "
         '{"events": {"0": 23}}, got \'{not json\' (not valid JSON'),
        ({"startingOffsets": "committed"}, "option 'startingOffsets': requires 'consumerGroup'"),
        ({"publishCommitLog": "own-log"}, "option 'publishCommitLog': requires 'consumerGroup'"),
        ({"maxOffsetsPerTrigger": "0"}, "option 'maxOffsetsPerTrigger': expected a positive integer, got '0'"),
        ({"failOnDataLoss": "maybe"}, "option 'failOnDataLoss': expected true or false, got 'maybe'"),
        ({"staleAfter": "-1"}, "option 'staleAfter': expected a duration such as '500ms', '2s' or '5m', got '-1'"),
        ({"readStallTimeout": "0"}, "option 'readStallTimeout': expected a positive duration"),
        ({"remoteOffsets": "leader"},
         "option 'remoteOffsets': expected one of 'commit_log', 'group', got 'leader'"),
        ({"subscribePattern": "ev(", "subscribe": ""},
         "option 'subscribePattern': expected a valid regular expression"),
        ({"pollTimeoutMs": "soon"}, "option 'pollTimeoutMs': expected a positive integer, got 'soon'"),
        ({"kafka.no.such.thing": "1"},
         "option 'kafka.no.such.thing': kafka-python has no setting 'no_such_thing'"),
    ],
)
def test_invalid_spark_options_name_the_option(change, message):
    with pytest.raises(SourceOptionError) as error:
        SourceOptions.from_spark({**SPARK_OPTIONS, **change})
    assert str(error.value).startswith(message)


def test_unknown_spark_option_is_logged_with_a_suggestion(caplog):
    with caplog.at_level(logging.WARNING, logger="synclib.settings.source"):
        SourceOptions.from_spark({**SPARK_OPTIONS, "maxOffsetPerTrigger": "5"})
    assert "unknown option 'maxoffsetpertrigger' (did you mean 'maxOffsetsPerTrigger'?)" in caplog.text


def test_spark_options_keep_secrets_out_of_repr_and_errors():
    jaas = f'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="{SECRET}";'
    options = SourceOptions.from_spark({**SPARK_OPTIONS, "kafka.security.protocol": "SASL_SSL",
                                        "kafka.sasl.mechanism": "PLAIN", "kafka.sasl.jaas.config": jaas})
    assert options.client_config["sasl_plain_password"] == SECRET
    assert SECRET not in repr(options) + str(options)
    with pytest.raises(SourceOptionError) as error:
        SourceOptions.from_spark({**SPARK_OPTIONS, "kafka.ssl.key.password": SECRET, "kafka.retries": "many"})
    assert SECRET not in str(error.value)


def test_redacted_config_is_json_with_secrets_masked(tmp_path):
    config = yaml_config(tmp_path, {"subscribe": "events", "commit_log_topic": "log", "commit_groups": ["g"]},
                         kafka={"security": {"protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "username": "u",
                                             "password": SECRET}})
    text = json.dumps(config.redacted())
    assert SECRET not in text and json.loads(text)["kafka"]["security"]["password"] == "***"
    assert config.source_options("k:9092")["kafka.sasl.password"] == SECRET


def test_yaml_only_rule_starting_offsets_of_an_unsubscribed_topic(tmp_path):
    # The job's resume from the table may name topics no longer subscribed: Spark options accept it.
    offsets = '{"other": {"0": 1}}'
    assert SourceOptions.from_spark({**SPARK_OPTIONS, "startingOffsets": offsets}).starting == {("other", 0): 1}
    with pytest.raises(ValueError, match=re.escape("source.starting_offsets: topic 'other' is not subscribed")):
        yaml_config(tmp_path, {"subscribe": "events", "commit_log_topic": "log", "commit_groups": ["g"],
                               "starting_offsets": offsets})
