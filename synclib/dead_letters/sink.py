"""The dead-letter sink: the main table and the dead-letter table written from `foreachBatch`.

With `sink.dead_letters.enabled` the job writes through `foreachBatch` (both engines). The
transform runs in the streaming plan, as without dead letters, so `foreachBatch` receives each
micro-batch transformed, and a batch with nothing to divert costs one write:

1. The main table is written first, exactly as without dead letters: one Delta commit with
   the application transaction `(app_id, batch id)` and the batch's offsets. Rows whose
   error column (`sink.dead_letters.error_column`, a nullable string the transform may add)
   is not null are left out of it; Spark's `observe` counts them in the same pass.
2. Only when a batch has dead letters are its source rows read again (`SourceRows`: a batch
   read of the source by the offsets Spark logged for the batch). If the write failed, the
   transform is evaluated on them with Spark's `noop` writer (nothing written): all of them
   first (success means the failure was not the transform's, and it is raised as it was),
   then halves, down to single rows (`synclib.dead_letters.isolation`). The rows it raises on are
   poison; the others go to the main table in one commit.
3. The dead letters (rejected and poison rows: source columns, error class and message,
   batch id, app id, time) go to the dead-letter table in one commit carrying the same
   transaction `(app_id, batch id)` and offsets.

Exactly once: a batch replayed after a crash finds its transaction in the main table and
skips the write; if the dead-letter table lacks it, the batch's dead letters are derived
again (the transform must be deterministic) and written, once. Neither table can hold a
batch twice. `max_fraction` and `max_rows` stop the query with an error naming the batch's
offsets when too much of a batch fails.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import reduce

from pyspark import StorageLevel
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from synclib import spark_checkpoint
from synclib.dead_letters.isolation import (
    MESSAGE_CHARS,
    Failure,
    Key,
    describe,
)
from synclib.dead_letters.transformed import (
    DeadLetterLimitExceeded,
    Transform,
    TransformedRows,
    rows_in,
    where_of,
)
from synclib.delta.batch_writes import DeltaTarget
from synclib.delta.stream import BatchSink, DeltaStream, start_delta_stream
from synclib.errors import first_line
from synclib.locations import normalize_location

logger = logging.getLogger(__name__)

SOURCE_COLUMNS = ("topic", "partition", "offset", "timestamp", "timestampType", "key", "value", "headers")
HEADERS_TYPE = "array<struct<key:string,value:binary>>"
SCHEMA = StructType([
    StructField("topic", StringType()), StructField("partition", IntegerType()), StructField("offset", LongType()),
    StructField("timestamp", TimestampType()), StructField("timestampType", IntegerType()),
    StructField("key", BinaryType()), StructField("value", BinaryType()),
    StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                 StructField("value", BinaryType())]))),
    StructField("error_class", StringType()), StructField("error_message", StringType()),
    StructField("batch_id", LongType()), StructField("app_id", StringType()),
    StructField("dead_lettered_at", TimestampType())])
REMEMBERED_BATCHES = 1000  # per-batch counts kept for progress reports (Spark keeps the last 100)

SourceRows = Callable[[SparkSession, int], DataFrame]  # a micro-batch's source rows, read again by its offsets


# --- one micro-batch -----------------------------------------------------------------------

@dataclass(frozen=True)
class Limits:
    max_fraction: float = 1.0  # of a batch's rows; above it the query stops
    max_rows: int = 25  # per batch; above it the query stops (and isolation stops looking)


class DeadLetterBatches:
    """The `foreachBatch` function: main table, isolation, dead-letter table (module docstring).

    Runs in the driver's Python process, so its counters are the job's: `total` dead letters
    by topic in this run, `by_batch` (batch id -> dead letters of that batch) and `read_again`
    (batch id -> source rows of a batch whose write failed, see `input_rows`).
    """

    def __init__(self, main: DeltaTarget, dead: DeltaTarget, transform: Transform | None,
                 error_column: str | None, limits: Limits, source_rows: SourceRows,
                 partition_by_date: bool = False) -> None:
        self.main, self.dead = main, dead
        self.transformed = TransformedRows(transform, error_column, partition_by_date)
        self.limits = limits
        self.source_rows = source_rows
        self.total: Counter[str] = Counter()
        self.by_batch: dict[int, int] = {}
        self.read_again: dict[int, int] = {}

    def input_rows(self, batch_id: int, reported: int) -> int:
        """The rows of batch `batch_id`, given Spark's `numInputRows` for it: Spark counts only
        the read tasks of writes that succeeded, so a batch whose first write failed on a
        poison row reports too few; its count here is that of its rows read again."""
        return self.read_again.get(batch_id, reported)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        app_id = spark_checkpoint.app_id(self.main.checkpoint)
        if self.main.done(app_id, batch_id):
            if not self.dead.done(app_id, batch_id):  # replayed: were its dead letters written?
                self._dead_letters_again(batch.sparkSession, app_id, batch_id)
            return
        self._forward(batch, app_id, batch_id)

    def _forward(self, batch: DataFrame, app_id: str, batch_id: int) -> None:
        """Write the main table from the streamed `batch`; read the source rows again only for dead letters."""
        raw: DataFrame | None = None
        keys: list[Key] | None = None
        try:
            try:
                rejected = self._write_main(batch, app_id, batch_id)
            except Exception as failure:  # noqa: BLE001 - the transform's, or raised again below
                raw = self._source_rows_for(batch, batch_id, failure)
                rows, keys, poison = self.transformed.isolate_poison(raw, failure, self.limits.max_rows)
                self.read_again = _recent(self.read_again, batch_id, rows)
                self._check(batch_id, len(poison), rows, keys, poison)
                good = raw.where(~rows_in(poison)) if poison else raw
                rejected = self._write_main(self.transformed.streamed(good), app_id, batch_id)
            else:
                if not rejected:
                    return
                poison = []
                raw = self._source_rows_for(batch, batch_id, None)
                raw.persist(StorageLevel.MEMORY_AND_DISK)
                rows = raw.count()
            self._write_dead_letters(raw, app_id, batch_id, rows, keys, poison, rejected)
        finally:
            if raw is not None:
                raw.unpersist()

    def _write_main(self, streamed: DataFrame, app_id: str, batch_id: int) -> int:
        """Write the kept rows of `streamed` to the main table; the number of rejected rows."""
        if self.transformed.error_column is None:
            self.main.write(streamed, app_id, batch_id)
            return 0
        seen = Observation()
        counted = streamed.observe(seen, F.count(F.col(self.transformed.error_column)).alias("rejected"))
        self.main.write(self.transformed.kept(counted), app_id, batch_id)
        return int(seen.get["rejected"])

    def _source_rows_for(self, batch: DataFrame, batch_id: int, failure: Exception | None) -> DataFrame:
        """The source rows of `batch`; `failure` (what writing it raised) is raised instead
        when they cannot be had."""
        try:
            return self.source_rows(batch.sparkSession, batch_id)
        except Exception as exc:
            if failure is None:
                raise
            logger.warning("batch %d: its source rows cannot be read again to look for poison rows (%s)",
                           batch_id, exc)
            raise failure from None

    def _dead_letters_again(self, spark: SparkSession, app_id: str, batch_id: int) -> None:
        """A replayed batch already in the main table: derive its dead letters and write them
        unless it had none."""
        raw = self.source_rows(spark, batch_id)
        try:
            transformed = self.transformed
            rows, keys, poison = transformed.isolate_poison(raw, None, self.limits.max_rows)
            rejected = transformed.rejected_rows(raw, poison).count() if transformed.error_column is not None else 0
            if rejected or poison:
                logger.info("batch %d is in %s but not its dead letters: writing them", batch_id, self.main.path)
                self._write_dead_letters(raw, app_id, batch_id, rows, keys, poison, rejected)
        finally:
            raw.unpersist()

    def _check(self, batch_id: int, failed: int, rows: int, keys: Sequence[Key] | None,
               examples: Sequence[Failure]) -> None:
        if failed == 0 or (failed <= self.limits.max_fraction * rows and failed <= self.limits.max_rows):
            return
        example = f", e.g. at {where_of(examples[0])}: {examples[0].error_class}: " \
                  f"{first_line(examples[0].message)}" if examples else ""
        covers = describe(keys) if keys else "its offsets (see the line below)"
        raise DeadLetterLimitExceeded(
            f"batch {batch_id}: {failed} of {rows} rows fail the transform, more than "
            f"sink.dead_letters.max_fraction ({self.limits.max_fraction:g}) or max_rows "
            f"({self.limits.max_rows}) allow; the batch covers {covers}{example}")

    def _write_dead_letters(self, raw: DataFrame, app_id: str, batch_id: int, rows: int,
                            keys: Sequence[Key] | None, poison: Sequence[Failure], rejected: int) -> None:
        self._check(batch_id, len(poison) + rejected, rows, keys, poison)
        spark = raw.sparkSession
        errors: list[DataFrame] = []
        if poison:
            errors.append(spark.createDataFrame(
                [(f.topic, f.partition, f.offset, f.error_class, f.message[:MESSAGE_CHARS]) for f in poison],
                "topic string, partition int, offset long, error_class string, error_message string"))
        if rejected:
            errors.append(self.transformed.rejected_rows(raw, poison))
        failed = reduce(DataFrame.unionByName, errors)
        source = raw if "headers" in raw.columns else raw.withColumn("headers", F.lit(None).cast(HEADERS_TYPE))
        letters = (source.select(*SOURCE_COLUMNS)
                   .join(F.broadcast(failed), ["topic", "partition", "offset"])
                   .select(*SOURCE_COLUMNS, "error_class", F.substring("error_message", 1, MESSAGE_CHARS)
                           .alias("error_message"), F.lit(batch_id).cast("long").alias("batch_id"),
                           F.lit(app_id).alias("app_id"), F.current_timestamp().alias("dead_lettered_at")))
        letters.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            by_topic = Counter({r[0]: int(r[1]) for r in letters.groupBy("topic").count().collect()})
            self.dead.write(letters, app_id, batch_id)
        finally:
            letters.unpersist()
        count = sum(by_topic.values())
        self.total = self.total + by_topic  # new objects: the job's progress loop reads them from another thread
        self.by_batch = _recent(self.by_batch, batch_id, count)
        logger.warning("batch %d: %d dead letters written to %s (%s)", batch_id, count, self.dead.path,
                       ", ".join(f"{where_of(f)} {f.error_class}" for f in poison[:5])
                       + (f"{', ' if poison else ''}{rejected} rejected by the transform" if rejected else ""))


# --- helpers -------------------------------------------------------------------------------

def _recent(counts: Mapping[int, int], batch_id: int, count: int) -> dict[int, int]:
    """`counts` with `batch_id: count`, without batches older than the last REMEMBERED_BATCHES
    (a job runs for weeks); a new object, as the job's progress loop reads it from another thread."""
    return {**{b: c for b, c in counts.items() if b > batch_id - REMEMBERED_BATCHES}, batch_id: count}


def start_with_dead_letters(raw: DataFrame, transform: Transform | None, stream: DeltaStream, *,
                            dead_letters_path: str, error_column: str | None, limits: Limits,
                            source_rows: SourceRows, dead_letters_table: str | None = None,
                            ) -> tuple[StreamingQuery, DeadLetterBatches]:
    """Start the streaming `raw` (the source's rows) through `transform` into the Delta table of
    `stream`, failed rows into the one at `dead_letters_path` (named `dead_letters_table`, which
    delta-spark then writes by name); `source_rows(spark, batch_id)` reads a micro-batch's rows of
    `raw` again (see the module docstring)."""
    transformed = transform(raw) if transform is not None else raw
    if error_column is not None:
        missing = [c for c in ("topic", "partition", "offset") if c not in transformed.columns]
        if error_column not in transformed.columns or missing:
            raise ValueError(f"sink.dead_letters.error_column {error_column!r}: the transform's output "
                             f"must have it{' and ' + ', '.join(missing) if missing else ''} "
                             "(rows it rejects are traced to their Kafka offsets)")
    dead_path = normalize_location(dead_letters_path)
    made: list[DeadLetterBatches] = []

    def batches(main: DeltaTarget) -> DeadLetterBatches:
        dead = replace(main, path=dead_path, partition_by=(), log_checkpoints=True, table=dead_letters_table)
        made.append(DeadLetterBatches(main, dead, transform, error_column, limits, source_rows,
                                      stream.partition_by_date))
        return made[-1]

    sink = BatchSink(batches, {dead_path: SCHEMA}, () if error_column is None else (error_column,))
    return start_delta_stream(transformed, stream, sink=sink), made[-1]
