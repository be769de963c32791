"""The `kafka:` section: bootstrap servers, security and extra kafka-python client options.

Each security setting carries its Spark `kafka.*` option name (`serialization_alias`), so
`KafkaConfig.client_options()` is what the source reads back with `kafka_client_config`.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from synclib.kafka.client_config import KAFKA_PREFIX, KafkaConfigError, is_secret, kafka_client_config
from synclib.kafka.preflight import DEFAULT_CONNECT_TIMEOUT_S
from synclib.settings.model import Invalid, Section, SettingError, describe
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
    spark_value,
)

BOOTSTRAP_OPTION = f"{KAFKA_PREFIX}bootstrap.servers"
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
    """How the clients connect to the brokers (see [Kafka security](#kafka-security))."""
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
