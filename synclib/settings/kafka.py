"""The `kafka:` section: bootstrap servers, security and extra kafka-python client options, and
`kafka_client_config`, which maps Spark-style `kafka.*` options to kafka-python client kwargs.

Each security setting carries its Spark `kafka.*` option name (`serialization_alias`), so
`KafkaConfig.client_options()` is what the source reads back with `kafka_client_config`.
`kafka.security.protocol` -> `security_protocol`; a few Java/librdkafka names whose kafka-python
spelling differs are translated explicitly. Unknown names are an error naming the option, so a
typo never silently falls back to a default.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pydantic import Field, field_validator, model_validator

from synclib.kafka.client_config import DEFAULTS, ISOLATION_LEVELS
from synclib.kafka.preflight import DEFAULT_CONNECT_TIMEOUT_S
from synclib.settings.model import Invalid, Section, SettingError, describe, is_secret
from synclib.settings.values import (
    EMBEDDED,
    Boolean,
    BootstrapServers,
    FilePath,
    PositiveDuration,
    ProtocolChoice,
    SaslMechanismChoice,
    SecretString,
    String,
    parse_bool,
    spark_value,
)

KAFKA_PREFIX = "kafka."
BOOTSTRAP_OPTION = f"{KAFKA_PREFIX}bootstrap.servers"
# Java / librdkafka names whose kafka-python name is not the dotted name with '_'.
_RENAMES = {
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "ssl.ca.location": "ssl_cafile",
    "ssl.truststore.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "max.poll.records": "max_poll_records",
}
# Keys the job sets itself; setting them through kafka.* would break the source's contract.
_RESERVED = {"group_id", "enable_auto_commit", "key_deserializer", "value_deserializer",
             "key_serializer", "value_serializer", "auto_offset_reset"}
_JAAS_CREDENTIALS = re.compile(r'(username|password)\s*=\s*"([^"]*)"')

_SASL_SETTINGS = ("sasl_mechanism", "username", "password")
_SSL_SETTINGS = ("ssl_cafile", "ssl_certfile", "ssl_keyfile", "ssl_password", "ssl_check_hostname")
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


class SecurityConfig(Section):
    """`kafka.security`: protocol, SASL credentials and SSL files (relative paths resolved at load)."""

    protocol: ProtocolChoice = Field("PLAINTEXT", serialization_alias="kafka.security.protocol")
    """How the clients connect to the brokers (see [Kafka security](operations/security.md))."""
    sasl_mechanism: SaslMechanismChoice | None = Field(None, serialization_alias="kafka.sasl.mechanism")
    """SASL: the mechanism; required with a SASL protocol."""
    username: String | None = Field(None, serialization_alias="kafka.sasl.username")
    """SASL: the user; required with a SASL protocol."""
    password: SecretString | None = Field(None, serialization_alias="kafka.sasl.password")
    """SASL: the password; required with a SASL protocol."""
    ssl_cafile: FilePath | None = Field(None, serialization_alias="kafka.ssl.ca.location")
    """TLS: the CA bundle that verifies the brokers' certificates."""
    ssl_certfile: FilePath | None = Field(None, serialization_alias="kafka.ssl.certificate.location")
    """TLS: the client certificate (mutual TLS), with `ssl_keyfile`."""
    ssl_keyfile: FilePath | None = Field(None, serialization_alias="kafka.ssl.key.location")
    """TLS: the client certificate's key (mutual TLS), with `ssl_certfile`."""
    ssl_password: SecretString | None = Field(None, serialization_alias="kafka.ssl.key.password")
    """TLS: the password of `ssl_keyfile`."""
    ssl_check_hostname: Boolean = True
    """TLS: check that a broker's certificate names its host; `false` is Spark's
    `kafka.ssl.endpoint.identification.algorithm` set to empty."""

    @model_validator(mode="after")
    def _consistent(self) -> SecurityConfig:
        sasl = self.protocol.startswith("SASL_")
        ssl = self.protocol in ("SSL", "SASL_SSL")
        for name in _SASL_SETTINGS:
            is_set = getattr(self, name) is not None
            if sasl and not is_set:
                raise SettingError(name, f"required when {{0}} is {self.protocol}", "protocol")
            if is_set and not sasl:
                raise SettingError(name, f"is a SASL setting but {{0}} is {self.protocol}; "
                                         "use SASL_PLAINTEXT or SASL_SSL", "protocol")
        for name in _SSL_SETTINGS:
            if name in self.model_fields_set and not ssl:
                raise SettingError(name, f"is an SSL setting but {{0}} is {self.protocol}; use SSL or SASL_SSL",
                                   "protocol")
        if self.ssl_certfile is not None and self.ssl_keyfile is None:
            raise SettingError("ssl_keyfile", "required with {0}", "ssl_certfile")
        if self.ssl_keyfile is not None and self.ssl_certfile is None:
            raise SettingError("ssl_certfile", "required with {0}", "ssl_keyfile")
        if self.ssl_password is not None and self.ssl_keyfile is None:
            raise SettingError("ssl_password", "only used with {0}", "ssl_keyfile")
        return self

    def client_options(self) -> dict[str, str]:
        """The `kafka.*` Spark options of these settings."""
        options = {field.serialization_alias or name: spark_value(value)
                   for name, field in type(self).model_fields.items()
                   if field.serialization_alias and (value := getattr(self, name)) is not None}
        if not self.ssl_check_hostname:
            options["kafka.ssl.endpoint.identification.algorithm"] = ""
        return options


class KafkaConfig(Section):
    """`kafka`: where the brokers are ('embedded' starts the local one), security, extra options."""

    bootstrap_servers: BootstrapServers = Field(serialization_alias=BOOTSTRAP_OPTION)
    """`host:port,...`, or `embedded` to start the local broker and the simulation."""
    security: SecurityConfig = Field(default_factory=SecurityConfig)
    connect_timeout: PositiveDuration = DEFAULT_CONNECT_TIMEOUT_S
    """Before Spark starts, the job (and `status`) connects to the brokers and looks its topics up
    for this long at most, then exits 3 with one line."""
    options: dict[str, str] = Field(default_factory=dict)
    """Other client settings: Java-style names without `kafka.` (`request.timeout.ms: 30000`),
    each the Spark option `kafka.<name>`."""

    @field_validator("options", mode="before")
    @classmethod
    def _client_options(cls, raw: Any) -> dict[str, str]:
        if not isinstance(raw, dict):
            raise Invalid("a mapping of Kafka client options")
        options: dict[str, str] = {}
        for key, value in raw.items():
            name = str(key)
            if name.startswith("kafka."):
                raise SettingError(name, "write the option name without the 'kafka.' prefix")
            if is_secret(name):
                raise SettingError(name, "secrets belong in kafka.security (username, password, ssl_password)")
            if value is None or isinstance(value, (dict, list)):
                raise SettingError(name, f"expected a string, number or boolean, got {describe(value)}")
            text = spark_value(value)
            try:
                client = kafka_client_config({f"kafka.{name}": text})
            except KafkaConfigError as exc:
                raise SettingError(name, str(exc)) from None
            owned = sorted(client.keys() & _OWNED_CLIENT_KEYS.keys())
            if owned:
                raise SettingError(name, f"set {_OWNED_CLIENT_KEYS[owned[0]]} instead")
            options[name] = text
        return options

    @property
    def embedded(self) -> bool:
        """True when the job must start the embedded broker."""
        return self.bootstrap_servers == EMBEDDED

    def client_options(self) -> dict[str, str]:
        """The `kafka.*` Spark options for security and extra settings (no bootstrap servers)."""
        return {**self.security.client_options(), **{f"kafka.{k}": v for k, v in self.options.items()}}


# --- `kafka.*` options -> kafka-python kwargs ---------------------------------------------

class KafkaConfigError(ValueError):
    """A `kafka.*` option that kafka-python does not know or cannot take."""


def kafka_client_config(options: Mapping[str, Any]) -> dict[str, Any]:
    """kafka-python kwargs from the `kafka.*` entries of `options` (other keys ignored).

    `kafka.bootstrap.servers` becomes `bootstrap_servers` (a list). Values given as
    strings (Spark options always are) are converted to the type of kafka-python's default.
    """
    config: dict[str, Any] = {}
    for option, raw in options.items():
        if not option.startswith(KAFKA_PREFIX):
            continue
        name = option[len(KAFKA_PREFIX):]
        if name == "sasl.jaas.config":
            config.update(_jaas_credentials(option, str(raw)))
            continue
        if name == "ssl.endpoint.identification.algorithm":
            config["ssl_check_hostname"] = bool(str(raw).strip())
            continue
        key = _RENAMES.get(name, name.replace(".", "_"))
        if key not in DEFAULTS:
            raise KafkaConfigError(f"option {option!r}: kafka-python has no setting {key!r}")
        if key in _RESERVED:
            raise KafkaConfigError(f"option {option!r} is managed by synclib and cannot be set")
        config[key] = _convert(option, key, raw)
    servers = config.get("bootstrap_servers")
    if isinstance(servers, str):
        config["bootstrap_servers"] = [s.strip() for s in servers.split(",") if s.strip()]
    return config


def _jaas_credentials(option: str, jaas: str) -> dict[str, str]:
    found = dict(_JAAS_CREDENTIALS.findall(jaas))
    if "username" not in found or "password" not in found:
        raise KafkaConfigError(f"option {option!r}: expected username=\"...\" password=\"...\"")
    return {"sasl_plain_username": found["username"], "sasl_plain_password": found["password"]}


def _convert(option: str, key: str, raw: Any) -> Any:
    default = DEFAULTS[key]
    if not isinstance(raw, str):
        return raw
    text = raw.strip()
    try:
        if isinstance(default, bool):
            return parse_bool(text)
        if isinstance(default, int):
            return int(text)
        if isinstance(default, float):
            return float(text)
    except ValueError:
        raise KafkaConfigError(
            f"option {option!r}: {describe(raw, secret=is_secret(option))} is not a {type(default).__name__}"
        ) from None
    if key == "api_version" and text:
        return tuple(int(p) for p in text.split("."))
    if key == "isolation_level":
        if text.lower() not in ISOLATION_LEVELS:
            raise KafkaConfigError(f"option {option!r}: {raw!r} is not one of {', '.join(ISOLATION_LEVELS)}")
        return text.lower()
    return text
