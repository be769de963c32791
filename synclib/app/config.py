"""YAML -> typed, validated configuration of the forwarder job (no Spark needed).

`load_config(path, overrides)` reads the YAML, expands `${VAR}` and `${VAR:-default}` in
string values from the environment (keys are never expanded), applies `--set
dotted.key=value` overrides (values parsed as YAML: `500` is an int, `[a, b]` a list) and
validates everything. Any problem raises one `ConfigError` naming the file and the dotted
key. Secrets (passwords) never appear in errors, `repr()` or `redacted()`.

Conventions: YAML keys are the dataclass field names below; null means "use the default";
durations are strings with a unit ("500ms", "2s", "1.5 s", "5m", "1h"), stored as float
seconds; integers and booleans may also be written as strings so `${VAR}` works for them.
Relative paths (sink.path, checkpoint.location, the ssl files) are resolved against the
current working directory at load time; URIs (s3://, abfss://, dbfs:/, file:) and
absolute paths such as /Volumes/... are kept as written.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml

from synclib.kafka.client_config import KafkaConfigError, is_secret, kafka_client_config

EMBEDDED = "embedded"
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
STARTING_OFFSETS = ("earliest", "latest", "committed")
OFFSET_RESETS = ("earliest", "latest")
REMOTE_OFFSETS = ("commit_log", "group")
ENGINES = ("auto", "delta-rs", "delta-spark")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

T = TypeVar("T")


class ConfigError(ValueError):
    """An invalid configuration; the message names the file and the dotted key."""


@dataclass(frozen=True, kw_only=True)
class SecurityConfig:
    protocol: str = "PLAINTEXT"
    sasl_mechanism: Optional[str] = None
    username: Optional[str] = None
    password: Optional[str] = field(default=None, repr=False)
    ssl_cafile: Optional[str] = None
    ssl_certfile: Optional[str] = None
    ssl_keyfile: Optional[str] = None
    ssl_password: Optional[str] = field(default=None, repr=False)
    ssl_check_hostname: bool = True


@dataclass(frozen=True, kw_only=True)
class KafkaConfig:
    bootstrap_servers: str
    security: SecurityConfig = field(default_factory=SecurityConfig)
    options: dict[str, str] = field(default_factory=dict)  # Java-style name (no "kafka.") -> value

    @property
    def embedded(self) -> bool:
        """True when the job must start the embedded broker."""
        return self.bootstrap_servers == EMBEDDED

    def client_options(self) -> dict[str, str]:
        """The `kafka.*` Spark options for security and extra settings (no bootstrap servers)."""
        security = self.security
        options = {"kafka.security.protocol": security.protocol}
        for name, option in _SECURITY_OPTIONS.items():
            value = getattr(security, name)
            if value is not None:
                options[option] = value
        if not security.ssl_check_hostname:
            options["kafka.ssl.endpoint.identification.algorithm"] = ""
        options.update({f"kafka.{name}": value for name, value in self.options.items()})
        return options


@dataclass(frozen=True, kw_only=True)
class SourceConfig:
    subscribe: Optional[str] = None  # comma-separated topics
    subscribe_pattern: Optional[str] = None
    assign: Optional[str] = None  # JSON, e.g. {"events":[0,1]}
    commit_log_topic: Optional[str] = None  # required when remote_offsets is commit_log
    commit_groups: tuple[str, ...]
    consumer_group: Optional[str] = None
    starting_offsets: str = "earliest"  # earliest | latest | committed | offsets JSON
    initial_offset_reset: str = "earliest"
    max_offsets_per_trigger: Optional[int] = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    stale_after: float = 60.0
    broker_timeout: float = 120.0  # planning retries an unanswering broker this long
    commit_log_timeout: float = 120.0  # the leader's offsets may go unread this long
    read_stall_timeout: float = 120.0  # a read task may make no progress this long
    commit_to_consumer_group: bool = False
    publish_commit_log: Optional[str] = None
    remote_offsets: str = "commit_log"

    @property
    def topics(self) -> tuple[str, ...]:
        """The topics named by subscribe or assign; empty with subscribe_pattern."""
        if self.subscribe is not None:
            return tuple(self.subscribe.split(","))
        if self.assign is not None:
            return tuple(json.loads(self.assign))
        return ()


@dataclass(frozen=True, kw_only=True)
class SinkConfig:
    path: str
    engine: str = "auto"
    partition_by: tuple[str, ...] = ()
    partition_by_date: bool = False
    resume_from_table: bool = True


@dataclass(frozen=True, kw_only=True)
class CheckpointConfig:
    location: str


@dataclass(frozen=True, kw_only=True)
class TriggerConfig:
    processing_time: float = 1.0
    available_now: bool = False


@dataclass(frozen=True, kw_only=True)
class LoggingConfig:
    level: str = "INFO"
    progress: bool = True
    progress_interval: float = 1.0


@dataclass(frozen=True, kw_only=True)
class EmbeddedConfig:
    partitions: int = 4
    events_per_second: int = 200
    event_bytes: int = 2048
    leader_lag: float = 2.0
    leader_commit_interval: float = 1.0
    run_for: Optional[float] = 30.0  # None: until interrupted


@dataclass(frozen=True, kw_only=True)
class ForwarderConfig:
    kafka: KafkaConfig
    source: SourceConfig
    sink: SinkConfig
    checkpoint: CheckpointConfig
    trigger: TriggerConfig = field(default_factory=TriggerConfig)
    transform: Optional[str] = None  # "module:function"
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    embedded: Optional[EmbeddedConfig] = None  # set exactly when kafka.embedded

    def source_options(self, bootstrap_servers: str) -> dict[str, str]:
        """Reader options of the `synchronized_kafka` source; all values are strings."""
        if bootstrap_servers == EMBEDDED:
            raise ValueError("pass the address of the started embedded broker, not 'embedded'")
        source = self.source
        options = {"kafka.bootstrap.servers": bootstrap_servers, **self.kafka.client_options()}
        for name, option in (("subscribe", "subscribe"), ("subscribe_pattern", "subscribePattern"),
                             ("assign", "assign")):
            value = getattr(source, name)
            if value is not None:
                options[option] = value
        if source.remote_offsets == "commit_log" and source.commit_log_topic is not None:
            options["commitLogTopic"] = source.commit_log_topic
        options["synchronizeCommitGroups"] = ",".join(source.commit_groups)
        if source.consumer_group is not None:
            options["consumerGroup"] = source.consumer_group
        options["startingOffsets"] = source.starting_offsets
        options["initialOffsetReset"] = source.initial_offset_reset
        if source.max_offsets_per_trigger is not None:
            options["maxOffsetsPerTrigger"] = str(source.max_offsets_per_trigger)
        options["failOnDataLoss"] = _spark_value(source.fail_on_data_loss)
        options["includeHeaders"] = _spark_value(source.include_headers)
        options["staleAfter"] = _spark_value(source.stale_after)
        options["brokerTimeout"] = _spark_value(source.broker_timeout)
        options["commitLogTimeout"] = _spark_value(source.commit_log_timeout)
        options["readStallTimeout"] = _spark_value(source.read_stall_timeout)
        options["remoteOffsets"] = source.remote_offsets
        options["commitToConsumerGroup"] = _spark_value(source.commit_to_consumer_group)
        if source.publish_commit_log is not None:
            options["publishCommitLog"] = source.publish_commit_log
        return options

    def redacted(self) -> dict[str, Any]:
        """The configuration as plain data with secret values replaced by '***', for logging."""
        return _redact(dataclasses.asdict(self))


def load_config(path: Union[str, os.PathLike[str]], overrides: Sequence[str] = ()) -> ForwarderConfig:
    """Read, expand, override and validate the YAML at `path`; raise `ConfigError` if invalid."""
    file = os.fspath(path)
    tree = _expand(_read_yaml(file), "", file)
    for override in overrides:
        _apply_override(tree, override, file)
    return _forwarder(_Section(file, "", tree, ForwarderConfig))


def parse_duration(text: str) -> float:
    """Seconds in a duration such as "500ms", "2s", "1.5 s", "5m" or "1h"; ValueError otherwise."""
    match = _DURATION.fullmatch(text)
    unit = _UNITS.get(match.group(2).lower()) if match else None
    if match is None or unit is None:
        raise ValueError(f"not a duration: {text!r}")
    return float(match.group(1)) * unit


# --- sections ---------------------------------------------------------------------------

_SECURITY_OPTIONS = {
    "sasl_mechanism": "kafka.sasl.mechanism",
    "username": "kafka.sasl.username",
    "password": "kafka.sasl.password",
    "ssl_cafile": "kafka.ssl.ca.location",
    "ssl_certfile": "kafka.ssl.certificate.location",
    "ssl_keyfile": "kafka.ssl.key.location",
    "ssl_password": "kafka.ssl.key.password",
}
# kafka-python settings that dedicated keys own; kafka.options may not set them.
_OWNED_CLIENT_KEYS = {
    "bootstrap_servers": "kafka.bootstrap_servers",
    "security_protocol": "kafka.security.protocol",
    "sasl_mechanism": "kafka.security.sasl_mechanism",
    "sasl_plain_username": "kafka.security.username",
    "ssl_cafile": "kafka.security.ssl_cafile",
    "ssl_certfile": "kafka.security.ssl_certfile",
    "ssl_keyfile": "kafka.security.ssl_keyfile",
    "ssl_check_hostname": "kafka.security.ssl_check_hostname",
}


def _forwarder(root: _Section) -> ForwarderConfig:
    kafka = _kafka(root.section("kafka"))
    embedded = None
    if kafka.embedded:
        embedded = _embedded(root.section("embedded"))
        if kafka.security.protocol != "PLAINTEXT":
            raise root.error("kafka.security.protocol", "the embedded broker speaks PLAINTEXT only")
    elif root.is_set("embedded"):
        raise root.error("embedded", f"only used when kafka.bootstrap_servers is {EMBEDDED!r}; "
                                     "remove the section (or --set embedded=null)")
    return ForwarderConfig(
        kafka=kafka,
        source=_source(root.section("source")),
        sink=_sink(root.section("sink")),
        checkpoint=CheckpointConfig(location=root.section("checkpoint").get("location", _path)),
        trigger=_trigger(root.section("trigger")),
        transform=root.get("transform", _transform),
        logging=_logging(root.section("logging")),
        embedded=embedded,
    )


def _kafka(section: _Section) -> KafkaConfig:
    return KafkaConfig(
        bootstrap_servers=section.get("bootstrap_servers", _bootstrap_servers),
        security=_security(section.section("security")),
        options=_kafka_options(section),
    )


def _security(section: _Section) -> SecurityConfig:
    config = SecurityConfig(
        protocol=section.get("protocol", _choice(PROTOCOLS)),
        sasl_mechanism=section.get("sasl_mechanism", _choice(SASL_MECHANISMS)),
        username=section.get("username", _string),
        password=section.get("password", _string),
        ssl_cafile=section.get("ssl_cafile", _path),
        ssl_certfile=section.get("ssl_certfile", _path),
        ssl_keyfile=section.get("ssl_keyfile", _path),
        ssl_password=section.get("ssl_password", _string),
        ssl_check_hostname=section.get("ssl_check_hostname", _boolean),
    )
    protocol = section.key("protocol")
    sasl = config.protocol.startswith("SASL_")
    ssl = config.protocol in ("SSL", "SASL_SSL")
    for name in ("sasl_mechanism", "username", "password"):
        is_set = getattr(config, name) is not None
        if sasl and not is_set:
            raise section.error(name, f"required when {protocol} is {config.protocol}")
        if is_set and not sasl:
            raise section.error(name, f"is a SASL setting but {protocol} is {config.protocol}; "
                                      "use SASL_PLAINTEXT or SASL_SSL")
    for name in ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password", "ssl_check_hostname"):
        if section.is_set(name) and not ssl:
            raise section.error(name, f"is an SSL setting but {protocol} is {config.protocol}; "
                                      "use SSL or SASL_SSL")
    if config.ssl_certfile is not None and config.ssl_keyfile is None:
        raise section.error("ssl_keyfile", f"required with {section.key('ssl_certfile')}")
    if config.ssl_keyfile is not None and config.ssl_certfile is None:
        raise section.error("ssl_certfile", f"required with {section.key('ssl_keyfile')}")
    if config.ssl_password is not None and config.ssl_keyfile is None:
        raise section.error("ssl_password", f"only used with {section.key('ssl_keyfile')}")
    return config


def _kafka_options(section: _Section) -> dict[str, str]:
    raw = section.raw.get("options")
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise section.error("options", f"expected a mapping of Kafka client options, got {_describe(raw)}")
    options: dict[str, str] = {}
    for key, value in raw.items():
        name = str(key)
        where = f"options.{name}"
        if name.startswith("kafka."):
            raise section.error(where, "write the option name without the 'kafka.' prefix")
        if is_secret(name):
            raise section.error(where, "secrets belong in kafka.security (username, password, ssl_password)")
        if value is None or isinstance(value, (Mapping, list)):
            raise section.error(where, f"expected a string, number or boolean, got {_describe(value)}")
        text = _spark_value(value)
        try:
            client = kafka_client_config({f"kafka.{name}": text})
        except KafkaConfigError as exc:
            raise section.error(where, str(exc)) from None
        owned = sorted(client.keys() & _OWNED_CLIENT_KEYS.keys())
        if owned:
            raise section.error(where, f"set {_OWNED_CLIENT_KEYS[owned[0]]} instead")
        options[name] = text
    return options


def _source(section: _Section) -> SourceConfig:
    config = SourceConfig(
        subscribe=section.get("subscribe", _topic_list),
        subscribe_pattern=section.get("subscribe_pattern", _regex),
        assign=section.get("assign", _assign),
        commit_log_topic=section.get("commit_log_topic", _topic),
        commit_groups=section.get("commit_groups", _group_list),
        consumer_group=section.get("consumer_group", _string),
        starting_offsets=section.get("starting_offsets", _starting_offsets),
        initial_offset_reset=section.get("initial_offset_reset", _choice(OFFSET_RESETS)),
        max_offsets_per_trigger=section.get("max_offsets_per_trigger", _positive_int),
        fail_on_data_loss=section.get("fail_on_data_loss", _boolean),
        include_headers=section.get("include_headers", _boolean),
        stale_after=section.get("stale_after", _positive_duration),
        broker_timeout=section.get("broker_timeout", _positive_duration),
        commit_log_timeout=section.get("commit_log_timeout", _positive_duration),
        read_stall_timeout=section.get("read_stall_timeout", _positive_duration),
        commit_to_consumer_group=section.get("commit_to_consumer_group", _boolean),
        publish_commit_log=section.get("publish_commit_log", _topic),
        remote_offsets=section.get("remote_offsets", _choice(REMOTE_OFFSETS)),
    )
    kinds = [name for name in ("subscribe", "subscribe_pattern", "assign") if getattr(config, name) is not None]
    if not kinds:
        raise section.error("subscribe", "missing; set exactly one of source.subscribe, "
                                         "source.subscribe_pattern, source.assign")
    if len(kinds) > 1:
        raise section.error(kinds[1], f"cannot be combined with {section.key(kinds[0])}; "
                                      "set exactly one of subscribe, subscribe_pattern, assign")
    if config.remote_offsets == "commit_log" and config.commit_log_topic is None:
        raise section.error("commit_log_topic", "missing required key (needed when remote_offsets is commit_log)")
    needs_group = {
        "starting_offsets": config.starting_offsets == "committed",
        "commit_to_consumer_group": config.commit_to_consumer_group,
        "publish_commit_log": config.publish_commit_log is not None,
    }
    for name, needed in needs_group.items():
        if needed and config.consumer_group is None:
            raise section.error(name, f"requires {section.key('consumer_group')}")
    if config.starting_offsets not in STARTING_OFFSETS and config.topics:
        for topic in json.loads(config.starting_offsets):
            if topic not in config.topics:
                raise section.error("starting_offsets", f"topic {topic!r} is not subscribed")
    return config


def _sink(section: _Section) -> SinkConfig:
    return SinkConfig(
        path=section.get("path", _path),
        engine=section.get("engine", _choice(ENGINES)),
        partition_by=section.get("partition_by", _columns),
        partition_by_date=section.get("partition_by_date", _boolean),
        resume_from_table=section.get("resume_from_table", _boolean),
    )


def _trigger(section: _Section) -> TriggerConfig:
    return TriggerConfig(
        processing_time=section.get("processing_time", _duration),
        available_now=section.get("available_now", _boolean),
    )


def _logging(section: _Section) -> LoggingConfig:
    return LoggingConfig(
        level=section.get("level", _choice(LOG_LEVELS)),
        progress=section.get("progress", _boolean),
        progress_interval=section.get("progress_interval", _positive_duration),
    )


def _embedded(section: _Section) -> EmbeddedConfig:
    return EmbeddedConfig(
        partitions=section.get("partitions", _positive_int),
        events_per_second=section.get("events_per_second", _positive_int),
        event_bytes=section.get("event_bytes", _positive_int),
        leader_lag=section.get("leader_lag", _duration),
        leader_commit_interval=section.get("leader_commit_interval", _positive_duration),
        run_for=section.get("run_for", _positive_duration, nullable=True),
    )


# --- reading the raw tree ---------------------------------------------------------------

class _Invalid(Exception):
    """Raised by a converter: what was expected, and optionally why the value is not it."""

    def __init__(self, expected: str, detail: str = "") -> None:
        super().__init__(expected)
        self.expected = expected
        self.detail = detail


class _Section:
    """One mapping of the raw config, read field by field against its dataclass."""

    def __init__(self, file: str, prefix: str, raw: Mapping[Any, Any], cls: type) -> None:
        self.file, self.prefix, self.raw, self.cls = file, prefix, raw, cls
        self._fields = {f.name: f for f in dataclasses.fields(cls)}
        for key in raw:
            if key not in self._fields:
                raise self.error(str(key), "unknown key" + _suggestion(str(key), self._fields, prefix))

    def key(self, name: str) -> str:
        return _join(self.prefix, name)

    def error(self, name: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.file}: {self.key(name)}: {problem}")

    def is_set(self, name: str) -> bool:
        return self.raw.get(name) is not None

    def get(self, name: str, convert: Callable[[Any], T], nullable: bool = False) -> T:
        """The converted value; the field's default when absent or null (None if `nullable`)."""
        raw = self.raw.get(name)
        if raw is None:
            return None if nullable and name in self.raw else self._default(name)  # type: ignore[return-value]
        try:
            return convert(raw)
        except _Invalid as exc:
            detail = f" ({exc.detail})" if exc.detail else ""
            raise self.error(name, f"expected {exc.expected}, got {_describe(raw, is_secret(name))}{detail}") from None

    def section(self, name: str) -> _Section:
        cls = _nested_schema(self.cls, name)
        raw = self.raw.get(name)
        if raw is None:
            self._default(name)
            raw = {}
        if not isinstance(raw, Mapping):
            raise self.error(name, f"expected a mapping, got {_describe(raw)}")
        return _Section(self.file, self.key(name), raw, cls)

    def _default(self, name: str) -> Any:
        spec = self._fields[name]
        if spec.default is not dataclasses.MISSING:
            return spec.default
        if spec.default_factory is not dataclasses.MISSING:
            return spec.default_factory()
        kind = "section" if dataclasses.is_dataclass(_nested_schema(self.cls, name)) else "key"
        raise self.error(name, f"missing required {kind}")


def _nested_schema(cls: type, name: str) -> Any:
    """The dataclass of a nested section, `dict` for a free-form mapping, None for a value."""
    hint = get_type_hints(cls)[name]
    for candidate in (hint, *get_args(hint)):
        if dataclasses.is_dataclass(candidate):
            return candidate
    return dict if get_origin(hint) is dict else None


class _StrictLoader(yaml.SafeLoader):
    """A SafeLoader that rejects duplicate keys instead of keeping the last one."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[str] = set()
    for key_node, _ in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
            if key_node.value in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key_node.value!r}", key_node.start_mark)
            seen.add(key_node.value)
    return loader.construct_mapping(node)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _read_yaml(file: str) -> dict[Any, Any]:
    try:
        with open(file, "rb") as stream:
            tree = yaml.load(stream, Loader=_StrictLoader)
    except FileNotFoundError:
        raise ConfigError(f"{file}: file not found") from None
    except OSError as exc:
        raise ConfigError(f"{file}: cannot read: {exc.strerror}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise ConfigError(f"{file}: not valid YAML{where}: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{file}: not valid YAML: {exc}") from None
    if not isinstance(tree, dict):
        raise ConfigError(f"{file}: expected a mapping with sections kafka, source, sink, checkpoint "
                          f"at the top level, got {_describe(tree) if tree is not None else 'an empty file'}")
    return tree


_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _expand(value: Any, key: str, file: str) -> Any:
    """A copy of `value` with `${VAR}` / `${VAR:-default}` expanded in every string value."""
    if isinstance(value, dict):
        return {k: _expand(v, _join(key, str(k)), file) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, f"{key}[{i}]", file) for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        current = os.environ.get(name)
        if current is not None and (current or default is None):
            return current
        if default is not None:
            return default
        raise ConfigError(f"{file}: {key}: environment variable {name} is not set "
                          f"(write ${{{name}:-default}} to give a default)")

    return _ENV_REFERENCE.sub(substitute, value)


def _apply_override(tree: dict[Any, Any], override: str, file: str) -> None:
    """Set one `dotted.key=value` in the raw tree, walking the schema so option names may hold dots."""
    dotted, sep, text = override.partition("=")
    dotted = dotted.strip()
    if not sep or not dotted:
        shown = "<hidden>" if is_secret(override) else repr(override)
        raise ConfigError(f"{file}: --set {shown}: expected dotted.key=value")
    try:
        value = _expand(yaml.safe_load(text), dotted, file)
    except yaml.YAMLError:
        raise ConfigError(f"{file}: {dotted}: --set value is not a valid YAML value") from None
    parts = dotted.split(".")
    node, cls = tree, ForwarderConfig
    for depth, name in enumerate(parts):
        key = ".".join(parts[: depth + 1])
        known = [f.name for f in dataclasses.fields(cls)]
        if name not in known:
            prefix = ".".join(parts[:depth])
            raise ConfigError(f"{file}: {key}: unknown key in --set{_suggestion(name, known, prefix)}")
        if depth == len(parts) - 1:
            node[name] = value
            return
        child = _nested_schema(cls, name)
        if child is None:
            raise ConfigError(f"{file}: {key}: is a value, not a section (in --set {dotted}=...)")
        if not isinstance(node.get(name), dict):
            node[name] = {}
        node = node[name]
        if child is dict:
            node[".".join(parts[depth + 1:])] = value
            return
        cls = child


# --- converters: raw YAML value -> typed value, raising _Invalid ------------------------------

_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_COLUMN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SERVER = re.compile(r"[^\s,]+:[0-9]+")
_TRANSFORM = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*", re.ASCII)
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
_DURATION = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]+)\s*")
_UNITS = {
    **dict.fromkeys(("ms", "millisecond", "milliseconds"), 0.001),
    **dict.fromkeys(("s", "sec", "second", "seconds"), 1.0),
    **dict.fromkeys(("m", "min", "minute", "minutes"), 60.0),
    **dict.fromkeys(("h", "hour", "hours"), 3600.0),
}
_DURATION_EXAMPLES = "such as '500ms', '2s' or '5m'"


def _string(raw: Any) -> str:
    if isinstance(raw, str) and raw.strip():
        return raw
    raise _Invalid("a non-empty string", "quote it in YAML" if isinstance(raw, (int, float)) else "")


def _boolean(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise _Invalid("true or false")


def _positive_int(raw: Any) -> int:
    if isinstance(raw, str) and re.fullmatch(r"\s*[0-9]+\s*", raw):
        raw = int(raw)
    if isinstance(raw, int) and not isinstance(raw, bool) and raw > 0:
        return raw
    raise _Invalid("a positive integer")


def _duration(raw: Any) -> float:
    if isinstance(raw, str):
        try:
            return parse_duration(raw)
        except ValueError:
            pass
    raise _Invalid(f"a duration {_DURATION_EXAMPLES}")


def _positive_duration(raw: Any) -> float:
    seconds = _duration(raw)
    if seconds <= 0:
        raise _Invalid(f"a positive duration {_DURATION_EXAMPLES}")
    return seconds


def _choice(choices: Sequence[str]) -> Callable[[Any], str]:
    def convert(raw: Any) -> str:
        if isinstance(raw, str) and raw in choices:
            return raw
        raise _Invalid("one of " + ", ".join(repr(c) for c in choices))
    return convert


def _path(raw: Any) -> str:
    text = _string(raw)
    if _URI.match(text) or os.path.isabs(text):
        return text
    return os.path.abspath(os.path.expanduser(text))


def _bootstrap_servers(raw: Any) -> str:
    text = _string(raw).strip()
    if text == EMBEDDED:
        return text
    servers = [s.strip() for s in text.split(",")]
    if all(_SERVER.fullmatch(s) for s in servers):
        return ",".join(servers)
    raise _Invalid(f"{EMBEDDED!r} or a comma-separated list of host:port")


def _topic(raw: Any) -> str:
    if isinstance(raw, str) and _TOPIC.fullmatch(raw):
        return raw
    raise _Invalid("a topic name (letters, digits, '.', '_', '-')")


def _topic_list(raw: Any) -> str:
    names = raw.split(",") if isinstance(raw, str) else raw
    if isinstance(names, list) and names and all(isinstance(n, str) and _TOPIC.fullmatch(n.strip()) for n in names):
        return ",".join(n.strip() for n in names)
    raise _Invalid("topic names, comma-separated or as a list")


def _group_list(raw: Any) -> tuple[str, ...]:
    if isinstance(raw, list) and raw and all(isinstance(g, str) and g.strip() and "," not in g for g in raw):
        return tuple(raw)
    raise _Invalid("a non-empty list of group ids (without commas)")


def _columns(raw: Any) -> tuple[str, ...]:
    if (isinstance(raw, list) and all(isinstance(c, str) and _COLUMN.fullmatch(c) for c in raw)
            and len(set(raw)) == len(raw)):
        return tuple(raw)
    raise _Invalid("a list of distinct column names")


def _regex(raw: Any) -> str:
    text = _string(raw)
    try:
        re.compile(text)
    except re.error as exc:
        raise _Invalid("a valid regular expression", str(exc)) from None
    return text


def _transform(raw: Any) -> str:
    if isinstance(raw, str) and _TRANSFORM.fullmatch(raw):
        return raw
    raise _Invalid("'module:function', e.g. 'mypackage.transforms:enrich'")


def _assign(raw: Any) -> str:
    expected = 'JSON such as {"events": [0, 1]}'
    value = _json_object(raw, expected)
    for topic, partitions in value.items():
        if not (_TOPIC.fullmatch(topic) and isinstance(partitions, list) and partitions
                and all(_is_int(p) and p >= 0 for p in partitions) and len(set(partitions)) == len(partitions)):
            raise _Invalid(expected, f"topic {topic!r} needs a list of distinct partition numbers")
    return json.dumps(value, separators=(",", ":"))


def _starting_offsets(raw: Any) -> str:
    if isinstance(raw, str) and raw in STARTING_OFFSETS:
        return raw
    expected = "'earliest', 'latest', 'committed' or offsets JSON such as {\"events\": {\"0\": 23}}"
    value = _json_object(raw, expected)
    offsets: dict[str, dict[str, int]] = {}
    for topic, partitions in value.items():
        if not (_TOPIC.fullmatch(topic) and isinstance(partitions, dict) and partitions):
            raise _Invalid(expected, f"topic {topic!r} needs a mapping of partition to offset")
        for partition, offset in partitions.items():
            if not (re.fullmatch(r"[0-9]+", str(partition)) and _is_int(offset) and offset >= -2):
                raise _Invalid(expected, f"{topic!r} partition {partition!r}: offset must be an integer >= -2")
        offsets[topic] = {str(p): o for p, o in partitions.items()}
    return json.dumps(offsets, separators=(",", ":"))


def _json_object(raw: Any, expected: str) -> dict[str, Any]:
    """A mapping given either as YAML or as a JSON string."""
    value = raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise _Invalid(expected, f"not valid JSON: {exc.msg} at column {exc.colno}") from None
    if not isinstance(value, dict) or not value:
        raise _Invalid(expected)
    return {str(k): v for k, v in value.items()}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# --- formatting -------------------------------------------------------------------------

def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _suggestion(name: str, known: Iterable[str], prefix: str) -> str:
    candidates = sorted(known)
    match = difflib.get_close_matches(name, candidates, n=1)
    if match:
        return f" (did you mean {_join(prefix, match[0])!r}?)"
    return f" (known keys: {', '.join(candidates)})"


def _describe(value: Any, secret: bool = False) -> str:
    """A short rendering of a bad value for an error message; secrets show only their type."""
    if secret and value is not None:
        return f"<hidden {type(value).__name__}>"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _spark_value(value: Any) -> str:
    """Spark option spelling: true/false, integral floats without '.0'."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _redact(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: ("***" if v is not None and is_secret(str(k)) else _redact(v)) for k, v in value.items()}
    return value
