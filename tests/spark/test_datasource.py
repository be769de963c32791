"""The source's stream reader (`synclib.source.datasource`) planning on a broker, called as Spark's
runner calls it, without a query: the query-level behaviour is in tests/spark/test_source.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Producer
from pyspark.sql import SparkSession
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit

from synclib.offsets import PartitionOffsets
from synclib.source.datasource import BURST_REPLANS, SynchronizedKafkaDataSource
from tests.support import produce_values, publish_commit, wait_until

TIMEOUT_S = 60.0


def test_a_leader_commit_applied_while_its_batch_was_planned_joins_that_batch(
        spark: SparkSession, producer: Producer, bootstrap_servers: str, new_topic: Callable[..., str],
        tmp_path: Path) -> None:
    """A leader commit is a commit-log message per partition, and the follower applies them poll by
    poll as they arrive: the part applied while the trigger was planning is planned again into the
    same batch, not left to a batch `minBatchInterval` later. Here partition 1's message lands
    while partition 0's plan is made."""
    events, log = new_topic("burst-events", 2), new_topic("burst-log")
    for partition in (0, 1):
        produce_values(producer, events, partition, 5)
    source = SynchronizedKafkaDataSource({
        "kafka.bootstrap.servers": bootstrap_servers, "subscribe": events, "commitLogTopic": log,
        "synchronizeCommitGroups": "snuba", "awaitLeaderCommits": "true",
        "statusFile": str(tmp_path / "status.json")})
    reader = source.streamReader(source.schema())
    try:
        start = reader.initialOffset()
        remote = reader.planner.remote
        publish_commit(producer, log, "snuba", events, 0, 5)
        wait_until(lambda: remote.stats().applied == 1, TIMEOUT_S, "the follower to apply partition 0's commit")
        plan, plans = reader._plan, []

        def plan_while_the_rest_lands(offsets: PartitionOffsets, limit: ReadLimit | None) -> tuple[
                PartitionOffsets, PartitionOffsets]:
            planned = plan(offsets, limit)
            if not plans:
                seen = remote.release_generation()
                publish_commit(producer, log, "snuba", events, 1, 5)
                assert remote.wait_for_release(seen, TIMEOUT_S) > seen
            plans.append(planned[1])
            return planned

        reader._plan = plan_while_the_rest_lands  # type: ignore[method-assign]
        end = reader.latestOffset(start, ReadAllAvailable())

        assert plans[0] == {(events, 0): 5, (events, 1): 0}  # what the wake-up alone released
        assert end == {events: {"0": 5, "1": 5}}
        assert 2 <= len(plans) <= 1 + BURST_REPLANS
    finally:
        reader.stop()
