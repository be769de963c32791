"""Background thread that follows the leader's commit-log topic.

Reads every partition of the commit-log topic from the earliest offset (no consumer
group) and records each decoded commit in the `RemoteOffsetsTracker` store. A malformed
message is logged, counted and skipped. A deleted commit-log topic kills the follower, also
when the broker recreates it at once (Tansu does on the follower's next fetch, whatever
`allow_auto_create_topics` says): the topic id changed. A broker that does not answer (or a
client call that hangs) past the deadline makes `check()` fail.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

from synclib.kafka.admin import describe_topics
from synclib.kafka.client_config import DEFAULT_DEADLINE_S, for_admin, for_consumer
from synclib.leader.commitlog import Commit, CommitLogDecodeError, decode_commit
from synclib.leader.tracker import RemoteOffsetsError, RemoteOffsetsTracker

logger = logging.getLogger(__name__)

CommitListener = Callable[[Commit], None]
# A leader commit of a wide topic is a message per partition and group (3,072 for 1,024 partitions and
# three groups): taken in one poll, it wakes the planner once, not once per 500 (kafka-python's default).
COMMITS_PER_POLL = 10_000


class CommitLogFollower(RemoteOffsetsTracker):
    """Follows `topic` for `groups`; start() spawns a daemon thread, stop() joins it.

    `client_config` holds kafka-python kwargs (from `kafka_client_config`).
    `listener`, if given, is called on the follower thread for each applied commit.
    `unreachable_timeout_s`: `check()` fails when the broker has not answered a metadata
    refresh (every `partition_refresh_s`), or a client call has hung, for this long.
    """

    def __init__(
        self,
        topic: str,
        groups: Sequence[str],
        client_config: Mapping[str, Any],
        *,
        listener: CommitListener | None = None,
        unreachable_timeout_s: float | None = DEFAULT_DEADLINE_S,
        partition_refresh_s: float = 5.0,
        poll_timeout_ms: int = 100,
    ) -> None:
        super().__init__(f"commit-log follower for topic {topic!r}", groups, unreachable_timeout_s)
        self.topic = topic
        self._client_config = dict(client_config)
        self._listener = listener
        # A refresh is what proves the broker answers: do it well within the deadline.
        self._partition_refresh_s = min(partition_refresh_s, (unreachable_timeout_s or 15.0) / 3)
        self._poll_timeout_ms = poll_timeout_ms
        self._topic_id: str | None = None  # as first described; another one means deleted and recreated

    def _work(self) -> None:
        client_id = f"synclib-commit-log-follower-{self.topic}"
        admin = KafkaAdminClient(**for_admin(self._client_config), client_id=client_id)
        try:
            consumer = KafkaConsumer(
                **for_consumer(self._client_config),
                group_id=None,
                enable_auto_commit=False,
                client_id=client_id,
                allow_auto_create_topics=False,
                max_poll_records=COMMITS_PER_POLL,
            )
            try:
                self._follow(consumer, admin)
            finally:
                consumer.close()
        finally:
            admin.close()

    def _follow(self, consumer: KafkaConsumer, admin: KafkaAdminClient) -> None:
        assigned: set[TopicPartition] = set()
        targets: dict[TopicPartition, int] | None = None
        last_refresh = float("-inf")
        while not self._stopping.is_set():
            if time.monotonic() - last_refresh >= self._partition_refresh_s:
                last_refresh = time.monotonic()
                try:
                    ends = self._refresh_partitions(consumer, admin, assigned)
                except KafkaError as exc:
                    self._note_error(exc)
                    logger.warning("%s: %s; retrying", self.description, exc)
                    self._stopping.wait(0.5)
                    continue
                self._beat()
                if targets is None:
                    targets = ends
            if (targets is not None and not self._caught_up
                    and all(consumer.position(tp) >= end for tp, end in targets.items())):
                self._mark_caught_up()
            if not assigned:
                self._stopping.wait(min(0.2, self._partition_refresh_s))
                continue
            for batch in consumer.poll(timeout_ms=self._poll_timeout_ms).values():
                for record in batch:
                    self._apply(record)
            self._announce_releases()

    def _refresh_partitions(
        self, consumer: KafkaConsumer, admin: KafkaAdminClient, assigned: set[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """Assign new commit-log partitions from earliest; return the end offsets. Both are
        broker round trips, so a broker that does not answer raises here."""
        described = describe_topics(admin, [self.topic])
        if self.topic not in described:
            if assigned:
                raise RemoteOffsetsError(f"commit-log topic {self.topic!r} was deleted")
            return {}
        topic_id, partitions = described[self.topic]
        if topic_id is not None and self._topic_id not in (None, topic_id):
            raise RemoteOffsetsError(f"commit-log topic {self.topic!r} was deleted (and recreated: its topic id "
                                     f"{self._topic_id} is now {topic_id})")
        self._topic_id = self._topic_id or topic_id
        new = {TopicPartition(self.topic, p) for p in partitions} - assigned
        if new:
            assigned |= new
            consumer.assign(sorted(assigned))
            consumer.seek_to_beginning(*new)
        timeout_ms = int(1000 * min(self._unreachable_timeout_s or 30.0, 30.0))
        return consumer.end_offsets(sorted(assigned), timeout_ms=timeout_ms) if assigned else {}

    def _apply(self, record: Any) -> None:
        try:
            commit = decode_commit(record.key, record.value, record.headers or (),
                                   committed_at=record.timestamp / 1000 if record.timestamp >= 0 else None)
        except CommitLogDecodeError as exc:
            logger.warning("skipping malformed commit-log message %s[%d]@%d: %s",
                           record.topic, record.partition, record.offset, exc)
            self._count_malformed()
            return
        if self._record(commit) and self._listener is not None:
            self._listener(commit)
