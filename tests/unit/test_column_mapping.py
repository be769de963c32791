"""Column mapping in synclib's files: physical names and field ids, nested ones too, and rows
viewed under them without a copy (`synclib.delta.column_mapping`)."""

from __future__ import annotations

import pyarrow as pa

from synclib.delta.column_mapping import FIELD_ID, PHYSICAL_NAME, is_mapped, logical_schema, physical_schema, view_as

HEADER = pa.struct([pa.field("key", pa.string(), metadata={PHYSICAL_NAME: "col-k", FIELD_ID: "3"}),
                    pa.field("value", pa.binary(), metadata={PHYSICAL_NAME: "col-v", FIELD_ID: "4"})])
ANNOTATED = pa.schema([
    pa.field("offset", pa.int64(), metadata={PHYSICAL_NAME: "col-o", FIELD_ID: "1"}),
    pa.field("headers", pa.list_(HEADER), metadata={PHYSICAL_NAME: "col-h", FIELD_ID: "2"}),
])


def test_the_file_schema_has_the_physical_names_and_parquet_field_ids_nested_too() -> None:
    physical = physical_schema(ANNOTATED)

    assert physical.names == ["col-o", "col-h"]
    assert physical.field("col-o").metadata == {b"PARQUET:field_id": b"1"}
    element = physical.field("col-h").type.value_type
    assert [f.name for f in element] == ["col-k", "col-v"]
    assert element.field("col-v").metadata == {b"PARQUET:field_id": b"4"}


def test_rows_viewed_under_the_physical_schema_keep_every_value() -> None:
    rows = pa.table({"offset": [7, 8], "headers": [[{"key": "a", "value": b"x"}], None]},
                    schema=logical_schema(ANNOTATED))

    physical = view_as(rows, physical_schema(ANNOTATED))

    assert physical.column("col-h").to_pylist() == [[{"col-k": "a", "col-v": b"x"}], None]
    assert view_as(physical, logical_schema(ANNOTATED)).equals(rows)


def test_a_schema_without_a_mapping_is_written_as_it_is() -> None:
    plain = logical_schema(ANNOTATED)

    assert not is_mapped(plain) and is_mapped(ANNOTATED)
    assert physical_schema(plain) is plain
