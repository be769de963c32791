"""Poison events for the dead-letter tests: a topic of two partitions with events the transform
`parse_events` cannot handle at known offsets, one of each kind:

- a value that is not JSON: the transform marks it in its error column (`REJECTED_BY_TRANSFORM`);
- a number too large for the `int` column: Spark raises CAST_OVERFLOW (ANSI casts);
- a field the transform raises on (`name` "boom"): USER_RAISED_EXCEPTION.
"""

from __future__ import annotations

import json
from typing import Any

from tests.support import produce

ERROR_COLUMN = "dead_letter_reason"
NOT_JSON, TOO_LARGE, BOOM = b"<not json>", b'{"n": 10000000000, "name": "big"}', b'{"n": 3, "name": "boom"}'
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


def parse_events(df: Any) -> Any:
    """The transform: `n int` and `name` from the JSON value; rows whose value is not JSON
    are marked in `dead_letter_reason`; raises on a number beyond int and on the name "boom"."""
    from pyspark.sql import functions as F

    text = F.col("value").cast("string")
    event = F.from_json(text, "n long, name string")
    return (df.withColumn("event", event)
            .withColumn("n", F.col("event.n").cast("int"))
            .withColumn("name", F.when(F.col("event.name") == "boom", F.raise_error(F.lit("boom is not a name")))
                        .otherwise(F.col("event.name")))
            .withColumn(ERROR_COLUMN, F.when(F.try_parse_json(text).isNull(), F.lit("value is not JSON")))
            .drop("event"))


def parse_events_fixed(df: Any) -> Any:
    """`parse_events` after a fix: numbers beyond int become null, "boom" is a name; values
    that are not JSON are still rejected."""
    from pyspark.sql import functions as F

    text = F.col("value").cast("string")
    event = F.from_json(text, "n long, name string")
    return (df.withColumn("event", event)
            .withColumn("n", F.col("event.n").try_cast("int"))
            .withColumn("name", F.col("event.name"))
            .withColumn(ERROR_COLUMN, F.when(F.try_parse_json(text).isNull(), F.lit("value is not JSON")))
            .drop("event"))
