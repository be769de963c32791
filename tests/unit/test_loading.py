"""The job's YAML file read into a `ForwarderConfig` (synclib/settings/loading.py, with the sections of
synclib/settings/job.py): the shipped files, --set overrides, ${ENV} expansion, one clear error per mistake."""

import copy
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from synclib.app.job import config_sections
from synclib.settings import (
    ConfigError,
    EmbeddedConfig,
    ForwarderConfig,
    LoggingConfig,
    SinkConfig,
    SourceConfig,
    TriggerConfig,
    load_config,
    parse_duration,
)
from synclib.settings.kafka import kafka_client_config
from synclib.settings.values import table_name_parts

CONF = Path(__file__).resolve().parents[2] / "conf"
SECRET = "hunter2-s3cr3t"
DELETE = object()

BASE = {
    "kafka": {"bootstrap_servers": "k1:9092, k2:9092"},
    "source": {
        "subscribe": "events",
        "commit_log_topic": "commit-log",
        "commit_groups": ["leader"],
        "consumer_group": "follower",
    },
    "sink": {"path": "out/events"},
    "checkpoint": {"location": "out/checkpoint"},
}
SASL = {
    "kafka.security.protocol": "SASL_SSL",
    "kafka.security.sasl_mechanism": "SCRAM-SHA-512",
    "kafka.security.username": "forwarder",
    "kafka.security.password": SECRET,
}


def build(updates=None):
    """BASE with `dotted.key: value` updates applied; DELETE removes the key."""
    data = copy.deepcopy(BASE)
    for dotted, value in (updates or {}).items():
        *parents, last = dotted.split(".")
        node = data
        for name in parents:
            node = node.setdefault(name, {})
        if value is DELETE:
            node.pop(last, None)
        else:
            node[last] = value
    return data


def write(tmp_path, data=None, text=None):
    path = tmp_path / "forwarder.yaml"
    path.write_text(yaml.safe_dump(data) if text is None else text)
    return str(path)


def load_error(path, overrides=()):
    with pytest.raises(ConfigError) as error:
        load_config(path, overrides)
    message = str(error.value)
    assert "\n" not in message
    return message


@pytest.fixture
def cluster_env(monkeypatch):
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "b-1.example.com:9096,b-2.example.com:9096")
    monkeypatch.setenv("KAFKA_USERNAME", "forwarder")
    monkeypatch.setenv("KAFKA_PASSWORD", SECRET)
    monkeypatch.delenv("KAFKA_CA_FILE", raising=False)


def test_local_yaml_is_the_embedded_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = load_config(str(CONF / "local.yaml"))

    assert config.kafka.embedded
    assert config.embedded == EmbeddedConfig()
    assert config.sink.path == str(tmp_path / "data/local/events")
    assert config.checkpoint.location == str(tmp_path / "data/local/checkpoint")
    assert config.sink.partition_by_date
    assert config.source_options("127.0.0.1:9092") == {
        "kafka.bootstrap.servers": "127.0.0.1:9092",
        "kafka.security.protocol": "PLAINTEXT",
        "subscribe": "events",
        "commitLogTopic": "snuba-commit-log",
        "synchronizeCommitGroups": "snuba-consumers",
        "consumerGroup": "post-process-forwarder",
        "startingOffsets": "earliest",
        "initialOffsetReset": "earliest",
        "failOnDataLoss": "true",
        "includeHeaders": "false",
        "staleAfter": "60",
        "remoteOffsets": "commit_log",
        "commitToConsumerGroup": "false",
        "brokerTimeout": "120",
        "commitLogTimeout": "120",
        "readStallTimeout": "120",
        "awaitLeaderCommits": "true",
        "minBatchInterval": "0.4",
    }
    with pytest.raises(ValueError, match="embedded broker"):
        config.source_options("embedded")


def test_cluster_example_reads_secrets_from_the_environment(cluster_env):
    config = load_config(str(CONF / "cluster-example.yaml"))

    security = config.kafka.security
    assert (security.protocol, security.sasl_mechanism) == ("SASL_SSL", "SCRAM-SHA-512")
    assert (security.username, security.password) == ("forwarder", SECRET)
    assert security.ssl_cafile == "/etc/ssl/certs/ca-certificates.crt"
    assert config.embedded is None
    assert config.sink.path.startswith("s3://") and config.checkpoint.location.startswith("s3://")
    options = config.source_options(config.kafka.bootstrap_servers)
    assert options["kafka.bootstrap.servers"] == "b-1.example.com:9096,b-2.example.com:9096"
    assert options["kafka.sasl.password"] == SECRET
    assert options["kafka.request.timeout.ms"] == "30000"
    assert options["startingOffsets"] == "committed"
    assert kafka_client_config(options)["sasl_plain_password"] == SECRET
    for text in (repr(config), str(config), repr(config.redacted())):
        assert SECRET not in text
    assert config.redacted()["kafka"]["security"]["password"] == "***"


def test_cluster_example_without_password_names_key_variable_and_file(cluster_env, monkeypatch):
    monkeypatch.delenv("KAFKA_PASSWORD")
    message = load_error(str(CONF / "cluster-example.yaml"))
    assert "cluster-example.yaml: kafka.security.password:" in message
    assert "KAFKA_PASSWORD" in message


def test_defaults_and_relative_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = load_config(write(tmp_path, build()))

    assert config.source == SourceConfig(
        subscribe="events", commit_log_topic="commit-log", commit_groups=("leader",), consumer_group="follower")
    assert config.sink == SinkConfig(path=str(tmp_path / "out/events"))
    assert config.trigger == TriggerConfig()
    assert config.logging == LoggingConfig()
    assert config.kafka.bootstrap_servers == "k1:9092,k2:9092"
    assert config.embedded is None and config.transform is None
    assert isinstance(config, ForwarderConfig)


@pytest.mark.parametrize(
    "path",
    ["s3://bucket/events", "s3a://bucket/events", "abfss://c@acct.dfs.core.windows.net/events",
     "dbfs:/mnt/events", "/Volumes/main/sentry/lake/events", "file:///tmp/events"],
)
def test_uris_and_absolute_paths_are_kept(tmp_path, path):
    config = load_config(write(tmp_path, build({"sink.path": path, "checkpoint.location": path + "-cp"})))
    assert (config.sink.path, config.checkpoint.location) == (path, path + "-cp")


def test_overrides_are_parsed_as_yaml(tmp_path):
    config = load_config(write(tmp_path, build()), [
        "source.max_offsets_per_trigger=500",
        "sink.engine=delta-rs",
        "source.commit_groups=[a, b]",
        "source.include_headers=true",
        "trigger.mode=processing_time",
        "trigger.processing_time=250ms",
        "kafka.options.max.poll.records=100",
        "transform=my.pkg:enrich",
    ])

    assert config.source.max_offsets_per_trigger == 500
    assert config.sink.engine == "delta-rs"
    assert config.source.commit_groups == ("a", "b")
    assert config.source.include_headers
    assert config.trigger.spark_trigger == {"processingTime": "250 milliseconds"}
    assert config.kafka.options == {"max.poll.records": "100"}
    assert config.transform == "my.pkg:enrich"
    options = config.source_options("k:9092")
    assert options["maxOffsetsPerTrigger"] == "500"
    assert options["synchronizeCommitGroups"] == "a,b"
    assert options["kafka.max.poll.records"] == "100"
    assert "awaitLeaderCommits" not in options  # the source waits for the leader only in mode leader


def test_override_switches_local_yaml_to_a_real_broker(tmp_path):
    local = str(CONF / "local.yaml")
    message = load_error(local, ["kafka.bootstrap_servers=k:9092"])
    assert "local.yaml: embedded:" in message and "--set embedded=null" in message

    config = load_config(local, ["kafka.bootstrap_servers=k:9092", "embedded=null"])
    assert config.embedded is None and not config.kafka.embedded


@pytest.mark.parametrize(
    ("override", "key", "fragment"),
    [
        ("source.max_offset_per_trigger=5", "source.max_offset_per_trigger",
         "did you mean 'source.max_offsets_per_trigger'"),
        ("sorce.subscribe=x", "sorce", "did you mean 'source'"),
        ("source.subscribe.name=x", "source.subscribe", "not a section"),
        ("source.max_offsets_per_trigger=abc", "source.max_offsets_per_trigger", "positive integer, got 'abc'"),
        ("source.commit_groups=[a", "source.commit_groups", "not a valid YAML value"),
        ("source.subscribe", "--set 'source.subscribe'", "expected dotted.key=value"),
    ],
)
def test_bad_overrides_name_the_key_and_file(tmp_path, override, key, fragment):
    path = write(tmp_path, build())
    message = load_error(path, [override])
    assert message.startswith(f"{path}: {key}")
    assert fragment in message


def test_environment_expansion(tmp_path, monkeypatch):
    monkeypatch.setenv("TOPIC", "events")
    monkeypatch.setenv("GROUP", "leader")
    monkeypatch.setenv("CAP", "1000")
    monkeypatch.setenv("EMPTY", "")
    monkeypatch.delenv("UNSET", raising=False)
    path = write(tmp_path, build({
        "source.subscribe": "${TOPIC},${UNSET:-other}",
        "source.commit_groups": ["${GROUP}", "${EMPTY:-fallback}"],
        "source.consumer_group": "forwarder-${TOPIC}",
        "source.max_offsets_per_trigger": "${CAP}",
        "sink.path": "s3://lake/${TOPIC}",
    }))
    config = load_config(path, ["source.publish_commit_log=${TOPIC}-forwarded"])

    assert config.source.subscribe == "events,other"
    assert config.source.commit_groups == ("leader", "fallback")
    assert config.source.consumer_group == "forwarder-events"
    assert config.source.max_offsets_per_trigger == 1000
    assert config.source.publish_commit_log == "events-forwarded"
    assert config.sink.path == "s3://lake/events"


def test_environment_is_not_expanded_in_keys_and_unset_names_list_items(tmp_path, monkeypatch):
    monkeypatch.setenv("KEY", "subscribe")
    monkeypatch.delenv("UNSET", raising=False)
    message = load_error(write(tmp_path, build({"source.${KEY}": "events"})))
    assert "source.${KEY}: unknown key" in message

    path = write(tmp_path, build({"source.commit_groups": ["leader", "${UNSET}"]}))
    assert load_error(path).startswith(f"{path}: source.commit_groups[1]: environment variable UNSET is not set")


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("500ms", 0.5), ("2s", 2.0), ("1.5 s", 1.5), ("5m", 300.0), ("1h", 3600.0), ("10 seconds", 10.0),
     (".25s", 0.25)],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["5", "fast", "5 parsecs", "-1s", "1.s", ""])
def test_parse_duration_rejects(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_source_options_for_pattern_assign_and_offsets(tmp_path):
    pattern = load_config(write(tmp_path, build({
        "source.subscribe": DELETE, "source.subscribe_pattern": "events-.*",
        "source.remote_offsets": "group", "source.commit_log_topic": DELETE,
        "kafka.security.protocol": "SSL", "kafka.security.ssl_check_hostname": False,
    }))).source_options("k:9092")
    assert pattern["subscribePattern"] == "events-.*"
    assert pattern["remoteOffsets"] == "group" and "commitLogTopic" not in pattern
    assert pattern["kafka.ssl.endpoint.identification.algorithm"] == ""
    assert kafka_client_config(pattern)["ssl_check_hostname"] is False

    assign = load_config(write(tmp_path, build({
        "source.subscribe": DELETE, "source.assign": {"events": [0, 1]},
        "source.starting_offsets": {"events": {0: 23, 1: -2}}, "source.stale_after": "1.5s",
    }))).source_options("k:9092")
    assert assign["assign"] == '{"events":[0,1]}'
    assert assign["startingOffsets"] == '{"events":{"0":23,"1":-2}}'
    assert assign["staleAfter"] == "1.5"

    as_json = load_config(write(tmp_path, build({"source.starting_offsets": '{"events": {"0": 7}}'})))
    assert as_json.source.starting_offsets == '{"events":{"0":7}}'


BAD_CONFIGS = [
    ("unknown key", {"source.subscibe": "x"}, "source.subscibe", "did you mean 'source.subscribe'"),
    ("unknown section", {"sinks": {}}, "sinks", "unknown key"),
    ("not an integer", {"source.max_offsets_per_trigger": "abc"}, "source.max_offsets_per_trigger",
     "expected a positive integer, got 'abc'"),
    ("zero", {"source.max_offsets_per_trigger": 0}, "source.max_offsets_per_trigger", "positive integer, got 0"),
    ("negative", {"embedded.partitions": -4, "kafka.bootstrap_servers": "embedded"}, "embedded.partitions",
     "positive integer, got -4"),
    ("not a bool", {"source.include_headers": "maybe"}, "source.include_headers", "true or false"),
    ("number for string", {"source.consumer_group": 42}, "source.consumer_group", "quote it in YAML"),
    ("section not a mapping", {"sink": "out/events"}, "sink", "expected a mapping"),
    ("missing key", {"checkpoint.location": DELETE}, "checkpoint.location", "missing required key"),
    ("no table", {"sink.path": DELETE}, "sink.path", "set exactly one of sink.path and sink.table"),
    ("path and table", {"sink.table": "main.events.raw"}, "sink.table", "set exactly one of sink.path and sink.table"),
    ("unparsable table", {"sink.path": DELETE, "sink.table": "a.b.c.d"}, "sink.table", "expected a table name"),
    ("table with a dash", {"sink.path": DELETE, "sink.table": "main.my-db.t"}, "sink.table", "`back quotes`"),
    ("clustered and partitioned", {"sink.cluster_by": ["topic"], "sink.partition_by_date": True}, "sink.cluster_by",
     "clustered or partitioned, not both"),
    ("dead letters path and table", {"sink.dead_letters.path": "/x", "sink.dead_letters.table": "t"},
     "sink.dead_letters.table", "at most one of sink.dead_letters.path and sink.dead_letters.table"),
    ("bad table property", {"sink.table_properties": {"a": [1]}}, "sink.table_properties", "string, number or boolean"),
    ("missing section", {"checkpoint": DELETE}, "checkpoint", "missing required section"),
    ("missing groups", {"source.commit_groups": DELETE}, "source.commit_groups", "missing required key"),
    ("empty groups", {"source.commit_groups": []}, "source.commit_groups", "non-empty list"),
    ("missing commit log", {"source.commit_log_topic": DELETE}, "source.commit_log_topic", "missing required key"),
    ("bad engine", {"sink.engine": "delta"}, "sink.engine", "one of 'auto', 'delta-rs', 'delta-spark'"),
    ("bad protocol", {"kafka.security.protocol": "TLS"}, "kafka.security.protocol", "one of 'PLAINTEXT'"),
    ("bad level", {"logging.level": "LOUD"}, "logging.level", "got 'LOUD'"),
    ("bad reset", {"source.initial_offset_reset": "none"}, "source.initial_offset_reset", "'earliest', 'latest'"),
    ("bad regex", {"source.subscribe": DELETE, "source.subscribe_pattern": "events-("}, "source.subscribe_pattern",
     "valid regular expression"),
    ("bad offsets json", {"source.starting_offsets": '{"events": {0: 1}'}, "source.starting_offsets",
     "not valid JSON"),
    ("bad offsets shape", {"source.starting_offsets": '{"events": [1]}'}, "source.starting_offsets",
     "mapping of partition to offset"),
    ("bad offset", {"source.starting_offsets": {"events": {"0": -3}}}, "source.starting_offsets",
     "'events' partition '0': offset must be an integer >= -2"),
    ("offsets of other topic", {"source.starting_offsets": {"other": {"0": 1}}}, "source.starting_offsets",
     "'other' is not subscribed"),
    ("bad assign", {"source.subscribe": DELETE, "source.assign": "{\"events\": [0, 0]}"}, "source.assign",
     "distinct partition numbers"),
    ("bad duration", {"trigger.processing_time": "fast"}, "trigger.processing_time", "expected a duration"),
    ("negative interval", {"trigger.min_interval": "-1s"}, "trigger.min_interval", "expected a duration"),
    ("unknown trigger mode", {"trigger.mode": "asap"}, "trigger.mode",
     "expected one of 'leader', 'processing_time', 'available_now'"),
    ("interval of another mode", {"trigger.processing_time": "1s"}, "trigger.processing_time",
     "only used with trigger.mode: processing_time (the mode is leader)"),
    ("duration without unit", {"logging.progress_interval": 5}, "logging.progress_interval", "expected a duration"),
    ("zero duration", {"source.stale_after": "0s"}, "source.stale_after", "positive duration"),
    ("two subscriptions", {"source.assign": '{"events": [0]}'}, "source.assign",
     "cannot be combined with source.subscribe"),
    ("no subscription", {"source.subscribe": DELETE}, "source.subscribe", "set exactly one of"),
    ("sasl without mechanism", {**SASL, "kafka.security.sasl_mechanism": DELETE},
     "kafka.security.sasl_mechanism", "required when kafka.security.protocol is SASL_SSL"),
    ("sasl without password", {**SASL, "kafka.security.password": DELETE}, "kafka.security.password",
     "required when"),
    ("sasl with plaintext", {"kafka.security.username": "u"}, "kafka.security.username",
     "SASL setting but kafka.security.protocol is PLAINTEXT"),
    ("ssl file with plaintext", {"kafka.security.ssl_cafile": "ca.pem"}, "kafka.security.ssl_cafile",
     "SSL setting"),
    ("cert without key", {"kafka.security.protocol": "SSL", "kafka.security.ssl_certfile": "c.pem"},
     "kafka.security.ssl_keyfile", "required with kafka.security.ssl_certfile"),
    ("transform form", {"transform": "mypkg.enrich"}, "transform", "'module:function'"),
    ("unknown kafka option", {"kafka.options": {"no.such.setting": 1}}, "kafka.options.no.such.setting",
     "kafka-python has no setting"),
    ("kafka option owned by a key", {"kafka.options": {"security.protocol": "SSL"}},
     "kafka.options.security.protocol", "set kafka.security.protocol instead"),
    ("kafka option bad value", {"kafka.options": {"request.timeout.ms": "soon"}},
     "kafka.options.request.timeout.ms", "is not a int"),
    ("kafka option prefixed", {"kafka.options": {"kafka.client.id": "x"}}, "kafka.options.kafka.client.id",
     "without the 'kafka.' prefix"),
    ("bad bootstrap", {"kafka.bootstrap_servers": "localhost"}, "kafka.bootstrap_servers", "host:port"),
    ("bad topic", {"source.commit_log_topic": "commit log"}, "source.commit_log_topic", "topic name"),
    ("committed without group", {"source.starting_offsets": "committed", "source.consumer_group": DELETE},
     "source.starting_offsets", "requires source.consumer_group"),
    ("commit without group", {"source.commit_to_consumer_group": True, "source.consumer_group": DELETE},
     "source.commit_to_consumer_group", "requires source.consumer_group"),
    ("embedded section with real broker", {"embedded": {"partitions": 2}}, "embedded",
     "only used when kafka.bootstrap_servers is 'embedded'"),
    ("embedded with sasl", {**SASL, "kafka.bootstrap_servers": "embedded"}, "kafka.security.protocol",
     "PLAINTEXT only"),
    ("duplicate partition columns", {"sink.partition_by": ["topic", "topic"]}, "sink.partition_by",
     "distinct column names"),
]


@pytest.mark.parametrize(("updates", "key", "fragment"), [c[1:] for c in BAD_CONFIGS], ids=[c[0] for c in BAD_CONFIGS])
def test_bad_config_names_file_and_key(tmp_path, updates, key, fragment):
    path = write(tmp_path, build(updates))
    message = load_error(path)
    assert message.startswith(f"{path}: {key}: ")
    assert fragment in message
    assert SECRET not in message


def test_every_invalid_setting_is_reported_at_once(tmp_path):
    path = write(tmp_path, build({"source.commit_groups": [], "source.max_offsets_per_trigger": -5,
                                  "sink.engine": "delta-foo"}))
    message = load_error(path)
    assert message == (f"{path}: source.commit_groups: expected a non-empty list of group ids (without commas), "
                       "got []; source.max_offsets_per_trigger: expected a positive integer, got -5; "
                       "sink.engine: expected one of 'auto', 'delta-rs', 'delta-spark', got 'delta-foo'")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("kafka: [unclosed\n", "not valid YAML (line 2"),
        ("- kafka\n- source\n", "at the top level, got ['kafka', 'source']"),
        ("", "got an empty file"),
        ("kafka: {}\nkafka: {}\n", "duplicate key 'kafka'"),
    ],
)
def test_bad_files(tmp_path, text, fragment):
    path = write(tmp_path, text=text)
    message = load_error(path)
    assert message.startswith(f"{path}: ")
    assert fragment in message


def test_missing_file(tmp_path):
    path = str(tmp_path / "nope.yaml")
    assert load_error(path) == f"{path}: file not found"


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


@pytest.mark.parametrize(
    ("updates", "overrides"),
    [
        ({**SASL, "kafka.security.password": int(SECRET.encode().hex(), 16)}, ()),
        ({**SASL, "kafka.security.protocol": "PLAINTEXT"}, ()),
        ({**SASL, "kafka.security.ssl_password": SECRET}, ()),
        ({**SASL, "kafka.options": {"sasl.jaas.config": f'x required username="u" password="{SECRET}";'}}, ()),
        ({**SASL, "kafka.options": {"ssl.key.password": SECRET}}, ()),
        (SASL, [f"kafka.security.password:{SECRET}"]),
        (SASL, [f"kafka.security.password=[{SECRET}"]),
        (SASL, [f"kafka.security.password=[{SECRET}]"]),
    ],
)
def test_secrets_never_appear_in_errors(tmp_path, updates, overrides):
    data = build(updates)
    message = load_error(write(tmp_path, data), overrides)
    assert SECRET not in message
    assert str(data["kafka"]["security"]["password"]) not in message


def test_secrets_never_appear_in_repr(tmp_path):
    config = load_config(write(tmp_path, build({
        **SASL, "kafka.security.ssl_keyfile": "k.pem", "kafka.security.ssl_certfile": "c.pem",
        "kafka.security.ssl_password": SECRET + "-key",
    })))
    assert config.kafka.security.ssl_password == SECRET + "-key"
    for text in (repr(config), repr(config.kafka), repr(config.kafka.security), str(config.redacted()),
                 *(line for _, line in config_sections(config))):
        assert SECRET not in text


def test_the_effective_configuration_is_a_line_per_section(tmp_path):
    config = load_config(write(tmp_path, build({**SASL, "source.max_offsets_per_trigger": 500})))
    sections = dict(config_sections(config))

    assert list(sections) == ["kafka", "source", "sink", "checkpoint", "storage", "trigger", "logging", "monitoring"]
    assert 'security.password="***"' in sections["kafka"] and 'security.protocol="SASL_SSL"' in sections["kafka"]
    assert "max_offsets_per_trigger=500" in sections["source"]
    assert "null" not in " ".join(sections.values())


def test_config_module_does_not_import_spark():
    code = "import sys, synclib.settings; sys.exit('pyspark' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_settings_import_no_spark_and_no_higher_layer():
    code = ("import sys, synclib.settings; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pyspark' or m.split('.')[:2] in "
            "(['synclib', 'leader'], ['synclib', 'source'], ['synclib', 'delta'], ['synclib', 'app'], "
            "['synclib', 'embedded'])))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_a_key_that_is_not_a_string_is_an_unknown_key(tmp_path):
    path = tmp_path / "forwarder.yaml"
    path.write_text("kafka: {bootstrap_servers: 'k:9092'}\nsource: {subscribe: events, 1: x}\n"
                    "sink: {path: x}\ncheckpoint: {location: c}\n")
    with pytest.raises(ValueError, match=re.escape(f"{path}: source.1: unknown key (known keys: assign, ")):
        load_config(path)


@pytest.mark.parametrize(("name", "parts"), [
    ("events", ("events",)), ("sentry.events", ("sentry", "events")),
    ("main.sentry.events", ("main", "sentry", "events")), ("main.`my-db`.`a``b`", ("main", "my-db", "a`b")),
])
def test_a_table_name_is_one_two_or_three_identifiers(tmp_path, name, parts):
    config = load_config(write(tmp_path, build({"sink.path": DELETE, "sink.table": name})))
    assert table_name_parts(config.sink.table) == parts
