"""The direct write path: read tasks that write the table's Parquet files themselves.

With nothing between the source and a delta-rs sink (no transform, so no dead letters), a read
task decodes its Kafka ranges and writes the table's Parquet files in the same Python worker
(`TableFiles.write`), then yields one small row per file written (`FILES_SCHEMA`: the file's add
action). Spark carries those rows, not the records, to the sink: a `foreachBatch` function
(`synclib.delta.writer.DirectBatchCommit`) collects them to the driver, turns them back into add
actions (`add_actions`) and makes the row path's commit there, the batch's one Delta commit with
its application transaction and offsets; there are no sink tasks. A task that fails deletes the
files it wrote; a task killed or retried after writing, or a speculative duplicate, leaves files
no commit names (the commit takes only the rows of the attempts Spark's job returned), which a
full VACUUM deletes.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from deltalake.transaction import AddAction

from synclib.delta import parquet
from synclib.delta.table import DATE_COLUMN

# One row per Parquet file a read task wrote: its add action.
FILES_SCHEMA = pa.schema([
    ("path", pa.string()), ("size", pa.int64()), ("partitionValues", pa.string()),
    ("modificationTime", pa.int64()), ("stats", pa.string()),
])
# Reader options naming the table (lower case: Spark's data source options are case-insensitive).
_PATH, _SCHEMA, _PARTITION_BY = "synclib.direct.path", "synclib.direct.schema", "synclib.direct.partitionby"
OPTIONS = (_PATH, _SCHEMA, _PARTITION_BY)


@dataclass(frozen=True)
class TableFiles:
    """The table a read task writes into: its location, Arrow schema and partition columns.
    A `DATE_COLUMN` in the schema and not in the source's rows is the UTC date of `timestamp`."""

    path: str
    schema: pa.Schema
    partition_by: tuple[str, ...]

    def options(self) -> dict[str, str]:
        """This target as reader options (`from_options` reads them back on the executors)."""
        return {_PATH: self.path, _SCHEMA: base64.b64encode(self.schema.serialize().to_pybytes()).decode(),
                _PARTITION_BY: json.dumps(list(self.partition_by))}

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> TableFiles:
        missing = [name for name in OPTIONS if not options.get(name)]
        if missing:
            raise ValueError(f"the direct write path needs reader options {', '.join(missing)}")
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(options[_SCHEMA])))
        return cls(options[_PATH], schema, tuple(json.loads(options[_PARTITION_BY])))

    def _table_rows(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        if DATE_COLUMN in self.schema.names and DATE_COLUMN not in batch.schema.names:
            # Spark's utc_date: the timestamp's UTC calendar day (floor, so before 1970 too).
            batch = batch.append_column(DATE_COLUMN, batch.column("timestamp").cast(pa.date32()))
        return batch

    def write(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Write a read task's records as the table's files; yield their add actions as rows."""
        adds = parquet.write_files((self._table_rows(b) for b in batches), self.path, self.schema,
                                   self.partition_by)
        if adds:
            yield pa.RecordBatch.from_pylist(
                [{"path": a.path, "size": a.size, "partitionValues": json.dumps(a.partition_values),
                  "modificationTime": a.modification_time, "stats": a.stats} for a in adds],
                schema=FILES_SCHEMA)


def add_actions(batches: Iterable[pa.RecordBatch]) -> list[AddAction]:
    """The add actions in rows of `FILES_SCHEMA`."""
    return [AddAction(path=row["path"], size=row["size"], partition_values=json.loads(row["partitionValues"]),
                      modification_time=row["modificationTime"], data_change=True, stats=row["stats"])
            for batch in batches for row in batch.to_pylist()]

