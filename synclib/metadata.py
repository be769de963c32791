"""Driver-side broker queries for planning: partitions, watermarks, group offsets.

Each query is one batched request over all partitions, not one per partition.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Optional

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

from synclib import kafkaconf
from synclib.options import Subscription

TopicPartitionKey = tuple[str, int]


def _keys(offsets: Mapping[TopicPartition, Any]) -> dict[TopicPartitionKey, Any]:
    return {(tp.topic, tp.partition): value for tp, value in offsets.items()}


def _tps(partitions: Iterable[TopicPartitionKey]) -> list[TopicPartition]:
    return [TopicPartition(t, p) for t, p in sorted(partitions)]


class KafkaMetadata:
    """A group-less consumer (and an admin client, for group offsets) used by the planner."""

    def __init__(self, client_config: Mapping[str, Any], subscription: Subscription) -> None:
        self._client_config = dict(client_config)
        self._subscription = subscription
        self._consumer = KafkaConsumer(
            **kafkaconf.for_consumer(client_config),
            group_id=None,
            enable_auto_commit=False,
            allow_auto_create_topics=False,
            client_id="synclib-planner",
        )
        self._admin: Optional[KafkaAdminClient] = None

    def partitions(self) -> list[TopicPartitionKey]:
        """Current partitions of the subscription (one metadata round trip)."""
        if self._subscription.assignment:
            return list(self._subscription.assignment)
        topics = self._consumer.topics()
        found = []
        for topic in sorted(t for t in topics if self._subscription.matches(t)):
            for partition in sorted(self._consumer.partitions_for_topic(topic) or ()):
                found.append((topic, partition))
        return found

    def high_watermarks(self, partitions: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        tps = _tps(partitions)
        return _keys(self._consumer.end_offsets(tps)) if tps else {}

    def earliest_offsets(self, partitions: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        tps = _tps(partitions)
        return _keys(self._consumer.beginning_offsets(tps)) if tps else {}

    def group_offsets(self, group: str) -> dict[TopicPartitionKey, int]:
        """Committed offsets of a consumer group (partitions it never committed are absent)."""
        if self._admin is None:
            self._admin = KafkaAdminClient(
                **kafkaconf.for_admin(self._client_config), client_id="synclib-planner-admin"
            )
        offsets = self._admin.list_group_offsets(group).get(group, {})
        return {
            (tp.topic, tp.partition): meta.offset
            for tp, meta in offsets.items()
            if meta is not None and meta.offset is not None and meta.offset >= 0
        }

    def close(self) -> None:
        self._consumer.close()
        if self._admin is not None:
            self._admin.close()
