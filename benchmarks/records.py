"""Recorded benchmark results: the one home of the figures the docs' tables show.

`./spark-submit.sh jobs/benchmark.py ... --record NAME` keeps what a run measured (its command,
date, machine, load and figures) in `benchmarks/results/NAME.json`, committed with the code; runs
of the same command accumulate, so a table shows their medians. `python -m benchmarks.records`
renders every table a page marks with `<!-- results: NAME -->` ... `<!-- /results -->` from the
record NAME, and tests/unit/test_records.py fails while a page differs from its records: a
figure is typed nowhere, and a table and the run it comes from cannot drift apart.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from synclib.settings.values import parse_duration

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
COMMAND = "python -m benchmarks.records"
MARKED = re.compile(r"(<!-- results: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /results -->)", re.S)


def summarize(results: Mapping[str, Any]) -> dict[str, Any]:
    """What a run of the benchmark measured, for the record: the latency and floor phases'
    figures, or the object-store phase's request counts as they are."""
    env = results["environment"]
    provenance = {
        "date": env.get("date") or dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "load": [round(env["load_avg"][0], 2), round(env.get("load_avg_end", env["load_avg"])[0], 2)],
        "machine": {key: env.get(key) for key in ("cpus", "memory_gib", "python", "pyspark", "spark_master")},
    }
    if "object_store" in results:
        return {**provenance, "object_store": results["object_store"]}
    median = results.get("median") or {}
    triggers: dict[str, dict[str, Any]] = {}
    for label, latency in (median.get("latency") or {}).items():
        triggers.setdefault(label, {}).update(gate_p50_s=latency.get("p50_s"), gate_p99_s=latency.get("p99_s"))
    for label, floor in (results.get("floor") or {}).items():
        triggers.setdefault(label, {}).update(_floor(floor))
    peer = next(iter((results.get("floor_spark_kafka") or {}).items()), None)
    spark_floor = results.get("floor_spark") or {}
    return {
        **provenance,
        "throughput": {name: {"rows_per_s": row.get("rows_per_s"), "cpu_us_per_row": row.get("cpu_us_per_row") or {},
                              "forwarder_x": {key.removeprefix("forwarder ").removesuffix(" x"): value
                                              for key, value in row.items() if key.endswith(" x")}}
                       for name, row in (median.get("table") or {}).items()},
        "triggers": triggers,
        "spark_kafka": None if peer is None else {"trigger": peer[0], **_floor(peer[1])},
        "spark_floor_ms": spark_floor.get("triggerExecution"),
    }


def _floor(floor: Mapping[str, Any]) -> dict[str, Any]:
    if "error" in floor:
        return {}
    latency, one_row, idle = floor.get("latency") or {}, floor.get("one_row_ms") or {}, floor.get("idle_cpu_s_per_s")
    return {"one_row_p50_s": latency.get("p50_s"), "one_row_p99_s": latency.get("p99_s"),
            "one_row_batch_ms": None if "triggerExecution" not in one_row
            else one_row["triggerExecution"] - one_row.get("latestOffset", 0),
            "idle_cpu_s_per_s": None if not idle else round(sum(idle.values()), 4)}


def record(name: str, command: str, results: Mapping[str, Any], directory: Path = RESULTS) -> Path:
    """Add this run to record `name` (a record of another command is replaced)."""
    path = directory / f"{name}.json"
    kept = json.loads(path.read_text()) if path.exists() else {}
    runs = kept.get("runs", []) if kept.get("command") == command else []
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"command": command, "runs": [*runs, summarize(results)]}, indent=1) + "\n")
    return path


# --- rendering -----------------------------------------------------------------------------

def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _cell(value: float | None, spec: str, unit: str = "") -> str:
    return "-" if value is None else f"{format(value, spec)}{unit}"


def provenance(kept: Mapping[str, Any]) -> str:
    """`` `COMMAND` ``, medians of N runs on DATE, load A-B, MACHINE."""
    runs = kept["runs"]
    dates = sorted({run["date"][:10] for run in runs})
    loads = [load for run in runs for load in run["load"]]
    machine = runs[-1]["machine"]
    counted = f"medians of {len(runs)} runs" if len(runs) > 1 else "1 run"
    return (f"`{kept['command']}`: {counted} on "
            f"{' to '.join(dates[::max(1, len(dates) - 1)])}, load {min(loads):.1f}-{max(loads):.1f}, "
            f"{machine['cpus']} CPUs, {machine['memory_gib']} GiB, PySpark {machine['pyspark']}, "
            f"{machine['spark_master']}")


def _trigger_order(label: str) -> tuple[int, float]:
    """`leader` first, then intervals from the shortest."""
    return (0, 0.0) if label == "leader" else (1, parse_duration(label))


def triggers_table(kept: Mapping[str, Any]) -> str:
    """Per trigger: gate latency under flow, the one-row latency and batch, idle CPU; then Spark's
    Kafka source and Spark's own query at their best trigger."""
    runs = kept["runs"]

    def med(key: str, label: str, part: str = "triggers") -> float | None:
        return _median([(run.get(part) or {}).get(label, {}).get(key) if part == "triggers"
                        else (run.get(part) or {}).get(key) for run in runs])

    rows = ["| trigger | gate latency p50 / p99 | one-row latency p50 / p99 | one-row batch | idle CPU |",
            "|---|---|---|---|---|"]
    for label in sorted(runs[-1]["triggers"], key=_trigger_order):
        name = "`leader` (the default)" if label == "leader" else f"`processing_time` {label}"
        rows.append(f"| {name} | {_cell(med('gate_p50_s', label), '.2f')} / {_cell(med('gate_p99_s', label), '.2f')} s"
                    f" | {_cell(med('one_row_p50_s', label), '.3f')} / {_cell(med('one_row_p99_s', label), '.3f')} s"
                    f" | {_cell(med('one_row_batch_ms', label), '.0f', ' ms')}"
                    f" | {_cell(med('idle_cpu_s_per_s', label), '.3f', ' s/s')} |")
    if any(run.get("spark_kafka") for run in runs):
        trigger = runs[-1]["spark_kafka"]["trigger"]
        rows.append(f"| Spark's Kafka source -> delta-rs at {trigger} | - | "
                    f"{_cell(med('one_row_p50_s', '', 'spark_kafka'), '.3f')} / "
                    f"{_cell(med('one_row_p99_s', '', 'spark_kafka'), '.3f')} s | "
                    f"{_cell(med('one_row_batch_ms', '', 'spark_kafka'), '.0f', ' ms')} | "
                    f"{_cell(med('idle_cpu_s_per_s', '', 'spark_kafka'), '.3f', ' s/s')} |")
    spark_floor = _median([run.get("spark_floor_ms") for run in runs])
    if spark_floor is not None:
        rows.append(f"| Spark alone: rate -> Parquet at 0ms | - | - | {spark_floor:.0f} ms | - |")
    return "\n".join(rows)


CPU_ROLES = (("jvm", "JVM"), ("py-workers", "Python workers"), ("py-driver", "driver"), ("broker", "broker"))


def throughput_table(kept: Mapping[str, Any]) -> str:
    """Per contender: rows/s, CPU per row by process role, and each forwarder's rows/s over the
    contender's (medians over the record's runs, each itself the median of its `--runs`)."""
    runs = [run for run in kept["runs"] if run.get("throughput")]
    names = list(runs[-1]["throughput"])
    engines = sorted({engine for run in runs for row in run["throughput"].values() for engine in row["forwarder_x"]})

    def med(name: str, *path: str) -> float | None:
        values = []
        for run in runs:
            value: Any = run["throughput"].get(name, {})
            for key in path:
                value = (value or {}).get(key)
            values.append(value)
        return _median(values)

    roles = " / ".join(label for _, label in CPU_ROLES)
    rows = [f"| contender | rows/s | CPU us/row: {roles} = total | "
            + " | ".join(f"forwarder -> {engine} x" for engine in engines) + " |",
            "|---|---|---|" + "---|" * len(engines)]
    for name in names:
        cpu = " / ".join(_cell(med(name, "cpu_us_per_row", role), ".2f") for role, _ in CPU_ROLES)
        rows.append(f"| {name} | {_cell(med(name, 'rows_per_s'), ',.0f')} | "
                    f"{cpu} = {_cell(med(name, 'cpu_us_per_row', 'total'), '.2f')} | "
                    + " | ".join(_cell(med(name, "forwarder_x", engine), ".2f") for engine in engines) + " |")
    return "\n".join(rows)


def requests_table(kept: Mapping[str, Any]) -> str:
    """Requests per one-row batch, idle second and maintenance pass, by owner and kind, per engine
    (`benchmarks.object_store_cost.table`; counts do not depend on the load: the newest run)."""
    from benchmarks.object_store_cost import table

    return "\n".join(line for line in table(kept["runs"][-1]["object_store"]) if line.startswith("|"))


def cost_table(kept: Mapping[str, Any]) -> str:
    """USD a day per engine: busy (a one-row batch at each of the busiest trigger's starts) and idle,
    at each maintenance interval counted."""
    engines = kept["runs"][-1]["object_store"]["engines"]
    counted = {engine: result["requests"] for engine, result in engines.items() if "error" not in result["requests"]}
    intervals = list(next(iter(counted.values()))["cost_per_day"]) if counted else []
    rows = [f"| job | {' | '.join(counted)} |", "|---|" + "---|" * len(counted)]
    for interval in intervals:
        first = next(iter(counted.values()))
        rows.append(f"| busy: a one-row batch every {first['trigger_s']:g} s "
                    f"({first['cost_per_day'][interval]['batches_per_day']:,} a day), {interval} | "
                    + " | ".join(f"${r['cost_per_day'][interval]['busy_usd']:,.2f}" for r in counted.values()) + " |")
        rows.append(f"| idle: no event all day, {interval} | "
                    + " | ".join(f"${r['cost_per_day'][interval]['idle_usd']:,.2f}" for r in counted.values()) + " |")
    return "\n".join(rows)


FLOOR_PHASES = ("walCommit", "addBatch", "commitOffsets")


def floors_table(kept: Mapping[str, Any]) -> str:
    """Per engine and storage (local disk, S3, S3 behind the delaying proxy): the one-row latency
    from the leader's commit to the Delta commit, the batch's Spark phases and the whole batch
    without `latestOffset`, where the leader trigger waits (medians, ms), and the requests a batch
    sends from the leader's commit to its Delta commit, one after another."""
    results = kept["runs"][-1]["object_store"]
    delay = results.get("request_delay_ms", 0)
    rows = ["| engine | storage | latency p50 / p99 | " + " | ".join(FLOOR_PHASES)
            + " | batch | requests to the Delta commit |", "|---|---|---|" + "---|" * (len(FLOOR_PHASES) + 2)]
    for engine, result in results["engines"].items():
        path = (result.get("requests") or {}).get("to_commit")
        sequential = "-" if not path else f"{sum(path.values()):g}"
        for where, one in result["floor"].items():
            if "error" in one:
                continue
            storage = {"local": "local disk", "s3": "S3"}.get(where, f"S3, {delay:g} ms a request")
            ms = one.get("one_row_ms", {})
            rows.append(f"| {engine} | {storage} | {one['latency']['p50_s']:.2f} / {one['latency']['p99_s']:.2f} s | "
                        + " | ".join(_cell(ms.get(phase), ",.0f") for phase in FLOOR_PHASES)
                        + f" | {_cell(_floor(one)['one_row_batch_ms'], ',.0f')}"
                        + f" | {'-' if where == 'local' else sequential} |")
    return "\n".join(rows)


NEWEST_ONLY = {"requests", "cost", "floors"}
RENDERERS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "triggers": triggers_table, "throughput": throughput_table, "requests": requests_table, "cost": cost_table,
    "floors": floors_table}


def render(name: str, directory: Path = RESULTS) -> str:
    """The marked region's body, `<!-- results: KIND[-RECORD] -->`: the table of that kind from record
    RECORD (default: KIND) and where its figures come from. Request counts do not depend on the
    machine's load: their tables show the newest run only."""
    table_kind, _, record_name = name.partition("-")
    kept = json.loads((directory / f"{record_name or table_kind}.json").read_text())
    if table_kind in NEWEST_ONLY:
        kept = {**kept, "runs": kept["runs"][-1:]}
    return f"{RENDERERS[table_kind](kept)}\n\n{provenance(kept)}.\n"


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
