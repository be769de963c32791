"""The configuration reference: markdown tables of every setting, rendered from the model.

A setting's row is its dotted YAML key, its type (the `Kind` of its value type, or the choices
of a `Literal`), its default, its Spark option (`serialization_alias`) and its meaning (the
docstring below the field). `python -m synclib.settings.reference` prints the tables;
`python -m synclib.settings.reference docs/configuration.md` rewrites them between the page's
marker comments.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Annotated, Literal, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from synclib import doc_tables
from synclib.settings.job import ForwarderConfig
from synclib.settings.model import KeyPath, nested, union_members
from synclib.settings.source import SourceConfig, SourceOptions
from synclib.settings.values import Kind

COMMAND = "python -m synclib.settings.reference docs/configuration.md"
_UNITS = (("h", 3600.0), ("m", 60.0), ("s", 1.0))


def settings(model: type[BaseModel], prefix: KeyPath = ()) -> Iterator[tuple[KeyPath, FieldInfo]]:
    """Every setting below `model`, depth first in the model's order, with its dotted key."""
    for name, field in model.model_fields.items():
        section = nested(model, (name,))
        if isinstance(section, type) and issubclass(section, BaseModel):
            yield from settings(section, (*prefix, name))
        else:
            yield (*prefix, name), field


def kind(field: FieldInfo) -> Kind:
    """What the setting's value is, for the type column."""
    annotation, metadata = field.annotation, list(field.metadata)
    annotation = next((a for a in union_members(annotation) if a is not type(None)), annotation)
    if get_origin(annotation) is Annotated:
        annotation, *more = get_args(annotation)
        metadata += more
    named = next((m for m in metadata if isinstance(m, Kind)), None)
    if named is not None:
        return named
    if get_origin(annotation) is Literal:
        return Kind("one of " + ", ".join(f"`{choice}`" for choice in get_args(annotation)))
    if get_origin(annotation) is dict:
        return Kind("mapping")
    raise TypeError(f"{annotation} has no Kind: add one to its type in synclib.settings.values")


def default(field: FieldInfo, of: Kind) -> str:
    """The default as written in YAML, "required", or "-" (unset)."""
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if value is None:
        return "-"
    if of.duration:
        return f"`{_duration(value)}`"
    return f"`{value}`" if isinstance(value, str) else f"`{json.dumps(value)}`"


def _duration(seconds: float) -> str:
    """`seconds` in the largest unit that writes it whole: "5m", "168h", "500ms"."""
    unit, size = next(((unit, size) for unit, size in _UNITS if seconds >= size and seconds % size == 0),
                      ("ms", 0.001))
    return f"{seconds / size:g}{unit}"


def meaning(key: KeyPath, field: FieldInfo) -> str:
    """The field's docstring on one line, as a table cell."""
    if not field.description:
        raise ValueError(f"{'.'.join(key)} has no docstring: write its meaning below the field")
    return " ".join(field.description.split()).replace("|", "\\|")


def config_table() -> str:
    """The YAML keys of the forwarder's configuration file."""
    lines = ["| key | type | default | Spark option | meaning |", "|---|---|---|---|---|"]
    for key, field in settings(ForwarderConfig):
        of = kind(field)
        option = f"`{field.serialization_alias}`" if field.serialization_alias else ""
        lines.append(f"| `{'.'.join(key)}` | {of.name} | {default(field, of)} | {option} | {meaning(key, field)} |")
    return "\n".join(lines)


def reader_table() -> str:
    """The options of the `synchronized_kafka` reader that are no `source:` key."""
    lines = ["| option | type | default | meaning |", "|---|---|---|---|"]
    for key, field in settings(SourceOptions):
        if field.serialization_alias and key[-1] not in SourceConfig.model_fields:
            of = kind(field)
            lines.append(f"| `{field.serialization_alias}` | {of.name} | {default(field, of)} "
                         f"| {meaning(key, field)} |")
    return "\n".join(lines)


TABLES = {"configuration": config_table, "reader options": reader_table}


def update(text: str) -> str:
    """`text` with each table between its marker comments rendered anew."""
    return doc_tables.update(text, TABLES, COMMAND)


def main(argv: list[str] | None = None) -> None:
    doc_tables.main("python -m synclib.settings.reference", "Print the configuration reference (markdown tables).",
                    TABLES, COMMAND, argv)


if __name__ == "__main__":
    main()
