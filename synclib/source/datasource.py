"""The `synchronized_kafka` streaming source.

Plans every micro-batch's end offsets as `min(locally available, remote committed)` per
partition, where "remote" is what the leader groups have committed according to their
commit log. Planning (driver) keeps a `synclib.source.planner.Planner` (a commit-log follower
thread and a metadata client); reading (executors) uses a cached kafka-python consumer per
Python worker. Neither is pickled: Spark ships the reader to workers with its options only.

With `awaitLeaderCommits` a trigger that finds nothing newly committed waits, at most
`LEADER_WAIT_S`, for the follower to announce a commit that releases offsets, and plans the batch
at once; under a processing-time trigger of 0 (Spark then asks again right away) a micro-batch
starts as soon as the leader commits, no sooner than `minBatchInterval` after the previous one.
"""

from __future__ import annotations

import gc
import json
import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from synclib.compat import pyspark as spark_compat
from synclib.kafka.admin import KafkaMetadata
from synclib.kafka.reader import KafkaDataLossError, KafkaInputPartition, plan_tasks, read_partition
from synclib.locations import read_text, write_text
from synclib.offsets import (
    EARLIEST,
    LATEST,
    OffsetRange,
    OffsetsJson,
    PartitionOffsets,
    TopicPartitionKey,
    parse_offsets_json,
    to_offsets_json,
)
from synclib.schema import output_schema
from synclib.settings.source import LEADER_WAIT_S, SourceOptions
from synclib.source.planner import Planner
from synclib.source.planning import cap_offsets, has_work, limit_rows
from synclib.spark_checkpoint import check_run

# A leader commit of a wide topic is a commit-log message per partition; the follower applies them
# poll by poll as they arrive (kafka-python or librdkafka send them in several produce requests),
# and the planner wakes at the first. Releases announced while it planned are planned again, so
# one leader commit makes one batch, not a batch and its remainder `minBatchInterval` later; a
# release that lands during no planning costs nothing, and the bound keeps a leader group that
# commits without pause from delaying a batch.
BURST_REPLANS = 3

logger = logging.getLogger(__name__)

FORMAT_NAME = "synchronized_kafka"

def register(spark: SparkSession) -> None:
    """Make `spark.readStream.format("synchronized_kafka")` available in this session."""
    spark.dataSource.register(SynchronizedKafkaDataSource)


class SynchronizedKafkaDataSource(DataSource):
    """Kafka source gated by a leader consumer group's commit log."""

    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> StructType:
        return spark_compat.from_arrow_schema(output_schema(SourceOptions.from_spark(self.options).include_headers))

    def streamReader(self, schema: StructType) -> SynchronizedKafkaStreamReader:
        return SynchronizedKafkaStreamReader(SourceOptions.from_spark(self.options), schema)

    def reader(self, schema: StructType) -> SynchronizedKafkaBatchReader:
        return SynchronizedKafkaBatchReader(SourceOptions.from_spark(self.options), schema)


class SynchronizedKafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Spark calls the planning methods on the driver and `read` on executors."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._planner: Planner | None = None
        self._target: PartitionOffsets | None = None
        self._last_end: PartitionOffsets | None = None
        self._reported_start: PartitionOffsets | None = None  # the start of the last status written
        self._initial: OffsetsJson | None = None
        self._batch_started_at = float("-inf")  # time.monotonic() when the last batch was planned

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_planner"] = None
        return state

    @property
    def planner(self) -> Planner:
        if self._planner is None:
            self._planner = Planner(self.options)
        self._planner.remote.check()
        return self._planner

    # -- offsets ---------------------------------------------------------------------

    def initialOffset(self) -> OffsetsJson:
        """The first batch's start: kept in `initialOffsetsFile` at the first start, read from there
        once per query afterwards (Spark asks more than once; the file never changes)."""
        if self._initial is None:
            self._initial = self._kept_initial()
        return self._initial

    def _kept_initial(self) -> OffsetsJson:
        kept = self.options.initial_offsets_file
        stored = read_text(kept) if kept else None
        if kept and stored is not None:
            try:
                offsets = parse_offsets_json(stored)
            except ValueError as exc:
                raise ValueError(f"initialOffsetsFile {kept}: {exc} (delete it to start afresh)") from None
            logger.info("initial offsets, kept in %s since the first start: %s", kept, stored)
            return to_offsets_json(offsets)
        initial = self._resolve_initial()
        if kept:
            write_text(kept, json.dumps(initial))
        return initial

    def _resolve_initial(self) -> OffsetsJson:
        planner = self.planner
        partitions = planner.metadata.partitions()
        starting = self.options.starting
        if isinstance(starting, dict):
            offsets = resolve_offsets(starting, planner.metadata, partitions)
        elif starting == "earliest":
            offsets = planner.metadata.earliest_offsets(partitions)
        elif starting == "committed":
            committed = planner.metadata.group_offsets(self.options.consumer_group or "")
            offsets = {tp: committed[tp] for tp in partitions if tp in committed}
            missing = [tp for tp in partitions if tp not in committed]
            reset = (planner.metadata.earliest_offsets if self.options.initial_offset_reset == "earliest"
                     else planner.metadata.high_watermarks)
            offsets.update(reset(missing))
        else:  # latest
            offsets = planner.metadata.high_watermarks(partitions)
        logger.info("initial offsets (%s): %s", starting if isinstance(starting, str) else "json",
                    to_offsets_json(offsets))
        return to_offsets_json(offsets)

    def latestOffset(self, start: OffsetsJson | None = None, limit: ReadLimit | None = None) -> OffsetsJson:
        if start is None:  # Spark 4.0/4.1 runners call latestOffset() without arguments
            start_offsets = self._last_end if self._last_end is not None else parse_offsets_json(self.initialOffset())
            limit = self.getDefaultReadLimit()
        else:
            start_offsets = parse_offsets_json(start)
        planner = self.planner
        if planner.publisher is not None:
            # Spark plans a batch only once the previous one is committed, so everything below
            # `start` is durable in the sink (Spark's own commit(end) comes a batch later).
            planner.publisher.publish(start_offsets)
        seen = planner.remote.release_generation()  # before planning: a release from now on wakes the wait
        effective_start, end = self._plan(start_offsets, limit)
        if self.options.await_leader_commits and self._target is None:
            if start_offsets != self._reported_start and not has_work(start_offsets, end):
                self._write_status(start_offsets)  # the last batch's end, shown before the gate waits
            effective_start, end = self._await_leader(start_offsets, limit, seen, effective_start, end)
        if has_work(start_offsets, end):
            if self.options.run_id and self.options.run_checkpoint:  # before Spark logs the batch's offsets
                check_run(self.options.run_checkpoint, self.options.run_id)
            self._batch_started_at = time.monotonic()
            planner.planned(effective_start, end)
        self._last_end = end
        self._write_status(start_offsets)
        return to_offsets_json(end)

    def _write_status(self, start: PartitionOffsets) -> None:
        """The planner's status file (`statusFile`), its follower offsets planned from `start`."""
        if self.options.status_file:
            self.planner.status().write(self.options.status_file)
            self._reported_start = start

    def _plan(self, start: PartitionOffsets, limit: ReadLimit | None) -> tuple[PartitionOffsets, PartitionOffsets]:
        """The effective start and the end of a batch from `start`, capped by the Trigger.AvailableNow
        target and `limit`."""
        effective_start, end = self.planner.releasable(start)
        if self._target is not None:
            end = cap_offsets(end, self._target, effective_start)
        if isinstance(limit, ReadMaxRows):
            end = limit_rows(effective_start, end, limit.max_rows)
        return effective_start, end

    def _await_leader(self, start: PartitionOffsets, limit: ReadLimit | None, seen: int,
                      effective_start: PartitionOffsets, end: PartitionOffsets
                      ) -> tuple[PartitionOffsets, PartitionOffsets]:
        """`awaitLeaderCommits`: with nothing to forward, wait (up to `LEADER_WAIT_S`) for a leader
        commit that releases offsets (announced after generation `seen`); then plan again while the
        follower announced more during planning (up to `BURST_REPLANS` times); with something, not
        before `minBatchInterval` has passed since the previous batch started. Each wake-up plans
        again (a broker round trip for the high watermarks)."""
        remote = self.planner.remote
        deadline = time.monotonic() + LEADER_WAIT_S
        while not has_work(start, end):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return effective_start, end
            generation = remote.wait_for_release(seen, remaining)
            if generation == seen:  # no release in time (or the follower failed: planning raises it)
                remote.check()
                return effective_start, end
            seen = generation
            effective_start, end = self._plan(start, limit)
        for _ in range(BURST_REPLANS):
            generation = remote.release_generation()
            if generation == seen:
                break
            seen = generation  # commits of the same leader commit applied while planning: take them too
            effective_start, end = self._plan(start, limit)
        early = self._batch_started_at + self.options.min_batch_interval - time.monotonic()
        if early > 0:
            time.sleep(early)  # bounded by minBatchInterval; what arrives meanwhile joins the batch
            effective_start, end = self._plan(start, limit)
        return effective_start, end

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def reportLatestOffset(self) -> OffsetsJson | None:
        hw = self.planner.high_watermarks
        return to_offsets_json(hw) if hw else None

    def prepareForTriggerAvailableNow(self) -> None:
        """Fix the target: what is releasable now (the follower is caught up first)."""
        planner = self.planner
        partitions = planner.metadata.partitions()
        hw = planner.metadata.high_watermarks(partitions)
        remote = planner.remote.remote_offsets(partitions)
        self._target = {tp: min(hw[tp], offset) for tp, offset in remote.items() if offset is not None}
        logger.info("Trigger.AvailableNow target: %s", to_offsets_json(self._target))

    # -- partitions and reading --------------------------------------------------------

    def partitions(self, start: OffsetsJson, end: OffsetsJson) -> Sequence[InputPartition]:
        return plan_reads(parse_offsets_json(start), parse_offsets_json(end), self.planner.metadata, self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_records(partition, self.options, self.schema)

    def commit(self, end: OffsetsJson) -> None:
        """Nothing to release: reading holds no broker-side state."""

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
            self._planner = None


class SynchronizedKafkaBatchReader(DataSourceReader):
    """`spark.read.format("synchronized_kafka")`: the records between `startingOffsets`
    (`earliest` or offsets JSON) and `endingOffsets` (`latest` or offsets JSON), ungated, as
    Spark's Kafka batch read; for example a micro-batch again, by the offsets Spark logged for it."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        metadata = KafkaMetadata(self.options.client_config, self.options.subscription,
                                 retry_timeout_s=self.options.broker_timeout)
        try:
            starting = self.options.starting
            start = {} if starting == "earliest" else starting  # partitions left out: from earliest
            if not isinstance(start, dict):
                raise ValueError(f"option startingOffsets: a batch read starts at earliest or at offsets JSON, "
                                 f"not {starting!r}")
            ending = self.options.ending_offsets
            if ending is None or ending == "latest":
                end = metadata.high_watermarks(metadata.partitions())
            else:
                try:
                    end = parse_offsets_json(ending)
                except ValueError as exc:
                    raise ValueError(f"option endingOffsets: {exc}") from None
            return plan_reads(resolve_offsets(start, metadata), resolve_offsets(end, metadata), metadata,
                              self.options)
        finally:
            metadata.close()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_records(partition, self.options, self.schema)


def resolve_offsets(given: PartitionOffsets, metadata: KafkaMetadata,
                    partitions: Sequence[TopicPartitionKey] = ()) -> PartitionOffsets:
    """Offsets JSON as the partitions' offsets: Spark's -2/-1 mean earliest/latest; `partitions`
    not given start from earliest."""
    wanted = set(partitions) | set(given)
    earliest = metadata.earliest_offsets([tp for tp in wanted if given.get(tp, EARLIEST) == EARLIEST])
    latest = metadata.high_watermarks([tp for tp in wanted if given.get(tp) == LATEST])
    return {tp: earliest.get(tp, 0) if given.get(tp, EARLIEST) == EARLIEST
            else latest.get(tp, 0) if given[tp] == LATEST else given[tp] for tp in wanted}


def plan_reads(start: PartitionOffsets, end: PartitionOffsets, metadata: KafkaMetadata,
               options: SourceOptions) -> Sequence[InputPartition]:
    """The offset ranges with work, packed and split into tasks (`plan_tasks`). A partition
    without a start, or moved back to earliest after its topic was recreated (end below
    start), reads from earliest."""
    with_work = {tp: stop for tp, stop in end.items() if start.get(tp) != stop}
    earliest = metadata.earliest_offsets(with_work)
    ranges = []
    for tp, stop in sorted(with_work.items()):
        first = start.get(tp)
        if first is None or first > stop:
            first = earliest.get(tp, 0)
        elif first < earliest.get(tp, 0):
            first = _data_lost_before(tp, first, earliest[tp], options.fail_on_data_loss)
        if first < stop:
            ranges.append(OffsetRange(tp[0], tp[1], first, stop))
    return plan_tasks(ranges)


def _data_lost_before(tp: TopicPartitionKey, first: int, earliest: int, fail_on_data_loss: bool) -> int:
    message = (f"{tp[0]}[{tp[1]}]: offsets [{first}, {earliest}) were deleted before they "
               f"were read (retention or truncation)")
    if fail_on_data_loss:
        raise KafkaDataLossError(message + "; set failOnDataLoss=false to skip them")
    logger.warning("%s; skipping them (failOnDataLoss=false)", message)
    return earliest


def read_records(partition: InputPartition, options: SourceOptions, schema: StructType) -> Iterator[pa.RecordBatch]:
    """A read task's records, as Arrow batches of `schema`; after the first task of the Python
    worker, its objects so far are frozen (`freeze_worker_objects`)."""
    assert isinstance(partition, KafkaInputPartition)
    yield from read_partition(
        partition,
        options.client_config,
        spark_compat.to_arrow_schema(schema),
        include_headers=options.include_headers,
        fail_on_data_loss=options.fail_on_data_loss,
        poll_timeout_ms=options.poll_timeout_ms,
        stall_timeout_s=options.read_stall_timeout,
    )
    freeze_worker_objects()


def freeze_worker_objects() -> None:
    """Once per Python worker, after its first read task: every object alive then (the modules
    of the read path, the cached consumer) leaves the cyclic garbage collector's reach
    (`gc.freeze`; reference counting still frees them). PySpark's daemon runs a full
    `gc.collect()` after every task of a reused worker: over those ~110k objects about 40 ms of
    CPU, on a two-core machine taken from the driver while it writes the batch's commit log.
    Objects created later are collected as before."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
