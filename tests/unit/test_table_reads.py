"""One way to read a Delta table into Arrow: `synclib.delta.table.read_arrow`, through pyarrow's
own filesystem. deltalake's `to_pyarrow_table()` / `to_pyarrow_dataset()` without it abort the
interpreter at exit in about half the runs (issue 26), so no other module calls them."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
READERS = frozenset({"to_pyarrow_table", "to_pyarrow_dataset"})
THE_READER = ROOT / "synclib" / "delta" / "table.py"


def calls(path: Path) -> list[str]:
    """`path:line method` for each call of a deltalake reader method in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [f"{path.relative_to(ROOT)}:{node.lineno} {node.func.attr}" for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in READERS]


def test_only_read_arrow_reads_a_delta_table_into_arrow() -> None:
    files = [p for folder in ("synclib", "jobs", "harness", "benchmarks", "tests")
             for p in sorted((ROOT / folder).rglob("*.py"))]
    found = [call for path in files if path != THE_READER for call in calls(path)]

    assert found == [], "read Delta tables with synclib.delta.table.read_arrow"
    assert [c.split()[-1] for c in calls(THE_READER)] == ["to_pyarrow_dataset"]  # with pyarrow's filesystem
