"""The import direction of synclib's layers, read from the source (nothing is imported).

Low -> high; a module may import its own layer and lower ones, never a higher one, and
`synclib.source` and `synclib.delta` (siblings) never import each other. Only the modules in
`SPARK_MODULES` may import pyspark or py4j, so the status command, the config and the
commit-log code run without Spark. A private name of a dependency (a dotted part starting
with `_`) is imported only in `synclib.compat`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "synclib"

LAYERS: tuple[tuple[str, ...], ...] = (
    ("synclib", "synclib.offsets", "synclib.compat"),  # pure types, background threads; private APIs of dependencies
    ("synclib.kafka",),
    ("synclib.settings",),
    ("synclib.leader",),
    ("synclib.source", "synclib.delta"),  # siblings: neither imports the other
    # over the source's rows and the Delta writers: the dead-letter sink; the direct write path's source
    ("synclib.dead_letters", "synclib.direct"),
    ("synclib.embedded",),
    ("synclib.app",),
    ("synclib.cli", "synclib.__main__"),  # the command line over every command
)
SIBLINGS = {"synclib.source": "synclib.delta", "synclib.delta": "synclib.source"}
SPARK = ("pyspark", "py4j")
SPARK_MODULES = frozenset({
    "synclib.compat.pyspark", "synclib.compat.py4j",
    "synclib.kafka.reader",  # InputPartition for the source's tasks
    "synclib.source.datasource",
    "synclib.delta.writer", "synclib.delta.spark_writer",  # the delta-rs and the delta-spark writer
    "synclib.delta.spark_direct",  # delta-spark's direct path: the driver's commit
    "synclib.delta.engine", "synclib.delta.stream",  # choosing the writer, starting the stream
    "synclib.delta.catalog",  # tables by name and the tables the job creates, through the session's catalog
    "synclib.delta.spark_maintenance",  # Delta's own OPTIMIZE and VACUUM in the job's session
    "synclib.app.forwarder", "synclib.app.signals",  # the job's streaming query; its JVM signal handlers
    "synclib.app.session",  # the job's Spark session
    "synclib.delta.batch_writes",  # one micro-batch written from foreachBatch
    "synclib.direct.source",  # the source on the direct write path
    "synclib.dead_letters.sink", "synclib.dead_letters.replay",  # the dead-letter sink, replaying dead letters
    "synclib.dead_letters.transformed",  # source rows through the transform: kept, poison, rejected
    "synclib.dead_letters.source_rows",  # a micro-batch's source rows again, for the dead-letter sink
    "synclib.dead_letters.commands",  # listing and replaying dead letters (a Spark job)
})
DEV_TOOLING = ("harness", "benchmarks", "tests", "jobs")
# Dev tooling has its order too: the harness (the S3 server, Kafka, job worlds) imports synclib only;
# the benchmarks and the tests import the harness; the tests may import the benchmarks (to test them).
DEV_TOOLING_NEVER = {"harness": ("benchmarks", "tests", "jobs"), "benchmarks": ("tests", "jobs")}


class Import(NamedTuple):
    module: str
    line: int
    target: str


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(name: str) -> str:
    """The most specific entry of `LAYERS` that `name` is or lies under ('' if none)."""
    entries = [entry for layer in LAYERS for entry in layer if name == entry or name.startswith(entry + ".")]
    return max(entries, key=len, default="")


def layer_of(name: str) -> int:
    package = package_of(name)
    return next(i for i, layer in enumerate(LAYERS) if package in layer)


def imports(module: str, source: str, is_package: bool = False) -> Iterator[Import]:
    """Every import in `source` (at any depth: lazy imports count), relative ones resolved."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (Import(module, node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[: len(module.split(".")) - node.level + is_package]
                base = ".".join([*anchor, base] if base else anchor)
            # `from a.b import c` may import the module a.b.c: judge the most specific name.
            yield from (Import(module, node.lineno, f"{base}.{alias.name}") for alias in node.names)


def violations(found: Iterator[Import]) -> list[str]:
    problems = []
    for module, line, target in found:
        where = f"{module} (line {line}) imports {target}"
        top = target.split(".")[0]
        if top in SPARK and module not in SPARK_MODULES:
            problems.append(f"{where}: only {sorted(SPARK_MODULES)} may import {top}")
        elif top in DEV_TOOLING:
            problems.append(f"{where}: the product never imports dev tooling ({top}/)")
        elif (top not in ("synclib", "__future__") and any(part.startswith("_") for part in target.split("."))
              and package_of(module) != "synclib.compat"):
            problems.append(f"{where}: a private API of {top}, allowed only in synclib.compat")
        elif top == "synclib":
            source, target_package = package_of(module), package_of(target)
            if layer_of(target) > layer_of(module):
                problems.append(f"{where}: layer {layer_of(module)} ({source}) may not import "
                                f"layer {layer_of(target)} ({target_package})")
            elif SIBLINGS.get(source) == target_package:
                problems.append(f"{where}: {source} and {target_package} are siblings and stay independent")
    return problems


def package_imports() -> Iterator[Import]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield from imports(module_name(path), path.read_text(encoding="utf-8"), path.name == "__init__.py")


def test_every_module_belongs_to_a_layer() -> None:
    modules = [module_name(path) for path in sorted(PACKAGE.rglob("*.py"))]

    assert [m for m in modules if not package_of(m)] == [], "add the new package to LAYERS in this test"
    assert len(modules) > 30


def test_no_module_imports_a_higher_layer_a_sibling_spark_or_dev_tooling() -> None:
    problems = violations(package_imports())

    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("folder", sorted(DEV_TOOLING_NEVER))
def test_dev_tooling_imports_only_lower_tooling(folder: str) -> None:
    found = [f"{i.module} (line {i.line}) imports {i.target}" for path in sorted((ROOT / folder).rglob("*.py"))
             for i in imports(module_name(path), path.read_text(encoding="utf-8"), path.name == "__init__.py")
             if i.target.split(".")[0] in DEV_TOOLING_NEVER[folder]]

    assert found == []


@pytest.mark.parametrize(("module", "source", "problem"), [
    ("synclib.leader.publisher", "from synclib.source import options",
     "synclib.leader.publisher (line 1) imports synclib.source.options: layer 3 (synclib.leader) may not import "
     "layer 4 (synclib.source)"),
    ("synclib.delta.writer", "def f():\n    import synclib.source.state",
     "synclib.delta.writer (line 2) imports synclib.source.state: synclib.delta and synclib.source are siblings "
     "and stay independent"),
    ("synclib.kafka.admin", "from ..app.status import main",
     "synclib.kafka.admin (line 1) imports synclib.app.status.main: layer 1 (synclib.kafka) may not import "
     "layer 7 (synclib.app)"),
    ("synclib.leader.tracker", "from pyspark.sql import SparkSession",
     "synclib.leader.tracker (line 1) imports pyspark.sql.SparkSession: only "),
    ("synclib.app.job", "from harness import procmem",
     "synclib.app.job (line 1) imports harness.procmem: the product never imports dev tooling (harness/)"),
    ("synclib.kafka.reader", "from kafka.consumer.fetcher import _unpack_records",
     "synclib.kafka.reader (line 1) imports kafka.consumer.fetcher._unpack_records: a private API of kafka, "
     "allowed only in synclib.compat"),
])
def test_the_check_names_module_line_and_import(module: str, source: str, problem: str) -> None:
    found = violations(imports(module, source))

    assert len(found) == 1 and found[0].startswith(problem), found


def test_allowed_imports_pass_the_check() -> None:
    allowed = [
        ("synclib.app.status", "from synclib.source.status import PlannerStatus\nfrom synclib.kafka import admin"),
        ("synclib.source.datasource", "from pyspark.sql import SparkSession\nfrom .state import Offsets"),
        ("synclib.leader", "from . import tracker"),
        ("synclib.compat.kafka_python", "from kafka.record._crc32c import crc"),
    ]

    assert [problem for module, source in allowed
            for problem in violations(imports(module, source, is_package=module == "synclib.leader"))] == []
