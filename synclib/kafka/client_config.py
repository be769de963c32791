"""kafka-python client settings: what each kind of client takes, and the defaults synclib relies on.

The `kafka.*` Spark options become these settings in `synclib.settings.kafka.kafka_client_config`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

# How long an unanswering broker is retried before an operation fails (settings may change it).
DEFAULT_DEADLINE_S = 120.0
# `kafka.isolation.level`: read_committed skips aborted transactions' records and bounds reading
# by the last stable offset (the planner asks for it too).
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")

_CONSUMER_KEYS = set(KafkaConsumer.DEFAULT_CONFIG)
_PRODUCER_KEYS = set(KafkaProducer.DEFAULT_CONFIG)
_ADMIN_KEYS = set(KafkaAdminClient.DEFAULT_CONFIG)
# Every setting of a kafka-python client with its default (a consumer's, then a producer's, where they differ).
DEFAULTS: Mapping[str, Any] = {**KafkaAdminClient.DEFAULT_CONFIG, **KafkaProducer.DEFAULT_CONFIG,
                               **KafkaConsumer.DEFAULT_CONFIG}


def isolation_level(config: Mapping[str, Any]) -> str:
    """The consumers' isolation level: `read_uncommitted` (kafka-python's default) or `read_committed`."""
    return str(config.get("isolation_level", ISOLATION_LEVELS[0]))


def for_consumer(config: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k in _CONSUMER_KEYS}


def for_producer(config: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k in _PRODUCER_KEYS}


def for_admin(config: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if k in _ADMIN_KEYS}
