"""Poison events for the dead-letter tests: a topic of two partitions with events the transform
`harness.poison.parse_events` cannot handle at known offsets, one of each kind."""

from __future__ import annotations

import json
from typing import Any

from harness.poison import BOOM, NOT_JSON, TOO_LARGE
from tests.support import produce

# (partition, offset) -> (value, the dead letter's error_class)
POISON: dict[tuple[int, int], tuple[bytes, str]] = {
    (0, 3): (NOT_JSON, "REJECTED_BY_TRANSFORM"),
    (0, 11): (TOO_LARGE, "CAST_OVERFLOW"),
    (1, 5): (BOOM, "USER_RAISED_EXCEPTION"),
    (1, 14): (NOT_JSON, "REJECTED_BY_TRANSFORM"),
    (1, 21): (TOO_LARGE, "CAST_OVERFLOW"),
}
EVENTS_PER_PARTITION = 24


def value(partition: int, offset: int) -> bytes:
    poison = POISON.get((partition, offset))
    return poison[0] if poison else json.dumps({"n": offset, "name": f"p{partition}-{offset}"}).encode()


def produce_poisoned(producer: Any, topic: str, start: int = 0, end: int = EVENTS_PER_PARTITION) -> None:
    """Offsets [start, end) of both partitions (the topic must start empty)."""
    for partition in (0, 1):
        produce(producer, topic, partition,
                [(f"k{partition}-{offset}".encode(), value(partition, offset)) for offset in range(start, end)])


def good_rows(end: int = EVENTS_PER_PARTITION) -> list[tuple[int, int]]:
    return [(p, o) for p in (0, 1) for o in range(end) if (p, o) not in POISON]


def poison_rows(end: int = EVENTS_PER_PARTITION) -> list[tuple[int, int, str]]:
    return sorted((p, o, cls) for (p, o), (_, cls) in POISON.items() if o < end)


