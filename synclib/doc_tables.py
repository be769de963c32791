"""Markdown tables rendered from the code into a documentation page, between marker comments
`<!-- generated NAME table: COMMAND -->` and `<!-- end of the generated NAME table -->`, so a
fact has one home (the settings reference, the exit codes); a unit test checks each page."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

Tables = Mapping[str, Callable[[], str]]  # a table's name -> its markdown


def update(text: str, tables: Tables, command: str) -> str:
    """`text` with each of `tables` between its marker comments rendered anew."""
    for name, render in tables.items():
        begin, end = f"<!-- generated {name} table: {command} -->\n", f"<!-- end of the generated {name} table -->"
        head, found, rest = text.partition(begin)
        _, found_end, tail = rest.partition(end)
        if not (found and found_end):
            raise ValueError(f"no {begin.strip()!r} ... {end!r} in the text")
        text = f"{head}{begin}{render()}\n{end}{tail}"
    return text


def main(prog: str, description: str, tables: Tables, command: str, argv: Sequence[str] | None = None) -> None:
    """Print `tables`, or with a page argument rewrite them in that page."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("page", nargs="?", type=Path, help="rewrite the tables in this file instead")
    args = parser.parse_args(argv)
    if args.page is None:
        print("\n\n".join(render() for render in tables.values()))
    else:
        args.page.write_text(update(args.page.read_text(encoding="utf-8"), tables, command), encoding="utf-8")
