"""The one partition key and offsets type, and Spark's offsets JSON (no I/O, no dependencies).

A partition is `(topic, partition)`; an offset is always the *next* offset to read (an
exclusive bound), as in Spark's Kafka source and Kafka's committed offsets.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TopicPartitionKey = tuple[str, int]
PartitionOffsets = dict[TopicPartitionKey, int]
# Spark's offsets JSON, decoded: {"topic": {"partition": offset}}; Spark hands it over untyped.
OffsetsJson = dict[str, Any]

# Spark's special offsets inside startingOffsets JSON.
EARLIEST = -2
LATEST = -1


def parse_offsets_json(offsets: Mapping[str, Mapping[str, Any]]) -> PartitionOffsets:
    """Spark's offsets JSON (already decoded) -> {(topic, partition): offset}."""
    result: PartitionOffsets = {}
    for topic, per_partition in offsets.items():
        for partition, offset in per_partition.items():
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                raise ValueError(f"offset {offset!r} of {topic}[{partition}] is not an offset")
            result[(str(topic), int(partition))] = offset
    return result


def to_offsets_json(offsets: PartitionOffsets) -> dict[str, dict[str, int]]:
    """{(topic, partition): offset} -> Spark's offsets JSON (sorted, for stable checkpoints)."""
    result: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        result.setdefault(topic, {})[str(partition)] = offset
    return result
