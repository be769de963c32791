"""The one partition key and offsets type, and Spark's offsets JSON (no I/O, no dependencies).

A partition is `(topic, partition)`; an offset is always the *next* offset to read (an
exclusive bound), as in Spark's Kafka source and Kafka's committed offsets.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

TopicPartitionKey = tuple[str, int]
PartitionOffsets = dict[TopicPartitionKey, int]
# Spark's offsets JSON, decoded: {"topic": {"partition": offset}}; Spark hands it over untyped.
OffsetsJson = dict[str, Any]

# Spark's special offsets inside startingOffsets JSON.
EARLIEST = -2
LATEST = -1

_PARTITION = re.compile(r"[0-9]+")


@dataclass(frozen=True, order=True)
class OffsetRange:
    """The offsets `[start, end)` of one partition: what a read task reads, what a failed batch
    or a batch's dead letters cover. Written `events[0] offsets [5, 9)` in every message."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}] offsets [{self.start}, {self.end})"


def parse_offsets_json(offsets: str | Mapping[str, Any]) -> PartitionOffsets:
    """Spark's offsets JSON, as text or decoded, e.g. `{"events": {"0": 23}}` ->
    {("events", 0): 23}; ValueError naming what is not a partition's offset."""
    decoded = json.loads(offsets) if isinstance(offsets, str) else offsets
    if not isinstance(decoded, Mapping):
        raise ValueError(f"offsets JSON maps topics to their partitions' offsets, not {decoded!r}")
    result: PartitionOffsets = {}
    for topic, per_partition in decoded.items():
        if not isinstance(per_partition, Mapping):
            raise ValueError(f"topic {topic!r} needs a mapping of partition to offset")
        for partition, offset in per_partition.items():
            if not (_PARTITION.fullmatch(str(partition)) and isinstance(offset, int)
                    and not isinstance(offset, bool) and offset >= EARLIEST):
                raise ValueError(f"{topic!r} partition {partition!r}: offset must be an integer >= {EARLIEST}")
            result[(str(topic), int(partition))] = offset
    return result


def to_offsets_json(offsets: PartitionOffsets) -> dict[str, dict[str, int]]:
    """{(topic, partition): offset} -> Spark's offsets JSON (sorted, for stable checkpoints)."""
    result: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        result.setdefault(topic, {})[str(partition)] = offset
    return result
