"""The source's planner (`synclib.source.planner.Planner`) on a broker, no Spark: each partition is
released up to `min(high watermark, leader's commit)`, a partition the leader has not committed
stays where it is, a new partition starts at its earliest offset, and the status names each
partition's state. The arithmetic alone: tests/unit/test_planning.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from confluent_kafka import Producer

from synclib.settings.source import SourceOptions
from synclib.source.planner import Planner
from tests.support import produce, publish_commit


def test_releases_each_partition_up_to_the_leaders_commit_and_reports_its_state(
        producer: Producer, bootstrap_servers: str, new_topic: Callable[..., str]) -> None:
    events, log = new_topic("planner-events", 5), new_topic("planner-log")
    for partition in range(5):
        produce(producer, events, partition, [(None, b"x%d" % i) for i in range(10)])
    for partition, committed in ((0, 4), (1, 25), (3, 5), (4, 5)):  # 1: its own producer was faster
        publish_commit(producer, log, "leader", events, partition, committed)
    options: dict[str, Any] = {"kafka.bootstrap.servers": bootstrap_servers, "subscribe": events,
                               "commitLogTopic": log, "synchronizeCommitGroups": "leader"}
    planner = Planner(SourceOptions.from_spark(options))
    try:
        start, end = planner.releasable({(events, 0): 0, (events, 1): 2, (events, 3): 6, (events, 4): 5})

        assert start[(events, 2)] == 0  # a partition the query had not seen starts at its earliest offset
        assert [end[(events, p)] for p in range(5)] == [4, 10, 0, 6, 5]  # min(data, leader), never back
        states = {p.partition: (p.state.value, p.follower_offset, p.leader_offset, p.high_watermark)
                  for p in planner.status().partitions}
        assert states == {0: ("LOCAL_BEHIND", 0, 4, 10), 1: ("LOCAL_BEHIND", 2, 25, 10), 2: ("UNKNOWN", 0, None, 10),
                          3: ("REMOTE_BEHIND", 6, 5, 10), 4: ("SYNCHRONIZED", 5, 5, 10)}
    finally:
        planner.close()
