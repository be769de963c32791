"""The transform of the dead-letter benchmark and tests, `parse_events`, and the values it cannot
handle, one of each kind:

- a value that is not JSON: the transform marks it in its error column (`REJECTED_BY_TRANSFORM`);
- a number too large for the `int` column: Spark raises CAST_OVERFLOW (ANSI casts);
- a field the transform raises on (`name` "boom"): USER_RAISED_EXCEPTION.
"""

from __future__ import annotations

from typing import Any

ERROR_COLUMN = "dead_letter_reason"
NOT_JSON, TOO_LARGE, BOOM = b"<not json>", b'{"n": 10000000000, "name": "big"}', b'{"n": 3, "name": "boom"}'


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
