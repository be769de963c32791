"""Delta column mapping in synclib's Parquet files: the physical column names and field ids a
column-mapped table assigns.

A table with `delta.columnMapping.mode` `name` or `id` keeps each column's logical name in its
schema and the name its data files use in the field's metadata
(`delta.columnMapping.physicalName`, e.g. `col-5f2c...`), with a field id
(`delta.columnMapping.id`); readers resolve a file's columns by physical name (mode `name`) or
field id (mode `id`), and the add actions' statistics and partition values are keyed by physical
name. A file written with the logical names reads back as nulls.

synclib carries the mapping in the Arrow schema its writers get: each field annotated with the
table's physical name and id (`annotate`, once where the stream starts); the writers turn that
into the file schema (`physical_schema`: renamed, with the `PARQUET:field_id` pyarrow writes as
the Parquet field id) and view the rows as it (`view_as`, no copy). A schema without
annotations is written by its logical names, as a table without column mapping wants.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

MODE = "delta.columnMapping.mode"
PHYSICAL_NAME = "delta.columnMapping.physicalName"
FIELD_ID = "delta.columnMapping.id"
_PARQUET_FIELD_ID = b"PARQUET:field_id"
_MAPPED_MODES = ("name", "id")


def mode(table: DeltaTable) -> str:
    """The table's column mapping mode: `none`, `name` or `id`."""
    return str(table.metadata().configuration.get(MODE) or "none")


def annotate(schema: pa.Schema, table: DeltaTable | None) -> pa.Schema:
    """`schema` with each field (nested ones too) annotated with the physical name and id that
    column-mapped `table` assigns it; `schema` unchanged without a table or column mapping."""
    if table is None or mode(table) not in _MAPPED_MODES:
        return schema
    delta_fields = json.loads(table.schema().to_json())["fields"]
    return pa.schema(_annotated_fields(schema, delta_fields), metadata=schema.metadata)


def _annotated_fields(fields: Iterable[pa.Field], delta_fields: list[Mapping[str, Any]]) -> list[pa.Field]:
    by_name = {f["name"]: f for f in delta_fields}
    annotated = []
    for field in fields:
        delta = by_name.get(field.name)
        if delta is None:
            raise ValueError(f"column {field.name!r} is not in the table's schema")
        metadata = delta.get("metadata") or {}
        annotations = {key.encode(): str(metadata[key]).encode() for key in (PHYSICAL_NAME, FIELD_ID)
                       if key in metadata}
        annotated.append(pa.field(field.name, _annotated_type(field.type, delta["type"]), field.nullable,
                                  {**(field.metadata or {}), **annotations}))
    return annotated


def _annotated_type(arrow: pa.DataType, delta: Any) -> pa.DataType:
    if isinstance(delta, dict) and pa.types.is_struct(arrow) and delta.get("type") == "struct":
        return pa.struct(_annotated_fields(list(arrow), delta["fields"]))
    if isinstance(delta, dict) and (pa.types.is_list(arrow) or pa.types.is_large_list(arrow)):
        element = arrow.value_field
        typed = element.with_type(_annotated_type(element.type, delta["elementType"]))
        return pa.list_(typed) if pa.types.is_list(arrow) else pa.large_list(typed)
    if isinstance(delta, dict) and pa.types.is_map(arrow):
        return pa.map_(arrow.key_field.with_type(_annotated_type(arrow.key_type, delta["keyType"])),
                       arrow.item_field.with_type(_annotated_type(arrow.item_type, delta["valueType"])))
    return arrow


def physical_name(field: pa.Field) -> str:
    """The name `field` has in the table's files (its logical name without column mapping)."""
    name: bytes = (field.metadata or {}).get(PHYSICAL_NAME.encode(), field.name.encode())
    return name.decode()


def physical_names(schema: pa.Schema) -> dict[str, str]:
    """Top-level logical name -> physical name."""
    return {field.name: physical_name(field) for field in schema}


def is_mapped(schema: pa.Schema) -> bool:
    """Whether `schema` carries a column mapping (`annotate`)."""
    return any(PHYSICAL_NAME.encode() in (field.metadata or {}) for field in schema)


def physical_schema(schema: pa.Schema) -> pa.Schema:
    """The file schema of rows of the annotated `schema`: physical names, Parquet field ids."""
    return pa.schema([_rebuilt(f, _physical) for f in schema]) if is_mapped(schema) else schema


def logical_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` without the annotations of `annotate`."""
    return pa.schema([_rebuilt(f, _logical) for f in schema])


def _rebuilt(field: pa.Field, rename: Callable[[pa.Field, pa.DataType], pa.Field]) -> pa.Field:
    """`field` with its nested fields rebuilt by `rename` first, then itself."""
    data_type = field.type
    if pa.types.is_struct(data_type):
        data_type = pa.struct([_rebuilt(f, rename) for f in data_type])
    elif pa.types.is_list(data_type):
        data_type = pa.list_(_rebuilt(data_type.value_field, rename))
    elif pa.types.is_large_list(data_type):
        data_type = pa.large_list(_rebuilt(data_type.value_field, rename))
    elif pa.types.is_map(data_type):
        data_type = pa.map_(_rebuilt(data_type.key_field, rename), _rebuilt(data_type.item_field, rename))
    return rename(field, data_type)


def _unannotated(field: pa.Field) -> dict[bytes, bytes]:
    return {k: v for k, v in (field.metadata or {}).items() if k not in (PHYSICAL_NAME.encode(), FIELD_ID.encode())}


def _physical(field: pa.Field, data_type: pa.DataType) -> pa.Field:
    metadata = _unannotated(field)
    field_id = (field.metadata or {}).get(FIELD_ID.encode())
    if field_id is not None:
        metadata[_PARQUET_FIELD_ID] = field_id
    return pa.field(physical_name(field), data_type, field.nullable, metadata or None)


def _logical(field: pa.Field, data_type: pa.DataType) -> pa.Field:
    return pa.field(field.name, data_type, field.nullable, _unannotated(field) or None)


def view_as(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """`table`'s rows under `schema` (the same types, nested ones too, under other names): a view,
    no copy (Arrow's cast would match struct fields by name and give nulls)."""
    if table.schema.equals(schema, check_metadata=True):
        return table
    columns = [pa.chunked_array([chunk.view(field.type) for chunk in column.chunks], type=field.type)
               for column, field in zip(table.columns, schema, strict=True)]
    return pa.Table.from_arrays(columns, schema=schema)


def same_files(schema: pa.Schema, table: DeltaTable) -> bool:
    """Whether files written for the annotated `schema` still are the table's files: the same
    physical names, nested ones too (a table upgraded to column mapping keeps each column's name as
    its physical name, so files written before the upgrade stay valid)."""
    current = annotate(logical_schema(schema), table)
    return _name_tree(physical_schema(schema)) == _name_tree(physical_schema(current))


def _name_tree(fields: Iterable[pa.Field]) -> list[Any]:
    tree: list[Any] = []
    for field in fields:
        data_type = field.type
        while pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
            data_type = data_type.value_type
        tree.append((field.name, _name_tree(data_type) if pa.types.is_struct(data_type) else None))
    return tree
