"""Parquet files of a Delta table and their Delta add actions (statistics included).

Used by the sink's write tasks (executor side) and by maintenance compaction (driver or
`python -m synclib maintain`); needs pyarrow and deltalake only, no Spark.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake.transaction import AddAction
from pyarrow import fs

from synclib import locations
from synclib.delta import column_mapping

_STRING_STATS_PREFIX = 32
_NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
# Parquet layout: rows are buffered per file into row groups of about this size, and the
# payload columns (unique per row) get neither dictionary encoding nor Parquet statistics:
# both only cost CPU there (Delta keeps its own file statistics).
ROW_GROUP_BYTES = 16 << 20
_PAYLOAD_COLUMNS = ("value", "headers")


def _has_bounds(data_type: pa.DataType) -> bool:
    return bool(pa.types.is_integer(data_type) or pa.types.is_string(data_type)
                or pa.types.is_date32(data_type) or pa.types.is_timestamp(data_type))


def _timestamp_stat(micros: int, round_up: bool) -> str:
    millis = -(-micros // 1000) if round_up else micros // 1000
    moment = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=millis)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class FileStats:
    """Delta `stats` of one file: numRecords, nullCount (non-struct columns), min/max.

    Bounds are kept for integers, strings (min cut to 32 chars, max dropped when longer),
    dates and timestamps (millisecond precision, max rounded up); binary has none.
    """

    def __init__(self, schema: pa.Schema) -> None:
        self.rows = 0
        self._nulls = {f.name: 0 for f in schema if not pa.types.is_struct(f.type)}
        self._bounded = {f.name: f.type for f in schema if _has_bounds(f.type)}
        self._bounds: dict[str, tuple[Any, Any]] = {}

    def update(self, table: pa.Table) -> None:
        self.rows += table.num_rows
        for name in self._nulls:
            self._nulls[name] += table[name].null_count
        for name, data_type in self._bounded.items():
            column = table[name]
            if pa.types.is_timestamp(data_type):
                column = column.cast(pa.int64())
            low, high = pc.min_max(column).as_py().values()
            if low is None:
                continue
            if name in self._bounds:
                old_low, old_high = self._bounds[name]
                low, high = min(low, old_low), max(high, old_high)
            self._bounds[name] = (low, high)

    def to_json(self) -> str:
        mins: dict[str, Any] = {}
        maxes: dict[str, Any] = {}
        for name, (low, high) in self._bounds.items():
            data_type = self._bounded[name]
            if pa.types.is_timestamp(data_type):
                mins[name], maxes[name] = _timestamp_stat(low, False), _timestamp_stat(high, True)
            elif pa.types.is_date32(data_type):
                mins[name], maxes[name] = low.isoformat(), high.isoformat()
            elif pa.types.is_string(data_type):
                mins[name] = low[:_STRING_STATS_PREFIX]
                if len(high) <= _STRING_STATS_PREFIX:
                    maxes[name] = high
            else:
                mins[name], maxes[name] = low, high
        return json.dumps({"numRecords": self.rows, "minValues": mins, "maxValues": maxes,
                           "nullCount": self._nulls})


def partition_value(value: Any) -> str | None:
    """A partition value as Delta's add action records it (a string, None for null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.date):
        return value.isoformat()
    return str(value)


def _directory_name(value: str | None) -> str:
    """A partition value in a directory name: all but RFC 3986 unreserved characters
    percent-encoded, as delta-rs does (Spark's Hive escaping keeps more, e.g. spaces)."""
    return _NULL_PARTITION if value is None else quote(value, safe="")


class ParquetPart:
    """One Parquet file being written under the table root, in its Hive partition directory."""

    def __init__(self, filesystem: fs.FileSystem, root: str, schema: pa.Schema,
                 partition_values: Mapping[str, str | None], prefix: str = "part") -> None:
        directory = "".join(f"{k}={_directory_name(v)}/" for k, v in partition_values.items())
        self._relative = f"{directory}{prefix}-{uuid.uuid4()}.zstd.parquet"
        self._filesystem = filesystem
        self._full_path = f"{root}/{self._relative}"
        self._partition_values = dict(partition_values)
        if isinstance(filesystem, fs.LocalFileSystem):
            filesystem.create_dir(f"{root}/{directory}".rstrip("/"), recursive=True)
        indexed = [name for name in schema.names if name not in _PAYLOAD_COLUMNS]
        self._stream = filesystem.open_output_stream(self._full_path)
        self._writer = pq.ParquetWriter(self._stream, schema, compression="zstd",
                                        use_dictionary=indexed, write_statistics=indexed)
        self._stats = FileStats(schema)
        self._pending: list[pa.Table] = []
        self._pending_bytes = 0

    def write(self, table: pa.Table) -> None:
        self._stats.update(table)
        self._pending.append(table)
        self._pending_bytes += table.nbytes
        if self._pending_bytes >= ROW_GROUP_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            rows = pa.concat_tables(self._pending)
            self._writer.write_table(rows, row_group_size=rows.num_rows)
            self._pending, self._pending_bytes = [], 0

    def discard(self) -> None:
        self._pending = []
        self._writer.close()
        self._stream.close()
        with contextlib.suppress(FileNotFoundError):
            self._filesystem.delete_file(self._full_path)

    def close(self, data_change: bool = True) -> AddAction:
        """Finish the file; its add action (`data_change` False for a rewrite of existing rows).
        Its size is what was written and its time now: no request to read them back."""
        self._flush()
        self._writer.close()
        size = self._stream.tell()
        self._stream.close()
        # deltalake percent-encodes the path itself when it writes the log.
        return AddAction(path=self._relative, size=size,
                         partition_values=self._partition_values, modification_time=int(time.time() * 1000),
                         data_change=data_change, stats=self._stats.to_json())


def split_partitions(table: pa.Table, partition_by: Sequence[str]
                      ) -> Iterator[tuple[tuple[str | None, ...], pa.Table]]:
    """(partition values, rows without the partition columns) for each partition in `table`."""
    if not partition_by:
        yield (), table
        return
    keys = table.select(list(partition_by)).group_by(list(partition_by), use_threads=False)
    combos = keys.aggregate([]).to_pylist()
    if len(combos) == 1:  # the usual case (one date per batch): no copy
        yield tuple(partition_value(combos[0][name]) for name in partition_by), table.drop_columns(list(partition_by))
        return
    for combo in combos:
        mask = None
        for name in partition_by:
            value = combo[name]
            match = pc.is_null(table[name]) if value is None else pc.equal(table[name], value)
            mask = match if mask is None else pc.and_(mask, match)
        values = tuple(partition_value(combo[name]) for name in partition_by)
        yield values, table.filter(mask).drop_columns(list(partition_by))


def write_files(batches: Iterable[pa.RecordBatch], table_path: str, schema: pa.Schema,
                partition_by: Sequence[str]) -> list[AddAction]:
    """Write `batches` (cast to the table's `schema`) as Parquet files under the table at
    `table_path`, one per partition value; their add actions. On failure nothing is left.
    A `schema` annotated with a column mapping (`synclib.delta.column_mapping.annotate`) is
    written with the table's physical names and field ids, its statistics and partition values
    keyed by them."""
    filesystem, root = locations.filesystem(table_path)
    logical = column_mapping.logical_schema(schema)
    file_schema = column_mapping.physical_schema(pa.schema([f for f in schema if f.name not in partition_by]))
    names = column_mapping.physical_names(schema)
    physical_keys = [names[name] for name in partition_by]
    parts: dict[tuple[str | None, ...], ParquetPart] = {}
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            table = pa.Table.from_batches([batch]).cast(logical)
            for values, rows in split_partitions(table, partition_by):
                if values not in parts:
                    parts[values] = ParquetPart(filesystem, root, file_schema,
                                                dict(zip(physical_keys, values, strict=True)))
                parts[values].write(column_mapping.view_as(rows, file_schema))
    except BaseException:
        for part in parts.values():
            part.discard()
        raise
    return [part.close() for part in parts.values()]


def delete_files(table_path: str, files: Iterable[AddAction]) -> None:
    filesystem, root = locations.filesystem(table_path)
    for add in files:
        with contextlib.suppress(FileNotFoundError):
            filesystem.delete_file(f"{root}/{add.path}")
