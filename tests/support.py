"""Helpers shared by the tests: bounded waits, producing, committing as the leader."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from confluent_kafka import Producer

from harness.job_world import wait_for
from synclib.kafka.admin import KafkaMetadata
from synclib.kafka.subscription import Subscription
from synclib.leader.commitlog import Commit, encode_commit
from synclib.schema import output_schema
from tests import librdkafka

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

T = TypeVar("T")

Record = tuple[bytes | None, bytes | None]


def wait_until(
    condition: Callable[[], T], timeout_s: float = 30.0, what: str = "condition", interval_s: float = 0.05
) -> T:
    """Poll `condition` until it returns something truthy; fail with `what` at the deadline
    (`harness.job_world.wait_for` without a job)."""
    return wait_for(condition, timeout_s, what, interval_s=interval_s)


def produce(
    producer: Producer,
    topic: str,
    partition: int,
    records: Iterable[Record],
    headers: Sequence[tuple[str, bytes]] = (),
) -> None:
    """Send records to one partition with librdkafka and wait for every delivery (the last one
    goes alone in its own batch, so that even the embedded broker reports the exact high watermark)."""
    librdkafka.produce_burst(producer, topic, partition,
                             [librdkafka.Record(key, value, list(headers)) for key, value in records])


def produce_values(producer: Producer, topic: str, partition: int, count: int, prefix: str = "v") -> None:
    """Produce `count` records with keys/values that name their partition and sequence."""
    produce(
        producer, topic, partition,
        [(f"{partition}-{i}".encode(), f"{prefix}-{partition}-{i}".encode()) for i in range(count)],
    )


def publish_commit(
    producer: Producer, commit_log_topic: str, group: str, topic: str, partition: int, offset: int
) -> None:
    """Publish one leader commit in the current format and wait until the broker has it."""
    key, value = encode_commit(Commit(group, topic, partition, offset, orig_message_ts=time.time()))
    publish_raw(producer, commit_log_topic, key, value)


def publish_raw(producer: Producer, topic: str, key: bytes | None, value: bytes | None,
                headers: Sequence[tuple[str, bytes]] = ()) -> None:
    produce(producer, topic, 0, [(key, value)], headers)


def high_watermarks(bootstrap_servers: str, topic: str, partitions: Iterable[int],
                    isolation_level: str = "read_uncommitted") -> dict[int, int]:
    """Each partition's end (next offset), as the planner reads it (read_committed: the last stable offset)."""
    metadata = KafkaMetadata({"bootstrap_servers": [bootstrap_servers], "isolation_level": isolation_level},
                             Subscription(topics=(topic,)))
    try:
        return {p: end for (_, p), end in metadata.high_watermarks([(topic, p) for p in partitions]).items()}
    finally:
        metadata.close()


def waiting_for_lock(path: Path) -> bool:
    """Whether a process or thread is blocked in `flock` on the file at `path` (a `->` entry of
    Linux's /proc/locks on its device and inode): the waiter has reached the lock, not merely started."""
    stat = path.stat()
    file = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    return any(fields[1:3] == ["->", "FLOCK"] and fields[6] == file
               for fields in (line.split() for line in Path("/proc/locks").read_text().splitlines())
               if len(fields) > 6)


def create_table(spark: SparkSession, location: str, clause: str = "", include_headers: bool = False,
                 schema: StructType | None = None) -> None:
    """An empty Delta table at `location` with the source's columns (`headers` too if
    `include_headers`) or `schema`'s, created by Spark's Delta writer with `clause`
    (`TBLPROPERTIES (...)`, `PARTITIONED BY ...`), as a Spark or Databricks user creates the table
    a job is pointed at."""
    from synclib.compat import pyspark as spark_compat

    fields = (schema or spark_compat.from_arrow_schema(output_schema(include_headers))).fields
    columns = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in fields)
    spark.sql(f"CREATE TABLE delta.`{location}` ({columns}) USING delta {clause}")
