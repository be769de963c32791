"""Follow leader groups that publish no commit log: poll their committed offsets in Kafka.

Same gating semantics as the commit-log follower (minimum over the groups, last write
wins, unknown until every group has committed a partition); the leader's progress is
only seen every `poll_interval_s`, which bounds how soon a commit releases events, and a commit's
time is when a poll saw it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from kafka import KafkaAdminClient
from kafka.errors import KafkaError

from synclib.kafka.admin import group_offsets
from synclib.kafka.client_config import DEFAULT_DEADLINE_S, for_admin
from synclib.leader.commitlog import Commit
from synclib.leader.tracker import RemoteOffsetsTracker

logger = logging.getLogger(__name__)


class GroupOffsetsPoller(RemoteOffsetsTracker):
    """Polls `groups`' committed offsets (one OffsetFetch per group per interval)."""

    def __init__(
        self,
        groups: Sequence[str],
        client_config: Mapping[str, Any],
        *,
        poll_interval_s: float = 1.0,
        unreachable_timeout_s: float | None = DEFAULT_DEADLINE_S,
    ) -> None:
        super().__init__(f"group offsets poller for groups {list(groups)}", groups, unreachable_timeout_s)
        self._client_config = dict(client_config)
        self._poll_interval_s = poll_interval_s

    def _work(self) -> None:
        admin = KafkaAdminClient(**for_admin(self._client_config),
                                 client_id="synclib-group-offsets-poller")
        try:
            while not self._stopping.is_set():
                try:
                    self._poll(admin)
                except KafkaError as exc:
                    self._note_error(exc)
                    logger.warning("%s: %s; retrying", self.description, exc)
                else:
                    self._beat()
                    self._mark_caught_up()
                    self._announce_releases()
                self._stopping.wait(self._poll_interval_s)
        finally:
            admin.close()

    def _poll(self, admin: KafkaAdminClient) -> None:
        for group in self.groups:
            for (topic, partition), offset in group_offsets(admin, group).items():
                if self._latest_offset(group, (topic, partition)) != offset:
                    self._record(Commit(group, topic, partition, offset))
