"""Recorded benchmark results: the one home of the figures the docs' tables show.

`--record NAME` (of `jobs/benchmark.py`, `benchmarks.growth`, `benchmarks.soak` and
`benchmarks.s3_faults`) keeps what a run measured (its command, date, machine, load and figures)
in `benchmarks/results/NAME.json`, committed with the code; runs of the same command accumulate, so
a table shows their medians.
`python -m benchmarks.records` renders every table a page marks with `<!-- results: KIND[-NAME] -->`
... `<!-- /results -->` from the record NAME (default: KIND) as a table of that kind (the
renderers: `benchmarks.record_tables`), and
tests/unit/test_records.py fails while a page differs from its records: a figure is typed
nowhere, and a table and the run it comes from cannot drift apart.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.record_tables import NEWEST_ONLY, RENDERERS, floor_figures, source_line
from benchmarks.report import axis_rows, beside, by_engine

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
COMMAND = "python -m benchmarks.records"
MARKED = re.compile(r"(<!-- results: (?P<name>[\w+-]+) -->\n)(?P<body>.*?)(<!-- /results -->)", re.S)


def environment() -> dict[str, Any]:
    """The moment and the machine, as every record keeps them beside its figures (the Spark
    benchmark adds its session's master and settings)."""
    import platform

    import pyspark

    with open("/proc/meminfo") as meminfo:
        total_kib = int(meminfo.readline().split()[1])
    return {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "cpus": os.cpu_count(),
            "memory_gib": round(total_kib / 2**20, 1), "load_avg": os.getloadavg(),
            "python": platform.python_version(), "pyspark": pyspark.__version__}


def provenance(env: Mapping[str, Any]) -> dict[str, Any]:
    """A run's date, 1-min load at its start and end (now, unless `env` has `load_avg_end`), machine."""
    return {"date": env["date"],
            "load": [round(env["load_avg"][0], 2), round(env.get("load_avg_end", os.getloadavg())[0], 2)],
            "machine": {key: env.get(key) for key in ("cpus", "memory_gib", "python", "pyspark", "spark_master")}}


def summarize(results: Mapping[str, Any]) -> dict[str, Any]:
    """What a run of jobs/benchmark.py measured, for the record: the object-store phase's request
    counts as they are, the partitions axis's rows, or a run's throughput, memory, latency and floor
    (`triggers`: the first engine's per trigger; with several engines also `engines`, each engine's
    `triggers`, as `report.by_engine` reads them)."""
    if "partitions_axis" in results:
        first = next(iter(results["partitions_axis"].values()))
        return {**provenance(first["environment"]), "axis": axis_rows(results["partitions_axis"])}
    if "object_store" in results:
        return {**provenance(results["environment"]), "object_store": results["object_store"]}
    median = results.get("median") or {}
    latencies, floors = by_engine(median, "latency"), by_engine(results, "floor")
    triggers: dict[str, dict[str, dict[str, Any]]] = {}  # engine -> trigger -> figures
    for label, engine, latency in beside(latencies):
        triggers.setdefault(engine, {}).setdefault(label, {}).update(
            gate_p50_s=latency.get("p50_s"), gate_p99_s=latency.get("p99_s"))
    for label, engine, floor in beside(floors):
        triggers.setdefault(engine, {}).setdefault(label, {}).update(floor_figures(floor))
    first = next(iter({**latencies, **floors}), "")
    peer = next(iter((results.get("floor_spark_kafka") or {}).items()), None)
    spark_floor = results.get("floor_spark") or {}
    memory = results.get("memory") or {}
    return {
        **provenance(results["environment"]),
        "throughput": {name: {"rows_per_s": row.get("rows_per_s"), "cpu_us_per_row": row.get("cpu_us_per_row") or {},
                              "peak_mib": (row.get("peak_mib") or {}).get("total"),
                              "forwarder_x": {key.removeprefix("forwarder ").removesuffix(" x"): value
                                              for key, value in row.items() if key.endswith(" x")}}
                       for name, row in (median.get("table") or {}).items()},
        "memory": None if not memory else {"rows": memory["rows"],
                                           "peak_mib": {label: peaks.get("total")
                                                        for label, peaks in memory["peak_mib"].items()}},
        # the first engine's as a record of one engine keeps them; each engine's too when there are several
        "triggers": triggers.get(first, {}),
        **({"engines": {engine: {"triggers": one} for engine, one in triggers.items()}} if len(triggers) > 1 else {}),
        "spark_kafka": None if peer is None else {"trigger": peer[0], **floor_figures(peer[1])},
        "spark_floor_ms": spark_floor.get("triggerExecution"),
    }


def record(name: str, command: str, run: Mapping[str, Any], directory: Path = RESULTS) -> Path:
    """Add `run` (its provenance and figures) to record `name`; a record of another command is replaced."""
    path = directory / f"{name}.json"
    kept = json.loads(path.read_text()) if path.exists() else {}
    runs = kept.get("runs", []) if kept.get("command") == command else []
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"command": command, "runs": [*runs, run]}, indent=1) + "\n")
    return path


def record_run(name: str, program: str, argv: Sequence[str], started: Mapping[str, Any], *,
               directory: Path = RESULTS, **figures: Any) -> Path:
    """Record a run of `program argv` (a benchmark module's own) that began with `started`
    (`environment()`) and measured `figures`."""
    return record(name, command(program, argv), {**provenance(started), **figures}, directory)


UNRECORDED = ("--record", "--output", "--workdir", "--json", "--keep")  # where outputs went, not what ran


def command(program: str, argv: Sequence[str]) -> str:
    """`program` and `argv` as a record names its command: without the options that say where outputs went."""
    given, kept = list(argv), [program]
    while given:
        option = given.pop(0)
        if option in UNRECORDED:
            given[:1] = []
        elif not option.startswith(tuple(f"{o}=" for o in UNRECORDED)):
            kept.append(option)
    return " ".join(kept)


def render(name: str, directory: Path = RESULTS) -> str:
    """The marked region's body, `<!-- results: KIND[-RECORD[+RECORD...]] -->`: the table of that
    kind from the runs of the records named (default: the record KIND), then where each record's
    figures come from. Request counts do not depend on the machine's load: their tables show the
    newest run only."""
    table_kind = max((kind for kind in RENDERERS if name == kind or name.startswith(f"{kind}-")), key=len)
    names = (name.removeprefix(table_kind).removeprefix("-") or table_kind).split("+")
    kept = [json.loads((directory / f"{record}.json").read_text()) for record in names]
    if table_kind in NEWEST_ONLY:
        kept = [{**one, "runs": one["runs"][-1:]} for one in kept]
    table = RENDERERS[table_kind]({"runs": [run for one in kept for run in one["runs"]]})
    return "\n\n".join([table, *(f"{source_line(one)}." for one in kept)]) + "\n"


def update(text: str, directory: Path = RESULTS) -> str:
    """`text` with every marked region rendered again from the records."""
    return MARKED.sub(lambda m: m[1] + render(m["name"], directory) + m[4], text)


def pages() -> list[Path]:
    """The documentation's pages."""
    return sorted((ROOT / "docs").rglob("*.md"))


def main(argv: Sequence[str] | None = None) -> int:
    pages_given = [Path(p) for p in argv] if argv else pages()
    for page in pages_given:
        text = page.read_text(encoding="utf-8")
        updated = update(text)
        if updated != text:
            page.write_text(updated, encoding="utf-8")
            print(f"updated {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
