"""A micro-batch's source rows again, by the offsets Spark logged for it: the rows the
dead-letter sink isolates poison rows in and takes dead letters from
(`synclib.dead_letters.sink.SourceRows`), read only when a batch has dead letters."""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame, SparkSession

from synclib import spark_checkpoint
from synclib.locations import normalize_location, read_text
from synclib.settings.source import SourceOptions
from synclib.source.datasource import FORMAT_NAME


class MicroBatchSourceRows:
    """`rows(spark, batch_id)`: a batch read of the `synchronized_kafka` source with the stream's
    `options`, from batch N-1's end offsets (batch 0: the stream's `initialOffsetsFile`) to
    batch N's, both from Spark's offset log in `checkpoint_location`. Holds no session, so it
    travels with a `foreachBatch` function (Spark Connect runs that in the server)."""

    def __init__(self, options: Mapping[str, str], checkpoint_location: str) -> None:
        self.options = dict(options)
        self.location = normalize_location(checkpoint_location)
        self.initial_offsets_file = SourceOptions.from_spark(options).initial_offsets_file

    def __call__(self, spark: SparkSession, batch_id: int) -> DataFrame:
        end = spark_checkpoint.batch_offsets(self.location, batch_id)
        start = spark_checkpoint.batch_offsets(self.location, batch_id - 1) if batch_id > 0 else self._initial()
        if start is None or end is None:
            raise spark_checkpoint.CheckpointError(
                f"batch {batch_id} in {self.location!r}: Spark's offset log has no offsets of the source")
        return (spark.read.format(FORMAT_NAME).options(**self.options)
                .option("startingOffsets", start).option("endingOffsets", end).load())

    def _initial(self) -> str:
        text = read_text(self.initial_offsets_file) if self.initial_offsets_file else None
        if text is None:
            raise spark_checkpoint.CheckpointError(
                "batch 0's start offsets are unknown: the stream's source needs the option initialOffsetsFile "
                f"(now {self.initial_offsets_file or 'unset'}), where it keeps them")
        return text.strip()
