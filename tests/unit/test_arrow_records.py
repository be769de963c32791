"""The Arrow fetch decoder against kafka-python's own record parser, on the same bytes, and the
guards of the fast path (version, hook, self-check, codecs).

Record batches are built with kafka-python's record builder (no broker needed): keys and
values null, empty, short and long (multi-byte varints), headers, offset gaps, negative
timestamp deltas, compression, message formats v0/v1, and fetch positions inside a batch.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from typing import Any

import kafka
import kafka.codec
import pyarrow as pa
import pytest
from kafka.consumer.fetcher import Fetcher
from kafka.errors import CorruptRecordError
from kafka.structs import TopicPartition

from synclib.compat import kafka_python
from synclib.kafka import fetch_path
from synclib.kafka.arrow_records import FetchedRecords, arrow_partition_records, decode_fetches
from synclib.schema import HEADERS_TYPE, KAFKA_SCHEMA

TP = TopicPartition("events", 3)
NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4


def _blob(rng: random.Random) -> bytes | None:
    size = rng.choice([-1, 0, 1, 63, 64, 200, 8191, 8192, 20000])
    word = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 16)))
    return None if size < 0 else (word * size)[:size]  # compressible


def build(seed: int, batches: int, magic: int = 2, compression: int = NONE) -> bytes:
    """Concatenated record batches with random records, offset gaps between batches."""
    rng = random.Random(seed)
    out, offset = bytearray(), 0
    for _ in range(batches):
        skip = rng.randint(1, 5) if rng.random() < 0.3 else 0  # compacted away
        records, timestamps = [], []
        for _ in range(rng.choice([1, 2, 50, 300])):
            headers = [] if magic < 2 or rng.random() < 0.5 else [
                (f"h{i}", _blob(rng)) for i in range(rng.randint(1, 3))]
            timestamps.append(1_700_000_000_000 + rng.randint(-10**6, 10**9))
            records.append((_blob(rng), _blob(rng), headers))
        out += kafka_python.build_batch(records, offset=offset, magic=magic, compression=compression,
                                        timestamps=timestamps, skip=skip)
        offset += skip + len(records)
    return bytes(out)


def expected(data: bytes, fetch_offset: int, with_headers: bool) -> list[dict[str, Any]]:
    rows = []
    for r in kafka_python.parse(data, TP, fetch_offset).records:
        row = {"key": r.key, "value": r.value, "topic": r.topic, "partition": r.partition,
               "offset": r.offset, "timestamp": (-1 if r.timestamp is None else r.timestamp) * 1000,
               "timestampType": max(r.timestamp_type or 0, 0)}
        if with_headers:
            row["headers"] = [{"key": k, "value": v} for k, v in r.headers] or None  # as Spark
        rows.append(row)
    return rows


def decoded(data: bytes, fetch_offset: int, with_headers: bool) -> tuple[kafka_python.Parsed, list[dict[str, Any]]]:
    parsed = kafka_python.parse(data, TP, fetch_offset, arrow_partition_records())
    assert len(parsed.records) <= 1 and all(isinstance(i, FetchedRecords) for i in parsed.records)
    records = decode_fetches([(parsed.records[0], parsed.next_fetch_offset)]) if parsed.records else None
    if records is None:
        return parsed, []
    assert records.batch.schema.equals(KAFKA_SCHEMA)
    columns = records.batch.columns
    if with_headers:
        columns = [*columns, records.headers(0, records.batch.num_rows, HEADERS_TYPE)]
    table = pa.Table.from_arrays(columns, names=KAFKA_SCHEMA.names + (["headers"] if with_headers else []))
    table = table.set_column(5, "timestamp", table["timestamp"].cast(pa.int64()))
    return parsed, table.to_pylist()


@pytest.mark.parametrize("magic,compression", [(2, NONE), (2, GZIP), (2, SNAPPY), (2, LZ4), (2, ZSTD),
                                               (1, NONE), (0, GZIP)])
@pytest.mark.parametrize("seed", [1, 2])
def test_same_records_as_kafka_python(magic: int, compression: int, seed: int) -> None:
    data = build(seed, batches=6, magic=magic, compression=compression)
    if compression != NONE:
        assert len(data) < len(build(seed, batches=6, magic=magic)) / 2, "the batches went out uncompressed"
    offsets = [r.offset for r in kafka_python.parse(data, TP, 0).records]
    for fetch_offset in sorted({0, 1, offsets[len(offsets) // 2], offsets[-1], offsets[-1] + 1}):
        for with_headers in (False, True):
            parsed, rows = decoded(data, fetch_offset, with_headers)
            assert rows == expected(data, fetch_offset, with_headers)
            assert parsed.next_fetch_offset > offsets[-1]
            assert parsed.drained  # the fetcher may fetch this partition again


def test_a_polls_responses_decode_together_as_each_alone_cut_at_their_ends() -> None:
    """Several partitions' fetch responses (v2 and v1, fetch offsets inside batches) decoded in
    one pass give each partition's rows from its fetch offset to its end, in the order given."""
    responses = []
    for index, (seed, magic) in enumerate([(5, 2), (6, 1), (7, 2), (8, 2)]):
        tp = TopicPartition("events" if index % 2 else "other", index)
        data = build(seed, batches=3, magic=magic, compression=GZIP if index == 2 else NONE)
        offsets = [r.offset for r in kafka_python.parse(data, tp, 0).records]
        fetch_offset, end = offsets[len(offsets) // 4], offsets[len(offsets) * 3 // 4]
        responses.append((tp, data, fetch_offset, end))
    fetches, wanted = [], []
    for tp, data, fetch_offset, end in responses:
        fetches.append((kafka_python.parse(data, tp, fetch_offset, arrow_partition_records()).records[0], end))
        wanted += [(r.topic, r.partition, r.offset, r.key, r.value, [{"key": k, "value": v} for k, v in r.headers]
                    or None) for r in kafka_python.parse(data, tp, fetch_offset).records if r.offset < end]
    records = decode_fetches(fetches)
    assert records is not None
    rows = records.batch.num_rows
    got = records.batch.to_pylist()
    headers = records.headers(0, rows, HEADERS_TYPE).to_pylist()
    assert [(r["topic"], r["partition"], r["offset"], r["key"], r["value"], h)
            for r, h in zip(got, headers, strict=True)] == wanted
    assert len({r[1] for r in wanted}) == 4 and any(r[5] for r in wanted)
    assert decode_fetches([(fetched, fetched.fetch_offset) for fetched, _ in fetches]) is None  # empty ranges


def build_transactions(seed: int) -> tuple[bytes, list[kafka_python.AbortedTransaction], int]:
    """Interleaved transactions of two producers, committed or aborted, plain batches between
    them, the partition ending with a marker; the fetch response's aborted-transaction list; the
    partition's end."""
    rng = random.Random(seed)
    out, offset, aborted = bytearray(), 0, []
    open_since: dict[int, int] = {}
    for _ in range(12):
        producer_id = rng.choice([1, 2, -1])
        count = rng.choice([1, 3, 40])
        out += kafka_python.build_batch([(_blob(rng), _blob(rng), [("p", str(producer_id).encode())])] * count,
                                        offset=offset, producer_id=producer_id, compression=rng.choice([NONE, ZSTD]))
        if producer_id >= 0:
            open_since.setdefault(producer_id, offset)
        offset += count
        for ending, first in sorted(open_since.items()):
            if rng.random() < 0.5:
                commit = rng.random() < 0.5
                out += kafka_python.build_marker(offset=offset, producer_id=ending, commit=commit)
                if not commit:
                    aborted.append(kafka_python.AbortedTransaction(ending, first))
                offset += 1
                del open_since[ending]
    for ending in sorted(open_since):
        out += kafka_python.build_marker(offset=offset, producer_id=ending, commit=False)
        aborted.append(kafka_python.AbortedTransaction(ending, open_since[ending]))
        offset += 1
    return bytes(out), sorted(aborted, key=lambda a: a.first_offset), offset


@pytest.mark.parametrize("isolation_level", ["read_uncommitted", "read_committed"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_transactions_and_markers_as_kafka_python(isolation_level: str, seed: int) -> None:
    data, aborted, end = build_transactions(seed)
    assert aborted, "the layout should abort something"
    offsets = [r.offset for r in kafka_python.parse(data, TP, 0).records]
    for fetch_offset in sorted({0, offsets[len(offsets) // 3], offsets[-1], offsets[-1] + 1}):
        reference = kafka_python.parse(data, TP, fetch_offset, isolation_level=isolation_level, aborted=aborted)
        fast = kafka_python.parse(data, TP, fetch_offset, arrow_partition_records(), isolation_level=isolation_level,
                                  aborted=aborted)
        records = decode_fetches([(fast.records[0], end)]) if fast.records else None
        got = records.batch.to_pylist() if records is not None else []
        assert [(r["offset"], r["key"], r["value"]) for r in got] == [
            (r.offset, r.key, r.value) for r in reference.records]
        assert fast.next_fetch_offset == reference.next_fetch_offset == end  # past the final marker
    if isolation_level == "read_committed":
        kept = {r.offset for r in kafka_python.parse(data, TP, 0, isolation_level=isolation_level,
                                                      aborted=aborted).records}
        assert kept < set(offsets)  # aborted records dropped


def test_corrupt_batch_fails_the_crc_check() -> None:
    data = bytearray(build(3, batches=1))
    data[-5] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        kafka_python.parse(bytes(data), TP, 0, arrow_partition_records())


# --- the guards --------------------------------------------------------------------------------

@pytest.fixture
def fresh_process() -> Iterator[None]:
    """This process as if no consumer had been created yet: the self-check and warning run anew."""
    fetch_path.fast_path_problem.cache_clear()
    fetch_path._warned.clear()
    yield
    fetch_path.fast_path_problem.cache_clear()
    fetch_path._warned.clear()


def test_the_installed_kafka_python_is_the_tested_one_and_passes_the_self_check(fresh_process: None) -> None:
    assert kafka_python.version_problem() is None, kafka_python.installed_version()
    assert kafka_python.hook_problem() is None
    assert fetch_path.self_check() is None
    assert fetch_path.fast_path_problem() is None


def test_an_unknown_version_is_not_hooked(monkeypatch: pytest.MonkeyPatch, fresh_process: None) -> None:
    monkeypatch.setattr(kafka, "__version__", "3.1.0")
    assert fetch_path.fast_path_problem() == (
        "kafka-python 3.1.0 is not the version the Arrow reader is tested with (3.0.x)")


def test_a_missing_hook_is_not_used(monkeypatch: pytest.MonkeyPatch, fresh_process: None) -> None:
    monkeypatch.delattr(Fetcher.PartitionRecords, "_unpack_records")
    assert fetch_path.fast_path_problem() == "kafka-python's fetcher internals lack _unpack_records"


def test_a_consumer_without_the_fetcher_is_not_hooked() -> None:
    class NotAConsumer:
        _fetcher = object()

    assert kafka_python.install(NotAConsumer(), arrow_partition_records()) == (
        "kafka-python's consumer has no fetcher with a PartitionRecords class")


def test_a_decoder_that_disagrees_fails_the_self_check(monkeypatch: pytest.MonkeyPatch, fresh_process: None) -> None:
    """A kafka-python change that alters the batches the hook sees (here: timestamps) is caught."""
    real = kafka_python.partition_records_class

    def shifted_timestamps(decode: kafka_python.Decoder) -> type:
        def decode_shifted(tp: TopicPartition, pieces: Any, fetch_offset: int) -> Any:
            return decode(tp, [p if isinstance(p, list) else kafka_python.BatchRecords(
                p.payload, p.rows, p.base_offset, p.first_timestamp + 1, p.max_timestamp, p.timestamp_type,
                p.last_offset)
                for p in pieces], fetch_offset)
        return real(decode_shifted)

    arrow_partition_records.cache_clear()
    monkeypatch.setattr(kafka_python, "partition_records_class", shifted_timestamps)
    try:
        assert fetch_path.fast_path_problem() == "the self-check decoded different records than kafka-python's parser"
    finally:
        arrow_partition_records.cache_clear()


def test_a_missing_codec_library_names_partition_offset_codec_and_package(monkeypatch: pytest.MonkeyPatch) -> None:
    data = build(4, batches=2) + kafka_python.build_batch([(b"k", b"v" * 500, [])] * 3, offset=900, compression=SNAPPY)
    monkeypatch.setattr(kafka.codec, "has_snappy", lambda: False)  # what kafka-python sees without the library
    with pytest.raises(kafka_python.MissingCodecError) as error:
        kafka_python.parse(data, TP, 0, arrow_partition_records())
    assert str(error.value) == "MissingCodecError: " + (
        "events[3] offset 900: cannot decode a record batch compressed with snappy: install the Python "
        "package 'python-snappy' where the job runs (synclib's package dependencies include it)")


def test_the_warning_is_logged_once(caplog: pytest.LogCaptureFixture, fresh_process: None) -> None:
    with caplog.at_level(logging.WARNING, logger=fetch_path.__name__):
        for _ in range(3):
            fetch_path._warn_once("kafka-python 9.9 is not the version the Arrow reader is tested with (3.0.x)")
    assert [r.getMessage() for r in caplog.records] == [
        "synclib's Arrow reader is off: kafka-python 9.9 is not the version the Arrow reader is tested with "
        "(3.0.x). Reading through kafka-python's public API instead: the same records, several times the "
        "CPU per record. kafka-python 3.0.x (the version synclib pins) restores it."]
