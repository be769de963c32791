"""The Delta table features each write path honours, and the check that refuses a table a path
would write wrongly.

A Delta table's protocol names what its readers and writers must do: legacy protocol versions
imply a fixed set of features, protocol (3, 7) lists them (`readerFeatures`, `writerFeatures`).
A writer that does not implement one of them must not write to the table (Delta's protocol,
"Table Features"). synclib has two kinds of writers:

- **synclib's own Parquet files** (`synclib.delta.parquet`: the delta-rs writer's tasks and the
  direct write path's read tasks), committed by deltalake or appended to the log by synclib:
  what they honour is what the files honour (column mapping: physical names and field ids,
  `synclib.delta.layout`) and what deltalake's commit accepts, measured with deltalake 1.6;
- **Delta's own writer** (delta-spark), which checks the protocol itself; synclib lists the
  features Delta 4.4 writes, so that a table needing another one is refused in one line before
  a batch instead of failing inside one.

Some features ask nothing of an append unless the table uses them: a column with an invariant,
a generation expression or an identity, or a CHECK constraint, needs the writer to compute or
enforce it, which synclib's files do not; such a table is refused for them only while it uses
one. The check runs before the stream starts (`check_writable`, with the path `auto` would pick)
and again before each deltalake commit of a batch whose table changed under the running job
(`refusal`): a refused batch commits nothing and deletes its files, and is replayed once a
writer that honours the table runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from synclib.delta import column_mapping
from synclib.settings import ConfigError
from synclib.settings.values import DELTA_RS, DELTA_SPARK

# Features each legacy protocol version implies (Delta's PROTOCOL.md, "Table Features").
_LEGACY_WRITER_FEATURES = {
    2: ("appendOnly", "invariants"),
    3: ("checkConstraints",),
    4: ("changeDataFeed", "generatedColumns"),
    5: ("columnMapping",),
    6: ("identityColumns",),
}
_LEGACY_READER_FEATURES = {2: ("columnMapping",)}
_TABLE_FEATURES_READER, _TABLE_FEATURES_WRITER = 3, 7

# What an append by synclib's Parquet files and deltalake 1.6's commit honours: features that ask
# nothing of an append (appendOnly, changeDataFeed, deletionVectors, timestampNtz), those that ask
# something only while in use (`uses`), and column mapping, written with the table's physical
# names. deltalake 1.6 refuses to commit to tables with domainMetadata (so rowTracking and
# clustering), inCommitTimestamp, typeWidening, vacuumProtocolCheck and allowColumnDefaults; it
# commits to v2Checkpoint tables but writes classic checkpoints, so synclib refuses those too.
# tests/spark/test_features.py holds this list to deltalake's behaviour on tables Spark created.
SYNCLIB_FILES = frozenset({
    "appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns", "identityColumns",
    "columnMapping", "deletionVectors", "timestampNtz",
})
# What Delta 4.4's own writer implements (`TableFeature.allSupportedFeaturesMap`, held to the
# session's Delta by tests/spark/test_features.py); on Databricks the runtime's Delta checks itself.
DELTA_4_4 = frozenset({
    "appendOnly", "invariants", "checkConstraints", "changeDataFeed", "generatedColumns", "identityColumns",
    "columnMapping", "deletionVectors", "timestampNtz", "vacuumProtocolCheck", "allowColumnDefaults",
    "rowTracking", "domainMetadata", "clustering", "inCommitTimestamp", "v2Checkpoint", "typeWidening",
    "typeWidening-preview", "icebergCompatV1", "icebergCompatV2", "icebergCompatV3", "variantType",
    "variantType-preview", "variantShredding", "variantShredding-preview", "checkpointProtection",
    "materializePartitionColumns", "catalogManaged", "coordinatedCommits-preview", "adaptiveMetadata-preview",
    "geospatial", "geospatial-dev",
})
# delta-spark's direct write path (`synclib.delta.spark_direct`): synclib's Parquet files committed
# by Delta 4.4's own transaction, which does for any writer what deltalake refuses (row ids, domain
# metadata, in-commit timestamps, v2 checkpoints, the vacuum protocol check); not what the files
# would have to carry (Iceberg compatibility, variants, materialized partition columns, ...).
SPARK_DIRECT = "delta-spark direct"
SPARK_DIRECT_FILES = SYNCLIB_FILES | {
    "allowColumnDefaults", "rowTracking", "domainMetadata", "clustering", "inCommitTimestamp", "v2Checkpoint",
    "typeWidening", "typeWidening-preview", "vacuumProtocolCheck", "checkpointProtection",
}
HONOURED: dict[str, frozenset[str]] = {DELTA_RS: SYNCLIB_FILES, DELTA_SPARK: DELTA_4_4,
                                       SPARK_DIRECT: SPARK_DIRECT_FILES}
_FILES_WRITTEN_BY_SYNCLIB = (DELTA_RS, SPARK_DIRECT)


@dataclass(frozen=True)
class TableFeatures:
    """What a table's protocol asks of its writers: the features it requires, and those of them
    it uses in a way an append must compute or enforce (`in_use`)."""

    path: str
    required: frozenset[str]
    in_use: frozenset[str]

    @classmethod
    def of(cls, path: str, table: DeltaTable) -> TableFeatures:
        """The features of `table` (at `path`) at its loaded version."""
        protocol = table.protocol()
        required = set(_implied(protocol.min_writer_version, _LEGACY_WRITER_FEATURES, _TABLE_FEATURES_WRITER))
        required |= set(_implied(protocol.min_reader_version, _LEGACY_READER_FEATURES, _TABLE_FEATURES_READER))
        required |= set(protocol.writer_features or ()) | set(protocol.reader_features or ())
        metadata = table.metadata()
        return cls(path, frozenset(required),
                   frozenset(uses(metadata.configuration, json.loads(table.schema().to_json()))) & required)

    def refused_by(self, engine: str) -> list[str]:
        """The features `engine`'s writer does not honour, sorted; empty when it may write."""
        honoured = {f.lower() for f in HONOURED[engine]}  # Delta matches feature names case-insensitively
        refused = {f for f in self.required if f.lower() not in honoured}
        if engine in _FILES_WRITTEN_BY_SYNCLIB:
            refused |= self.in_use
        return sorted(refused)


def _implied(version: int, legacy: Mapping[int, tuple[str, ...]], table_features: int) -> Iterator[str]:
    """The features a legacy protocol `version` implies (none from the table-features versions up:
    those list theirs)."""
    if version >= table_features:
        return
    for level, features in legacy.items():
        if version >= level:
            yield from features


def _fields(fields: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    """Every field of a Delta schema's JSON, nested ones included."""
    for field in fields:
        yield field
        data_type = field["type"]
        while isinstance(data_type, dict):
            if data_type.get("type") == "struct":
                yield from _fields(data_type["fields"])
                break
            data_type = data_type.get("elementType") or data_type.get("valueType")


def uses(configuration: Mapping[str, str | None], schema: Mapping[str, Any]) -> Iterator[str]:
    """The features the table uses in a way an append must compute or enforce."""
    if any(key.startswith("delta.constraints.") for key in configuration):
        yield "checkConstraints"
    for field in _fields(schema["fields"]):
        metadata = field.get("metadata") or {}
        if "delta.invariants" in metadata:
            yield "invariants"
        if "delta.generationExpression" in metadata:
            yield "generatedColumns"
        if any(key.startswith("delta.identity.") for key in metadata):
            yield "identityColumns"


class UnwritableTable(ConfigError):
    """A table the chosen writer must not write: its protocol asks for features the writer does not
    honour, or its columns or partitioning are not the stream's."""


def unwritable_in(message: str) -> str | None:
    """The line of an `UnwritableTable` raised inside a micro-batch, found in the failed query's
    message (which carries the Python exception's text); None when there is none."""
    match = re.search(rf"{UnwritableTable.__name__}: (.+)", message)
    return match.group(1).strip() if match else None


def refusal(features: TableFeatures, engine: str) -> UnwritableTable | None:
    """The one-line error for `engine` writing the table, or None when it may."""
    refused = features.refused_by(engine)
    if not refused:
        return None
    if engine == DELTA_RS and not features.refused_by(DELTA_SPARK):
        other = "sink.engine delta-spark writes it (Delta's jars on the classpath: ./spark-submit.sh has them)"
    else:
        other = "no engine of synclib writes it"
    return UnwritableTable(f"table {features.path} needs table features that {engine} does not write "
                           f"({', '.join(refused)}): nothing was written; {other}")


def check_writable(path: str, table: DeltaTable | None, engine: str) -> None:
    """Before a stream starts: raise `UnwritableTable` (one line) unless `engine` (delta-rs or
    delta-spark) honours every feature of the table at `path` (`table`: it opened; None: none yet)."""
    if table is None:
        return
    error = refusal(TableFeatures.of(path, table), engine)
    if error is not None:
        raise error


def refusal_of_files(path: str, table: DeltaTable, schema: pa.Schema) -> UnwritableTable | None:
    """Before a deltalake commit of synclib's files written for the annotated `schema`: the
    one-line error when the table, brought up to date, can no longer take them (a feature enabled
    while the job ran, a changed column mapping); None when it can."""
    error = refusal(TableFeatures.of(path, table), DELTA_RS)
    if error is None and not column_mapping.same_files(schema, table):
        error = UnwritableTable(f"table {path}'s column mapping changed while the job ran: the batch's files were "
                                f"written with other column names, so nothing was committed; a restart writes the "
                                f"batch again with the table's names")
    return error
