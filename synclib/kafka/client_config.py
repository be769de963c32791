"""Map Spark-style `kafka.*` options to kafka-python client keyword arguments.

`kafka.security.protocol` -> `security_protocol`; a few Java/librdkafka names whose
kafka-python spelling differs are translated explicitly. Unknown names are an error
naming the option, so a typo never silently falls back to a default.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

KAFKA_PREFIX = "kafka."
# How long an unanswering broker is retried before an operation fails (settings may change it).
DEFAULT_DEADLINE_S = 120.0

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
_SECRET_MARKERS = ("password", "secret", "jaas", "token", "key.password")
# `kafka.isolation.level`: read_committed skips aborted transactions' records and bounds reading
# by the last stable offset (the planner asks for it too).
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
_JAAS_CREDENTIALS = re.compile(r'(username|password)\s*=\s*"([^"]*)"')

_CONSUMER_KEYS = set(KafkaConsumer.DEFAULT_CONFIG)
_PRODUCER_KEYS = set(KafkaProducer.DEFAULT_CONFIG)
_ADMIN_KEYS = set(KafkaAdminClient.DEFAULT_CONFIG)
_ALL_KEYS = _CONSUMER_KEYS | _PRODUCER_KEYS | _ADMIN_KEYS


class KafkaConfigError(ValueError):
    """A `kafka.*` option that kafka-python does not know or cannot take."""


def is_secret(option_name: str) -> bool:
    """True for option names whose values must never be logged."""
    lowered = option_name.lower()
    return any(marker in lowered for marker in _SECRET_MARKERS)


def parse_bool(text: str) -> bool:
    """`true` or `false` in any case, as Spark options spell booleans; ValueError otherwise."""
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise ValueError(f"not a boolean: {text!r}")
    return lowered == "true"


def redact(options: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `options` with secret values replaced, for logging."""
    return {k: ("***" if is_secret(k) else v) for k, v in options.items()}


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
        if key not in _ALL_KEYS:
            raise KafkaConfigError(f"option {option!r}: kafka-python has no setting {key!r}")
        if key in _RESERVED:
            raise KafkaConfigError(f"option {option!r} is managed by synclib and cannot be set")
        config[key] = _convert(option, key, raw)
    servers = config.get("bootstrap_servers")
    if isinstance(servers, str):
        config["bootstrap_servers"] = [s.strip() for s in servers.split(",") if s.strip()]
    return config


def isolation_level(config: Mapping[str, Any]) -> str:
    """The consumers' isolation level: `read_uncommitted` (kafka-python's default) or `read_committed`."""
    return str(config.get("isolation_level", ISOLATION_LEVELS[0]))


def for_consumer(config: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k in _CONSUMER_KEYS}


def for_producer(config: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k in _PRODUCER_KEYS}


def for_admin(config: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k in _ADMIN_KEYS}


def _jaas_credentials(option: str, jaas: str) -> dict[str, str]:
    found = dict(_JAAS_CREDENTIALS.findall(jaas))
    if "username" not in found or "password" not in found:
        raise KafkaConfigError(f"option {option!r}: expected username=\"...\" password=\"...\"")
    return {"sasl_plain_username": found["username"], "sasl_plain_password": found["password"]}


def _convert(option: str, key: str, raw: Any) -> Any:
    default = (KafkaConsumer.DEFAULT_CONFIG.get(key) if key in _CONSUMER_KEYS
               else KafkaProducer.DEFAULT_CONFIG.get(key, KafkaAdminClient.DEFAULT_CONFIG.get(key)))
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
        shown = "***" if is_secret(option) else repr(raw)
        raise KafkaConfigError(
            f"option {option!r}: {shown} is not a {type(default).__name__}"
        ) from None
    if key == "api_version" and text:
        return tuple(int(p) for p in text.split("."))
    if key == "isolation_level":
        if text.lower() not in ISOLATION_LEVELS:
            raise KafkaConfigError(f"option {option!r}: {raw!r} is not one of {', '.join(ISOLATION_LEVELS)}")
        return text.lower()
    return text
