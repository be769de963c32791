"""Driver-side broker queries for planning: partitions, watermarks, group offsets.

Each query is one batched request over all partitions, not one per partition.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from kafka import KafkaAdminClient, TopicPartition
from kafka.admin import OffsetSpec
from kafka.errors import KafkaError, UnknownBrokerIdError

from synclib.compat import kafka_python
from synclib.kafka.client_config import DEFAULT_DEADLINE_S, ISOLATION_LEVELS, for_admin, isolation_level
from synclib.kafka.subscription import Subscription
from synclib.offsets import TopicPartitionKey

logger = logging.getLogger(__name__)

T = TypeVar("T")


def describe_topics(admin: KafkaAdminClient, topics: Iterable[str] | None = None
                    ) -> dict[str, tuple[str | None, tuple[int, ...]]]:
    """One bounded metadata round trip: {topic: (topic id, partitions)} for the given topics
    (all topics but the internal ones, as Spark's Kafka source lists them, when None); topics
    that do not exist are absent."""
    return _described(admin, topics)[0]


def _described(admin: KafkaAdminClient, topics: Iterable[str] | None
               ) -> tuple[dict[str, tuple[str | None, tuple[int, ...]]], dict[TopicPartition, int]]:
    """`describe_topics`, and the leader of each of those partitions that has one."""
    found, leaders = {}, {}
    for topic in admin.describe_topics(sorted(topics) if topics is not None else None):
        if topic["error_code"] == 0 and not (topics is None and topic.get("is_internal")):
            partitions = tuple(sorted(p["partition_index"] for p in topic["partitions"]))
            found[topic["name"]] = (topic.get("topic_id"), partitions)
            leaders.update({TopicPartition(topic["name"], p["partition_index"]): p["leader_id"]
                            for p in topic["partitions"] if p.get("leader_id", -1) >= 0})
    return found, leaders


def group_offsets(admin: KafkaAdminClient, group: str) -> dict[TopicPartitionKey, int]:
    """Committed offsets of a consumer group (partitions it never committed are absent)."""
    offsets = admin.list_group_offsets(group).get(group, {})
    return {
        (tp.topic, tp.partition): meta.offset
        for tp, meta in offsets.items()
        if meta is not None and meta.offset is not None and meta.offset >= 0
    }


def _tps(partitions: Iterable[TopicPartitionKey]) -> list[TopicPartition]:
    return [TopicPartition(t, p) for t, p in sorted(partitions)]


# Not marked retriable by kafka-python, but transient: a partition's leader that the client's
# metadata does not list yet (a broker restarting and re-registering, seen in a rolling restart).
_TRANSIENT = (UnknownBrokerIdError,)


class BrokerUnavailableError(RuntimeError):
    """Planning could not reach the brokers within its deadline."""


class KafkaMetadata:
    """The planner's view of the brokers, through one admin client: every request is bounded
    by the client's request timeout and routed with fresh metadata (new topics included).
    Retriable errors (broker down, leader moving, a topic being recreated) are retried until
    `retry_timeout_s` has passed since the first failure, then raise `BrokerUnavailableError`."""

    def __init__(self, client_config: Mapping[str, Any], subscription: Subscription,
                 retry_timeout_s: float = DEFAULT_DEADLINE_S) -> None:
        self._subscription = subscription
        self._retry_timeout_s = retry_timeout_s
        self._client_config = dict(client_config)
        self._admin = self._new_admin()
        self._isolation_level = isolation_level(client_config)
        self.topic_ids: dict[str, str | None] = {}
        # The partitions' leaders as the last `partitions` call found them: offsets are asked of them
        # straight away, without the metadata round trip of kafka-python's own call (forgotten on an error).
        self._leaders: dict[TopicPartition, int] = {}

    def _new_admin(self) -> KafkaAdminClient:
        return KafkaAdminClient(**for_admin(self._client_config), client_id="synclib-planner")

    def _retrying(self, what: str, call: Callable[[], T]) -> T:
        deadline = time.monotonic() + self._retry_timeout_s
        backoff_s = 0.1
        renew = False
        while True:
            try:
                if renew:  # a new client: fresh metadata now, not at the next periodic refresh
                    self._admin.close()
                    self._admin = self._new_admin()
                    renew = False
                return call()
            except KafkaError as exc:
                if not (getattr(exc, "retriable", False) or isinstance(exc, _TRANSIENT)):
                    raise
                renew = renew or isinstance(exc, _TRANSIENT)
                if time.monotonic() + backoff_s > deadline:
                    raise BrokerUnavailableError(
                        f"{what}: no answer from the brokers for {self._retry_timeout_s:.0f}s; "
                        f"last error: {type(exc).__name__}: {exc}") from exc
                logger.warning("%s: %s; retrying", what, exc)
                time.sleep(backoff_s)
                backoff_s = min(backoff_s * 2, 2.0)

    def partitions(self) -> list[TopicPartitionKey]:
        """Current partitions of the subscription (one metadata round trip); also refreshes
        `topic_ids`, which change when a topic is deleted and recreated."""
        described, self._leaders = self._retrying(
            "listing topics", lambda: _described(self._admin, self._subscription.named_topics))
        found: list[TopicPartitionKey] = []
        for topic, (topic_id, partitions) in sorted(described.items()):
            if not self._subscription.matches(topic):
                continue
            self.topic_ids[topic] = topic_id
            found.extend((topic, p) for p in partitions if self._subscription.accepts(topic, p))
        return found

    def high_watermarks(self, partitions: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        """Where reading ends: the high watermark, or under read_committed the last stable offset
        (no reader gets past an open transaction)."""
        return self._list_offsets(partitions, OffsetSpec.LATEST)

    def log_end_offsets(self, partitions: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        """The high watermarks whatever the isolation level: under read_committed a position
        above the last stable offset is not lost data while the log reaches past it."""
        return self._list_offsets(partitions, OffsetSpec.LATEST, ISOLATION_LEVELS[0])

    @property
    def reads_committed(self) -> bool:
        return self._isolation_level != ISOLATION_LEVELS[0]

    def earliest_offsets(self, partitions: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        return self._list_offsets(partitions, OffsetSpec.EARLIEST)

    def _list_offsets(self, partitions: Iterable[TopicPartitionKey], spec: OffsetSpec,
                      level: str | None = None) -> dict[TopicPartitionKey, int]:
        tps = _tps(partitions)
        if not tps:
            return {}
        level = level or self._isolation_level
        specs = {tp: spec for tp in tps}
        found = self._from_leaders(specs, level) if all(tp in self._leaders for tp in tps) else None
        if found is None:
            found = self._retrying(f"listing {spec.name.lower()} offsets",
                                   lambda: self._admin.list_partition_offsets(specs, isolation_level=level))
        return {(tp.topic, tp.partition): result.offset for tp, result in found.items()}

    def _from_leaders(self, specs: Mapping[TopicPartition, OffsetSpec], level: str) -> dict[TopicPartition, Any] | None:
        """The offsets asked of the leaders the last `partitions` call found; None when that cannot
        answer (a leader moved or is down, or no such kafka-python internals): the caller asks through
        kafka-python's own call, with fresh metadata and retries, and the leaders are forgotten."""
        try:
            return kafka_python.list_offsets_from(self._admin, self._leaders, specs, level)
        except KafkaError as exc:
            logger.debug("offsets from the known leaders: %s: %s; asking with fresh metadata", type(exc).__name__, exc)
            self._leaders = {}
            return None

    def group_offsets(self, group: str) -> dict[TopicPartitionKey, int]:
        return self._retrying(f"fetching offsets of group {group!r}", lambda: group_offsets(self._admin, group))

    def close(self) -> None:
        self._admin.close()
