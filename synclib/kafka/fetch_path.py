"""Which path a worker's consumers read by: the Arrow fast path, or kafka-python's public API.

The fast path hooks kafka-python internals (`synclib.compat.kafka_python`). Before the first
consumer of a process uses it, a self-check decodes a small known fetch response with both the
Arrow decoder and kafka-python's own parser. A kafka-python other than the tested version, a
missing hook, or any difference sends every consumer of the process through the public API
(`KafkaConsumer.poll()` -> ConsumerRecords -> Arrow columns) with one warning: a slower job,
never wrong data or a dead executor.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from kafka import KafkaConsumer
from kafka.errors import UnsupportedCodecError
from kafka.record.default_records import DefaultRecordBatch
from kafka.structs import TopicPartition

from synclib.compat import kafka_python
from synclib.kafka.arrow_records import (
    FetchedRecords,
    Records,
    arrow_partition_records,
    decode_fetches,
    listed_records,
)
from synclib.schema import HEADERS_TYPE

logger = logging.getLogger(__name__)

_CHECK_TP = TopicPartition("synclib-self-check", 7)
_warned: set[str] = set()
_warned_lock = threading.Lock()


def _known_fetch() -> tuple[bytes, int, list[kafka_python.AbortedTransaction]]:
    """A fetch response covering what the decoder must get right, a fetch offset inside it and
    its aborted-transactions list: headers (one with a null value), null and empty keys and
    values, multi-byte lengths, a gzip batch, an offset gap, a committed and an aborted
    transaction with their markers, the last offset a marker."""
    plain = kafka_python.build_batch([
        (None, b"v0", [("h", b"1"), ("null", None)]),
        (b"k1", None, []),
        (b"", b"x" * 300, [("", b"")]),
        (b"k3", b"v3", [("h", b"y" * 200)]),
    ], offset=10)
    packed = kafka_python.build_batch([(b"k5", b"z" * 500, [("h", None)]), (None, None, [])], offset=15, skip=1,
                                      compression=DefaultRecordBatch.CODEC_GZIP)
    committed = kafka_python.build_batch([(b"k18", b"committed", [])], offset=18, producer_id=1)
    aborted = kafka_python.build_batch([(b"k20", b"aborted", [])], offset=20, producer_id=2)
    transactions = (committed + kafka_python.build_marker(offset=19, producer_id=1, commit=True)
                    + aborted + kafka_python.build_marker(offset=21, producer_id=2, commit=False))
    return plain + packed + transactions, 11, [kafka_python.AbortedTransaction(producer_id=2, first_offset=20)]


def self_check() -> str | None:
    """Decode `_known_fetch()` with the Arrow path and with kafka-python's parser, under
    read_committed (every fetcher internal the fast path uses is called); what differs (or
    fails) when they disagree, None when they agree."""
    try:
        data, fetch_offset, aborted = _known_fetch()
        fast = kafka_python.parse(data, _CHECK_TP, fetch_offset, arrow_partition_records(),
                                  isolation_level="read_committed", aborted=aborted)
        parsed = kafka_python.parse(data, _CHECK_TP, fetch_offset, isolation_level="read_committed", aborted=aborted)
        reference = listed_records(parsed.records)
        if len(fast.records) != 1 or not isinstance(fast.records[0], FetchedRecords):
            return f"the self-check got {len(fast.records)} items instead of one FetchedRecords"
        decoded = decode_fetches([(fast.records[0], parsed.next_fetch_offset)])
    except Exception as exc:  # noqa: BLE001 - any failure of the hook means: do not use it
        return f"the self-check failed: {type(exc).__name__}: {exc}"
    if fast.next_fetch_offset != parsed.next_fetch_offset:
        return (f"the self-check ended at offset {fast.next_fetch_offset}, kafka-python's parser at "
                f"{parsed.next_fetch_offset}")
    rows = reference.batch.num_rows
    if decoded is None or not decoded.batch.equals(reference.batch):
        return "the self-check decoded different records than kafka-python's parser"
    if not decoded.headers(0, rows, HEADERS_TYPE).equals(reference.headers(0, rows, HEADERS_TYPE)):
        return "the self-check decoded different headers than kafka-python's parser"
    return None


@functools.cache
def fast_path_problem() -> str | None:
    """Why this process reads through the public API (None: the fast path is in use). Checked
    once per process: version, hook, then the self-check."""
    return kafka_python.fast_path_problem() or self_check()


def _warn_once(problem: str) -> None:
    with _warned_lock:
        if problem in _warned:
            return
        _warned.add(problem)
    logger.warning("synclib's Arrow reader is off: %s. Reading through kafka-python's public API "
                   "instead: the same records, several times the CPU per record. kafka-python %s.x "
                   "(the version synclib pins) restores it.", problem,
                   ".".join(map(str, kafka_python.TESTED_VERSION)))


class RecordsConsumer:
    """A KafkaConsumer (`kafka`) whose polls (`poll`, then `records`) give Arrow records, by the
    fast path when this process may use it, by the public API otherwise."""

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self.kafka = KafkaConsumer(**settings)
        problem = fast_path_problem() or kafka_python.install(self.kafka, arrow_partition_records())
        if problem:
            _warn_once(problem)
        self.fast = not problem
        self.limits = (int(settings["max_partition_fetch_bytes"]), int(settings["fetch_max_bytes"]))  # configured
        self.fetched_bytes = self.fetched_rows = 0  # the record bytes decoded (fast path) and their rows

    @property
    def bytes_per_row(self) -> float | None:
        """The record bytes per row decoded so far by this consumer (None: none yet, or the public API)."""
        return self.fetched_bytes / self.fetched_rows if self.fetched_rows else None

    def size_fetches(self, partition_bytes: int, total_bytes: int) -> None:
        """Ask for at most these bytes per partition and in all in the next fetches, within the
        configured limits (a record batch larger than them still comes, alone)."""
        kafka_python.set_fetch_sizes(self.kafka, min(partition_bytes, self.limits[0]), min(total_bytes, self.limits[1]))

    def poll(self, timeout_ms: int) -> dict[TopicPartition, list[Any]]:
        """What one poll fetched for the assigned partitions, per partition: items whose `offset`
        is the last one fetched, not decoded yet (`records` decodes them). On the public-API path
        a codec error does not say its partition: it names the first one still read (not paused)."""
        try:
            polled = self.kafka.poll(timeout_ms=timeout_ms)
        except kafka_python.MissingCodecError:
            raise
        except UnsupportedCodecError as exc:
            tp = min(self.kafka.assignment() - self.kafka.paused())
            raise kafka_python.missing_codec_error(tp, self.kafka.position(tp), exc) from exc
        if self.fast:
            for items in polled.values():
                for fetched in items:
                    self.fetched_bytes += fetched.size
                    self.fetched_rows += len(fetched)
        return {tp: list(items) for tp, items in polled.items()}

    def records(self, polled: Mapping[TopicPartition, Sequence[Any]], ends: Mapping[TopicPartition, int]
                ) -> Records | None:
        """The rows of `poll` results below each partition's end, decoded together (None: no rows)."""
        if self.fast:
            return decode_fetches([(fetched, ends[tp]) for tp, items in polled.items() for fetched in items])
        listed = [record for tp, items in polled.items() for record in items if record.offset < ends[tp]]
        return listed_records(listed) if listed else None
