"""The transform as the main table sees it, and the rows of a batch it raises on or rejects:
what the dead-letter sink (`synclib.dead_letters.sink`) and a replay (`synclib.dead_letters.replay`)
share."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from functools import reduce

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from synclib.dead_letters.isolation import Error, Failure, Key, TooManyFailures, describe, error_of, isolate
from synclib.delta.stream import utc_date
from synclib.delta.table import DATE_COLUMN
from synclib.errors import first_line
from synclib.offsets import OffsetRange

logger = logging.getLogger(__name__)

REJECTED = "REJECTED_BY_TRANSFORM"  # error_class of a row the transform marked in its error column

Transform = Callable[[DataFrame], DataFrame]


class DeadLetterLimitExceeded(RuntimeError):
    """Too much of one batch failed the transform (`max_fraction` or `max_rows`)."""


class TransformedRows:
    """Source rows through `transform`: what the main table gets of them, which rows the
    transform raises on (poison) and which it marks in `error_column` (rejected)."""

    def __init__(self, transform: Transform | None, error_column: str | None, partition_by_date: bool = False) -> None:
        self.transform = transform
        self.error_column = error_column
        self.partition_by_date = partition_by_date

    def transformed(self, raw: DataFrame) -> DataFrame:
        return raw if self.transform is None else self.transform(raw)

    def streamed(self, raw: DataFrame) -> DataFrame:
        """What `foreachBatch` receives: transformed, the date column added, the error column kept."""
        df = self.transformed(raw)
        return df.withColumn(DATE_COLUMN, utc_date(F.col("timestamp"))) if self.partition_by_date else df

    def kept(self, streamed: DataFrame) -> DataFrame:
        """What goes to the main table of what `streamed` gives: the rows the transform did not reject."""
        if self.error_column is None:
            return streamed
        return streamed.where(F.col(self.error_column).isNull()).drop(self.error_column)

    def prepared(self, raw: DataFrame) -> DataFrame:
        """What goes to the main table of the source rows `raw`."""
        return self.kept(self.streamed(raw))

    def isolate_poison(self, raw: DataFrame, failure: Exception | None,
                       max_rows: int) -> tuple[int, list[Key], list[Failure]]:
        """(rows, sorted keys, poison rows) of the batch; `failure` (what writing it raised) is
        raised again when the transform succeeds on every row, or the rows cannot be read; more
        than `max_rows` poison rows raise `DeadLetterLimitExceeded`."""
        raw.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            keys = sorted((r[0], int(r[1]), int(r[2]))
                          for r in raw.select("topic", "partition", "offset").collect())
        except Exception:
            if failure is not None:
                raise failure from None
            raise
        everything = self._evaluate(raw, None)
        if everything is None:
            if failure is not None:
                raise failure
            return len(keys), keys, []
        logger.warning("the transform fails on the batch (%s: %s); isolating the rows it fails on",
                       everything[0], first_line(everything[1]))
        try:
            poison = isolate(keys, lambda ranges: self._evaluate(raw, ranges), max_rows, everything)
        except TooManyFailures as exc:
            raise DeadLetterLimitExceeded(
                f"more than sink.dead_letters.max_rows ({exc.limit}) rows of the batch covering "
                f"{describe(keys)} fail the transform, e.g. at {where_of(exc.found[0])}: "
                f"{exc.found[0].error_class}: {first_line(exc.found[0].message)}") from None
        return len(keys), keys, poison

    def _evaluate(self, raw: DataFrame, ranges: Sequence[OffsetRange] | None) -> Error | None:
        """Run the main table's side of the transform on `ranges` of the batch (all of it when
        None) without writing anything; what it raised, if it did."""
        rows = raw if ranges is None else raw.where(_ranges_filter(ranges))
        try:
            self.prepared(rows).write.format("noop").mode("overwrite").save()
        except Exception as exc:  # noqa: BLE001 - what the transform raises is data here
            return error_of(exc)
        return None

    def rejected_rows(self, raw: DataFrame, poison: Sequence[Failure]) -> DataFrame:
        """Keys and error of the rows the transform marked in its error column."""
        assert self.error_column is not None
        rows = raw.where(~rows_in(poison)) if poison else raw
        return (self.transformed(rows).where(F.col(self.error_column).isNotNull())
                .select("topic", "partition", "offset", F.lit(REJECTED).alias("error_class"),
                        F.col(self.error_column).cast("string").alias("error_message")))


def rows_in(failures: Sequence[Failure]) -> Column:
    """The rows of `failures`, as a filter."""
    return reduce(lambda a, b: a | b, [
        (F.col("topic") == f.topic) & (F.col("partition") == f.partition) & (F.col("offset") == f.offset)
        for f in failures])


def _ranges_filter(ranges: Sequence[OffsetRange]) -> Column:
    return reduce(lambda a, b: a | b, [
        (F.col("topic") == r.topic) & (F.col("partition") == r.partition)
        & (F.col("offset") >= r.start) & (F.col("offset") < r.end) for r in ranges])


def where_of(failure: Failure) -> str:
    return f"{failure.topic}[{failure.partition}] offset {failure.offset}"
