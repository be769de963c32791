"""The source's output schema (Spark's Kafka source schema), defined once, in Arrow.

The Kafka decoder builds its columns in it; the Spark data source declares its Spark form,
`synclib.compat.pyspark.from_arrow_schema(output_schema(...))`.
"""

from __future__ import annotations

import pyarrow as pa

KAFKA_SCHEMA = pa.schema([
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
    ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
])
# Spark's `headers array<struct<key: string, value: binary>>`.
HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def output_schema(include_headers: bool) -> pa.Schema:
    """The columns the source gives: `KAFKA_SCHEMA`, then `headers` when asked for."""
    return KAFKA_SCHEMA.append(pa.field("headers", HEADERS_TYPE)) if include_headers else KAFKA_SCHEMA
