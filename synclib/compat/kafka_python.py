"""Every private kafka-python API synclib touches, in one place, guarded by the tested version.

synclib's Arrow reader replaces how kafka-python's fetcher turns one fetch response of a
partition into records. That needs kafka-python internals, all of them used here only:

- `KafkaConsumer._fetcher` and the class it instantiates per fetch response,
  `Fetcher.PartitionRecords`: its `_unpack_records` generator is overridden; the subclass uses
  the transaction helpers `_consume_aborted_transactions_up_to`, `_contains_abort_marker`,
  `_is_batch_aborted` and the attributes its constructor sets (`fetch_offset`,
  `next_fetch_offset`, `check_crcs`, `isolation_level`, ...);
- a v2 record batch's decompressed record bytes (`DefaultRecordBatch._buffer` from `_pos`,
  once iterating has decompressed it);
- the fetcher's copy of the consumer's configuration (`Fetcher.config`): a read task sizes its
  fetches (`max_partition_fetch_bytes`, `fetch_max_bytes`) to the rows it still has to read;
- the admin client's request plumbing (`KafkaAdminClient._manager`, its ListOffsets request and
  response helpers): the planner asks offsets of the leaders its last metadata answer named
  (`list_offsets_from`);
- the consumer's subscription state (`KafkaConsumer._subscription.assignment[tp].position`, its
  `seek`): a read task asks for the positions of hundreds of partitions at once (`positions`)
  and sets them at once (`seek`);
- kafka-python's own parser on raw bytes (constructing `Fetcher.PartitionRecords`) and its
  record builder (`MemoryRecordsBuilder`, plus the header layout of a v2 batch to make
  transaction markers): the start-up self-check and the tests use them.

`fast_path_problem()` says why these cannot be used (None when they can): a kafka-python other
than `TESTED_VERSION`, or a missing hook. Callers then read through the public API instead.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

import kafka
import kafka.codec
from kafka import KafkaAdminClient, KafkaConsumer
from kafka.consumer.fetcher import Fetcher
from kafka.errors import CorruptRecordError, UnsupportedCodecError
from kafka.protocol.consumer import IsolationLevel
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder
from kafka.record.util import calc_crc32c
from kafka.structs import TopicPartition

# The kafka-python minor version the Arrow reader is tested with (pyproject pins the same).
TESTED_VERSION = (3, 0)
_PARTITION_RECORDS_MEMBERS = ("_unpack_records", "_consume_aborted_transactions_up_to",
                              "_contains_abort_marker", "_is_batch_aborted", "drain", "take")
_BATCH_SLOTS = ("_buffer", "_pos")


@dataclass(frozen=True)
class Codec:
    """A compression codec of Kafka record batches and the package kafka-python decodes it with."""

    name: str
    available: Callable[[], bool]
    package: str | None  # None: part of Python

    @property
    def remedy(self) -> str:
        if self.package is None:
            return "use a Python built with zlib"
        return (f"install the Python package {self.package!r} where the job runs (synclib's package "
                f"dependencies include it)")


# kafka-python looks each library up when it decompresses (kafka.codec), so these do too.
CODECS = {
    DefaultRecordBatch.CODEC_GZIP: Codec("gzip", lambda: kafka.codec.has_gzip(), None),
    DefaultRecordBatch.CODEC_SNAPPY: Codec("snappy", lambda: kafka.codec.has_snappy(), "python-snappy"),
    DefaultRecordBatch.CODEC_LZ4: Codec("lz4", lambda: kafka.codec.has_lz4(), "lz4"),
    DefaultRecordBatch.CODEC_ZSTD: Codec("zstd", lambda: kafka.codec.has_zstd(), "zstandard"),
}


class MissingCodecError(UnsupportedCodecError):  # type: ignore[misc]
    """A record batch is compressed with a codec whose library is not installed."""

    def __init__(self, tp: TopicPartition, offset: int, codec: str) -> None:
        remedy = next((c.remedy for c in CODECS.values() if c.name == codec), "no decoder is known for it")
        super().__init__(f"{tp.topic}[{tp.partition}] offset {offset}: cannot decode a record batch "
                         f"compressed with {codec}: {remedy}")


def missing_codec_error(tp: TopicPartition, offset: int, error: UnsupportedCodecError) -> MissingCodecError:
    """kafka-python's codec error (public-API path) with the partition, offset and remedy."""
    named = re.search(r"for (\w+) compression", str(error)) or re.search(r"type: (\S+)", str(error))
    return MissingCodecError(tp, offset, named.group(1) if named else str(error))


def installed_version() -> str:
    return str(getattr(kafka, "__version__", "unknown"))


def version_problem() -> str | None:
    """Why the installed kafka-python is not the tested one; None when it is."""
    version = installed_version()
    release = re.match(r"(\d+)\.(\d+)", version)
    if release and (int(release.group(1)), int(release.group(2))) == TESTED_VERSION:
        return None
    tested = ".".join(map(str, TESTED_VERSION))
    return f"kafka-python {version} is not the version the Arrow reader is tested with ({tested}.x)"


def hook_problem() -> str | None:
    """Why the fetcher internals the Arrow reader replaces are missing; None when present."""
    base = getattr(Fetcher, "PartitionRecords", None)
    if not isinstance(base, type):
        return "kafka-python's Fetcher has no PartitionRecords class"
    missing = [name for name in _PARTITION_RECORDS_MEMBERS if not callable(getattr(base, name, None))]
    missing += [f"DefaultRecordBatch.{slot}" for slot in _BATCH_SLOTS
                if slot not in getattr(DefaultRecordBatch, "__slots__", ())]
    if missing:
        return f"kafka-python's fetcher internals lack {', '.join(missing)}"
    return None


def fast_path_problem() -> str | None:
    """Why the fetcher hook must not be used (version, then hook); None when it may."""
    return version_problem() or hook_problem()


class BatchRecords(NamedTuple):
    """The decompressed records of one message format v2 batch, with the header fields they need
    (a tuple: one is made per fetched batch, thousands a poll on a wide topic)."""

    payload: memoryview
    rows: int
    base_offset: int
    first_timestamp: int
    max_timestamp: int
    timestamp_type: int
    last_offset: int  # the batch header's: compaction may have removed the records up to it


class LegacyRecord(Protocol):
    """A message format v0/v1 record (brokers before 0.11), as kafka-python parses it."""

    key: bytes | None
    value: bytes | None
    offset: int
    timestamp: int | None
    timestamp_type: int | None


# One fetched batch: a v2 batch's records, or a v0/v1 batch's parsed records.
Piece = BatchRecords | list[LegacyRecord]


class Decoded(Protocol):
    """What a decoder makes of one fetch response: its records, `offset` being the last."""

    @property
    def offset(self) -> int: ...

    def __len__(self) -> int: ...


# (partition, the fetched pieces in order, fetch offset) -> the records at or after the fetch offset
Decoder = Callable[[TopicPartition, Sequence[Piece], int], Decoded | None]


def partition_records_class(decode: Decoder) -> type:
    """A `Fetcher.PartitionRecords` whose records are `decode(...)` of each whole fetch response:
    one item per response. Same batch-level rules as kafka-python: CRC check, control batches
    skipped, aborted transactions skipped under read_committed, records below the fetch offset
    dropped, next fetch offset past the last batch (control markers included)."""

    class BatchPartitionRecords(Fetcher.PartitionRecords):  # type: ignore[misc]
        def _unpack_records(self, tp: TopicPartition, records: Any, key_deserializer: Any,
                            value_deserializer: Any) -> Iterator[Decoded]:
            pieces: list[Piece] = []
            batch = records.next_batch()
            while batch is not None:
                if self.check_crcs and not batch.validate_crc():
                    raise CorruptRecordError(f"Record batch for partition {tp} at offset "
                                             f"{batch.base_offset} failed crc check")
                self.bytes_read += batch.size_in_bytes
                if batch.magic < 2:
                    legacy = list(batch)
                    if self.check_crcs and not all(record.validate_crc() for record in legacy):
                        raise CorruptRecordError(f"Record for partition {tp} in the batch at offset "
                                                 f"{batch.base_offset} failed crc check")
                    if legacy:
                        pieces.append(legacy)
                        self.next_fetch_offset = legacy[-1].offset + 1
                    batch = records.next_batch()
                    continue
                if not self._skip(batch):
                    pieces.append(_batch_records(tp, batch))
                self.next_fetch_offset = batch.next_offset
                batch = records.next_batch()
            decoded = decode(tp, pieces, self.fetch_offset) if pieces else None
            self.records_read += len(decoded) if decoded is not None else 0
            # Drained before the caller sees the data: the fetcher may fetch this partition
            # again while the caller converts and ships these records.
            self.drain()
            if decoded is not None:
                yield decoded

        def _skip(self, batch: Any) -> bool:
            """Control batches, and batches of aborted transactions under read_committed."""
            self.leader_epoch = batch.leader_epoch
            if self.isolation_level == IsolationLevel.READ_COMMITTED and batch.has_producer_id():
                self._consume_aborted_transactions_up_to(batch.last_offset)
                if self._contains_abort_marker(batch):
                    self.aborted_producer_ids.discard(batch.producer_id)
                elif self._is_batch_aborted(batch):
                    return True
            return bool(batch.is_control_batch)

    return BatchPartitionRecords


def _batch_records(tp: TopicPartition, batch: Any) -> BatchRecords:
    codec = batch.compression_type
    if codec != DefaultRecordBatch.CODEC_NONE and not (codec in CODECS and CODECS[codec].available()):
        raise MissingCodecError(tp, batch.base_offset, CODECS[codec].name if codec in CODECS else f"codec id {codec}")
    iter(batch)  # decompresses
    return BatchRecords(memoryview(batch._buffer)[batch._pos:], batch.records_count, batch.base_offset,
                        batch.first_timestamp, batch.max_timestamp, batch.timestamp_type, batch.last_offset)


def install(consumer: KafkaConsumer, partition_records: type) -> str | None:
    """Make `consumer`'s fetcher parse fetch responses with `partition_records`; the reason it
    cannot (and nothing changed) if the consumer has no such fetcher."""
    fetcher = getattr(consumer, "_fetcher", None)
    if not isinstance(fetcher, Fetcher) or not hasattr(fetcher, "PartitionRecords"):
        return "kafka-python's consumer has no fetcher with a PartitionRecords class"
    fetcher.PartitionRecords = partition_records
    return None


def set_fetch_sizes(consumer: KafkaConsumer, partition_bytes: int, total_bytes: int) -> bool:
    """Make `consumer`'s next fetch requests ask for at most `partition_bytes` per partition and
    `total_bytes` in all: kafka-python reads both from its fetcher's copy of the configuration each
    time it builds a request. False (nothing changed) if the consumer has no such fetcher."""
    config = getattr(getattr(consumer, "_fetcher", None), "config", None)
    if not isinstance(config, dict) or not {"max_partition_fetch_bytes", "fetch_max_bytes"} <= config.keys():
        return False
    config["max_partition_fetch_bytes"], config["fetch_max_bytes"] = partition_bytes, total_bytes
    return True


def list_offsets_from(admin: KafkaAdminClient, leaders: Mapping[TopicPartition, int],
                      specs: Mapping[TopicPartition, Any], isolation_level: str) -> dict[TopicPartition, Any] | None:
    """`admin.list_partition_offsets(specs, isolation_level)` asked of the given leaders, one
    ListOffsets request each, without the metadata round trip kafka-python's call makes first (at
    1,024 partitions its whole answer turned into dicts: about 11 ms of CPU). Raises what the
    requests raise (a moved leader: NotLeaderForPartitionError); None if this admin client has no
    such internals (`KafkaAdminClient._manager`, its ListOffsets request and response helpers)."""
    manager = getattr(admin, "_manager", None)
    build = getattr(admin, "_list_partition_offsets_request", None)
    process = getattr(admin, "_list_partition_offsets_process_response", None)
    if manager is None or build is None or process is None:
        return None
    by_leader: dict[int, dict[TopicPartition, Any]] = {}
    for tp, spec in specs.items():
        by_leader.setdefault(leaders[tp], {})[tp] = spec
    level = IsolationLevel.build_from(isolation_level).value

    async def ask() -> dict[TopicPartition, Any]:
        found: dict[TopicPartition, Any] = {}
        for leader, asked in by_leader.items():
            found.update(process(await manager.send(build(asked, level), node_id=leader)))
        return found

    return manager.run(ask)  # type: ignore[no-any-return]


def positions(consumer: KafkaConsumer, partitions: Sequence[TopicPartition]) -> dict[TopicPartition, int | None]:
    """The fetch positions of assigned `partitions`. `KafkaConsumer.position` resets and validates
    the positions of every assigned partition before answering for one: 256 calls over 256
    partitions took about a second. One call does that, the others are read from the state it
    left, or asked one by one where that state is not there."""
    if not partitions:
        return {}
    found = {partitions[0]: consumer.position(partitions[0])}
    assignment = getattr(getattr(consumer, "_subscription", None), "assignment", None)
    for tp in partitions[1:]:
        state = assignment.get(tp) if isinstance(assignment, dict) else None
        position = getattr(state, "position", None)
        offset = getattr(position, "offset", None)
        found[tp] = offset if isinstance(offset, int) else consumer.position(tp)
    return found


def seek(consumer: KafkaConsumer, offsets: Mapping[TopicPartition, int]) -> None:
    """`KafkaConsumer.seek` of each assigned partition to its offset. The public call builds the
    set of assigned partitions to check each one (1,024 calls over 1,024 partitions: 80 ms a read
    task); here it is built once. Unassigned: ValueError, as `seek` raises."""
    subscription: Any = getattr(consumer, "_subscription", None)
    if not callable(getattr(subscription, "seek", None)) or not hasattr(consumer, "_iterator"):
        for tp, offset in offsets.items():
            consumer.seek(tp, offset)
        return
    assigned = subscription.assigned_partitions()
    unassigned = sorted(tp for tp in offsets if tp not in assigned)
    if unassigned:
        raise ValueError(f"Unassigned partition {unassigned[0]}")
    for tp, offset in offsets.items():
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"Offset must be int >= 0, not {offset!r} for {tp}")
        subscription.seek(tp, offset)
    consumer._iterator = None  # as seek does: a consumer iterator restarts from the new positions


@dataclass(frozen=True)
class Parsed:
    """What a fetcher's PartitionRecords made of one fetch response."""

    records: list[Any]
    next_fetch_offset: int
    drained: bool


@dataclass(frozen=True)
class AbortedTransaction:
    """An entry of a fetch response's aborted-transaction list (read_committed)."""

    producer_id: int
    first_offset: int


def parse(data: bytes, tp: TopicPartition, fetch_offset: int, partition_records: type | None = None, *,
          isolation_level: str = "read_uncommitted", aborted: Sequence[AbortedTransaction] = ()) -> Parsed:
    """What a fetcher's `partition_records` (kafka-python's own by default) makes of a fetch
    response holding `data` (and the `aborted` transactions list), read from `fetch_offset`."""
    part = (partition_records or Fetcher.PartitionRecords)(
        fetch_offset, tp, MemoryRecords(data), isolation_level=IsolationLevel.build_from(isolation_level),
        aborted_transactions=list(aborted))
    records = part.take()
    return Parsed(records, part.next_fetch_offset, not part)


Records = Sequence[tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]]
_ATTRIBUTES_AT, _CRC_AT = 21, 17  # in a v2 batch header; the CRC covers the attributes onwards


def build_batch(records: Records, *, offset: int = 0, magic: int = 2, compression: int = DefaultRecordBatch.CODEC_NONE,
                timestamps: Sequence[int] = (), skip: int = 0, producer_id: int = -1) -> bytes:
    """One record batch as a broker stores it: (key, value, headers) records from `offset`,
    after `skip` offsets left out (as compaction does); timestamps default to a millisecond apart.
    With a `producer_id` the batch is transactional."""
    # A v2 batch's records hold offset deltas; its base offset (outside the CRC) is the broker's.
    transactional = producer_id >= 0
    builder = MemoryRecordsBuilder(magic, compression, batch_size=1 << 30, offset=0 if magic == 2 else offset,
                                   transactional=transactional, producer_id=producer_id,
                                   producer_epoch=0 if transactional else -1, base_sequence=0 if transactional else -1)
    if skip:
        builder.skip(skip)
    for index, (key, value, headers) in enumerate(records):
        timestamp = timestamps[index] if timestamps else 1_700_000_000_000 + index
        builder.append(timestamp, key, value, list(headers))
    builder.close()
    data = bytearray(builder.buffer())
    if magic == 2:
        data[:8] = offset.to_bytes(8, "big", signed=True)
    return bytes(data)


def build_marker(*, offset: int, producer_id: int, commit: bool) -> bytes:
    """A transaction's commit or abort marker (a control batch of one record) at `offset`."""
    control_type = 1 if commit else 0
    data = bytearray(build_batch([(struct.pack(">hh", 0, control_type), struct.pack(">hi", 0, 0), [])],
                                 offset=offset, producer_id=producer_id))
    attributes = int.from_bytes(data[_ATTRIBUTES_AT:_ATTRIBUTES_AT + 2], "big") | DefaultRecordBatch.CONTROL_MASK
    data[_ATTRIBUTES_AT:_ATTRIBUTES_AT + 2] = attributes.to_bytes(2, "big")
    data[_CRC_AT:_ATTRIBUTES_AT] = calc_crc32c(memoryview(data)[_ATTRIBUTES_AT:]).to_bytes(4, "big")
    return bytes(data)
