"""After each committed micro-batch: tell Kafka how far this forwarder has got.

- `commitToConsumerGroup`: commit the written offsets to the follower's `consumerGroup`,
  so standard consumer-group lag tooling shows the forwarder.
- `publishCommitLog`: publish the same offsets to a commit-log topic in the current
  format (group = `consumerGroup`), so another synclib can follow this one.

Both happen only after the sink's commit (Spark calls the source's `commit(end)` after
the batch is durable), never before; only partitions whose offset moved are sent.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from kafka.errors import KafkaError, NoError
from kafka.structs import OffsetAndMetadata

from synclib.kafka.client_config import for_admin, for_producer
from synclib.leader.commitlog import Commit, encode_commit
from synclib.offsets import PartitionOffsets

logger = logging.getLogger(__name__)

SEND_TIMEOUT_S = 30.0


class ProgressPublisher:
    """Publishes under `group` (the follower's consumerGroup) to the group's offsets when
    `commit_to_group`, and to `commit_log_topic` when given; `client_config` is kafka-python's."""

    def __init__(self, client_config: Mapping[str, Any], group: str, *, commit_to_group: bool,
                 commit_log_topic: str | None) -> None:
        self._group = group
        self._topic = commit_log_topic
        self._admin: KafkaAdminClient | None = None
        self._producer: KafkaProducer | None = None
        if commit_to_group:
            self._admin = KafkaAdminClient(**for_admin(client_config), client_id="synclib-progress")
        if self._topic:
            self._producer = KafkaProducer(**for_producer(client_config),
                                           client_id="synclib-commit-log-publisher", linger_ms=0)
        self._published: PartitionOffsets = {}  # sent to the commit-log topic
        self._committed: PartitionOffsets = {}  # committed to the group

    def publish(self, end: PartitionOffsets) -> None:
        if self._admin is not None:
            uncommitted = {tp: offset for tp, offset in end.items() if self._committed.get(tp) != offset}
            if uncommitted and self._commit_to_group(uncommitted):
                self._committed.update(uncommitted)
        moved = {tp: offset for tp, offset in end.items() if self._published.get(tp) != offset}
        if self._producer is not None and moved:
            now = time.time()
            futures = []
            for (topic, partition), offset in sorted(moved.items()):
                key, value = encode_commit(Commit(self._group, topic, partition, offset, orig_message_ts=now))
                futures.append(self._producer.send(self._topic or "", key=key, value=value))
            for future in futures:
                future.get(SEND_TIMEOUT_S)
            logger.debug("published progress of %d partitions for group %r", len(moved), self._group)
        self._published.update(moved)

    def _commit_to_group(self, moved: PartitionOffsets) -> bool:
        """Best effort, as the commit is only a report: a retriable error (the group's
        coordinator still loading, as on a fresh Kafka cluster, or moving) is logged and
        returns False, so that the next batch commits these offsets again."""
        assert self._admin is not None
        try:
            results = self._admin.alter_group_offsets(self._group, {
                TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in moved.items()})
        except KafkaError as exc:
            if not getattr(exc, "retriable", False):
                raise
            logger.warning("could not commit offsets to group %r now (%s); the next batch retries",
                           self._group, exc)
            return False
        failed = {f"{tp.topic}[{tp.partition}]": error.__name__
                  for tp, error in results.items() if error is not NoError}
        if failed:
            logger.warning("could not commit offsets to group %r (has it active members?): %s",
                           self._group, failed)
        return True

    def close(self) -> None:
        for client in (self._admin, self._producer):
            if client is not None:
                client.close()
