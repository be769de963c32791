"""The tables the docs show, one renderer per kind of record (`benchmarks.records` keeps the
records and writes these tables into the pages' marked regions)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from benchmarks.report import ALWAYS_PRINTED, CPU_COLUMNS, by_engine
from synclib.settings.values import parse_duration


def floor_figures(floor: Mapping[str, Any]) -> dict[str, Any]:
    """A floor phase's figures as a record keeps them: the one-row latency, the batch after planning,
    the idle CPU (nothing for a phase that failed)."""
    if "error" in floor:
        return {}
    latency, one_row, idle = floor.get("latency") or {}, floor.get("one_row_ms") or {}, floor.get("idle_cpu_s_per_s")
    return {"one_row_p50_s": latency.get("p50_s"), "one_row_p99_s": latency.get("p99_s"),
            "one_row_batch_ms": None if "triggerExecution" not in one_row
            else one_row["triggerExecution"] - one_row.get("latestOffset", 0),
            "idle_cpu_s_per_s": None if not idle else round(sum(idle.values()), 4)}


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _med_at(runs: Sequence[Mapping[str, Any]], *path: str) -> float | None:
    """The median over `runs` of the value at `path` (a run without it counts as unknown)."""
    values = []
    for run in runs:
        value: Any = run
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        values.append(value)
    return _median(values)


def _cell(value: float | None, spec: str, unit: str = "") -> str:
    return "-" if value is None else f"{format(value, spec)}{unit}"


def _ms(value: float | None) -> str:
    """Milliseconds to three significant figures or whole ones: 0.35 ms, 37.2 ms, 1,803 ms."""
    return "-" if value is None else _cell(value, ".2f" if value < 10 else ".1f" if value < 100 else ",.0f", " ms")


def source_line(kept: Mapping[str, Any]) -> str:
    """`` `COMMAND` ``, medians of N runs on DATE, load A-B, MACHINE."""
    runs = kept["runs"]
    dates = sorted({run["date"][:10] for run in runs})
    loads = [load for run in runs for load in run["load"]]
    machine = runs[-1]["machine"]
    counted = f"medians of {len(runs)} recorded runs" if len(runs) > 1 else "recorded once"
    return (f"`{kept['command']}`: {counted} on "
            f"{' to '.join(dates[::max(1, len(dates) - 1)])}, load {min(loads):.1f}-{max(loads):.1f}, "
            f"{machine['cpus']} CPUs, {machine['memory_gib']} GiB, PySpark {machine['pyspark']}"
            + (f", {_master(machine['spark_master'])}" if machine.get("spark_master") else ""))


def _master(master: str) -> str:
    """Spark's master as a reader needs it: a standalone cluster's URL names a port of that run only."""
    return "a standalone cluster" if master.startswith("spark://") else master


def _trigger_order(label: str) -> tuple[int, float]:
    """`leader` first, then intervals from the shortest."""
    return (0, 0.0) if label == "leader" else (1, parse_duration(label))


def triggers_table(kept: Mapping[str, Any]) -> str:
    """Per trigger: gate latency under flow, the one-row latency and batch, idle CPU, a row per
    engine where the record has several (`report.by_engine`: an older run's `triggers` are its
    first engine's); then Spark's Kafka source and Spark's own query at their best trigger."""
    runs = kept["runs"]
    engines = list(by_engine(runs[-1], "triggers")) or [""]
    per_engine = [by_engine(run, "triggers", engines[0]) for run in runs]

    def med(key: str, label: str, engine: str) -> float | None:
        return _med_at(per_engine, engine, label, key)

    def peer(key: str) -> float | None:
        return _med_at(runs, "spark_kafka", key)

    rows = ["| trigger | gate latency p50 / p99 | one-row latency p50 / p99 | one-row batch | idle CPU |",
            "|---|---|---|---|---|"]
    newest = per_engine[-1]
    for label in sorted({label for one in newest.values() for label in one}, key=_trigger_order):
        title = "`leader` (the default)" if label == "leader" else f"`processing_time` {label}"
        for engine in (e for e in engines if label in newest.get(e, {})):  # a trigger's engines together
            name = f"{title}, {engine}" if len(engines) > 1 else title
            rows.append(f"| {name} | {_cell(med('gate_p50_s', label, engine), '.2f')} / "
                        f"{_cell(med('gate_p99_s', label, engine), '.2f')} s"
                        f" | {_cell(med('one_row_p50_s', label, engine), '.3f')} / "
                        f"{_cell(med('one_row_p99_s', label, engine), '.3f')} s"
                        f" | {_cell(med('one_row_batch_ms', label, engine), '.0f', ' ms')}"
                        f" | {_cell(med('idle_cpu_s_per_s', label, engine), '.3f', ' s/s')} |")
    if any(run.get("spark_kafka") for run in runs):
        trigger = next(run["spark_kafka"]["trigger"] for run in reversed(runs) if run.get("spark_kafka"))
        rows.append(f"| Spark's Kafka source -> delta-rs at {trigger} | - | "
                    f"{_cell(peer('one_row_p50_s'), '.3f')} / {_cell(peer('one_row_p99_s'), '.3f')} s | "
                    f"{_cell(peer('one_row_batch_ms'), '.0f', ' ms')} | "
                    f"{_cell(peer('idle_cpu_s_per_s'), '.3f', ' s/s')} |")
    spark_floor = _median([run.get("spark_floor_ms") for run in runs])
    if spark_floor is not None:
        rows.append(f"| Spark alone: rate -> Parquet at 0ms | - | - | {spark_floor:.0f} ms | - |")
    return "\n".join(rows)


# report.CPU_COLUMNS as the docs' tables name them
CPU_LABELS = {"jvm": "JVM", "py-workers": "Python workers", "py-driver": "driver", "broker": "broker",
              "exec-jvm": "executor JVMs", "exec-py": "executor Python", "daemons": "cluster daemons"}


def throughput_table(kept: Mapping[str, Any]) -> str:
    """Per contender: rows/s, CPU per row by process role, peak memory of all its processes, and each
    forwarder's rows/s over the contender's (medians over the record's runs, each the median of its
    `--runs`); then the memory phase's peak at N and 10N."""
    runs = [run for run in kept["runs"] if run.get("throughput")]
    names = list(runs[-1]["throughput"])
    engines = sorted({engine for run in runs for row in run["throughput"].values() for engine in row["forwarder_x"]})
    roles = [(role, CPU_LABELS[role]) for index, (role, _) in enumerate(CPU_COLUMNS) if index < ALWAYS_PRINTED or any(
        row["cpu_us_per_row"].get(role) for run in runs for row in run["throughput"].values())]
    peaks = any(row.get("peak_mib") for run in runs for row in run["throughput"].values())
    rows = [f"| contender | rows/s | CPU us/row: {' / '.join(label for _, label in roles)} = total | "
            + ("peak RSS MiB | " if peaks else "")
            + " | ".join(f"forwarder -> {engine} x" for engine in engines) + " |",
            "|---|---|---|" + "---|" * (len(engines) + peaks)]
    for name in names:
        cpu = " / ".join(_cell(_med_at(runs, "throughput", name, "cpu_us_per_row", role), ".2f") for role, _ in roles)
        rows.append(f"| {name} | {_cell(_med_at(runs, 'throughput', name, 'rows_per_s'), ',.0f')} | "
                    f"{cpu} = {_cell(_med_at(runs, 'throughput', name, 'cpu_us_per_row', 'total'), '.2f')} | "
                    + (f"{_cell(_med_at(runs, 'throughput', name, 'peak_mib'), ',.0f')} | " if peaks else "")
                    + " | ".join(_cell(_med_at(runs, "throughput", name, "forwarder_x", engine), ".2f")
                                 for engine in engines) + " |")
    memory = [run["memory"] for run in runs if run.get("memory")]
    if memory:
        (small, rows_small), (large, rows_large) = list(memory[-1]["rows"].items())[:2]
        at_small, at_large = _med_at(memory, "peak_mib", small), _med_at(memory, "peak_mib", large)
        ratio = _median([m["peak_mib"][large] / m["peak_mib"][small] for m in memory
                         if m["peak_mib"].get(small) and m["peak_mib"].get(large)])
        rows.append(f"\nPeak RSS of all the forwarder's processes at a backlog of {rows_small:,} rows (N): "
                    f"{_cell(at_small, ',.0f')} MiB; at {rows_large:,} ({large}): {_cell(at_large, ',.0f')} MiB "
                    f"({_cell(ratio, '.2f')}x).")
    return "\n".join(rows)


# The partitions axis: (a key of report.axis_rows or `_axis_batch`, column title, format).
AXIS_COLUMNS = (("forwarder_rows_per_s", "rows/s", ",.0f"),
                ("spark_kafka_rows_per_s", "Spark's Kafka source rows/s", ",.0f"),
                ("latency_p50_s", "gate p50 s", ".2f"), ("latency_p99_s", "gate p99 s", ".2f"),
                ("one_row_batch_ms", "one-row batch ms", ",.0f"),
                ("spark_kafka_one_row_ms", "Spark's source one-row batch ms", ",.0f"),
                ("planner_cpu_ms_per_s", "idle planner CPU ms/s", ".1f"),
                ("peak_total_mib", "peak RSS MiB", ",.0f"), ("memory_ratio", "RSS 10N/N", ".2f"))


def _axis_batch(row: Mapping[str, Any]) -> dict[str, Any]:
    """An axis row with its one-row batch after planning (`triggerExecution` less `latestOffset`,
    where the leader trigger waits), as the triggers table shows it."""
    total, planning = row.get("one_row_ms"), row.get("one_row_latest_offset_ms") or 0
    return {**row, "one_row_batch_ms": None if total is None else total - planning}


def axis_table(kept: Mapping[str, Any]) -> str:
    """Per partition count (the same total backlog and event rate over all partitions): the figures
    that must stay flat, beside Spark's own Kafka source (medians over the record's runs)."""
    runs = [[_axis_batch(row) for row in run["axis"]] for run in kept["runs"]]
    counts = [row["partitions"] for row in runs[-1]]
    present = [column for column in AXIS_COLUMNS if any(row.get(column[0]) is not None
                                                        for run in runs for row in run)]
    rows = ["| partitions | " + " | ".join(title for _, title, _ in present) + " |", "|---|" + "---|" * len(present)]
    for count in counts:
        at = [row for run in runs for row in run if row["partitions"] == count]
        rows.append(f"| {count:,} | " + " | ".join(_cell(_med_at(at, key), spec) for key, _, spec in present) + " |")
    return "\n".join(rows)


def growth_table(kept: Mapping[str, Any]) -> str:
    """Per mode (benchmarks/growth.py): the batch commit at the young and the old table, its growth
    (the median of the runs' ratios, each run listed), the full read, live files and log entries
    at the old age, and the maintenance pass before it."""
    runs = kept["runs"]
    modes = list(dict.fromkeys(m["mode"] for run in runs for m in run["growth"]))  # of every record joined
    old_age = max(m["versions"] for m in runs[-1]["growth"])
    young_age = min(m["versions"] for m in runs[-1]["growth"])
    rows = [f"| mode | batch commit p50 at {young_age:,} versions | at {old_age:,} | growth (runs) | "
            f"full read at {young_age:,} / {old_age:,} | live files / log entries at {old_age:,} | "
            f"maintenance pass at {old_age:,} |", "|---|---|---|---|---|---|---|"]
    for mode in modes:
        pairs = []
        for run in runs:
            ages = {m["versions"]: m for m in run["growth"] if m["mode"] == mode}
            if young_age in ages and old_age in ages:
                pairs.append((ages[young_age], ages[old_age]))
        young, old = [p[0] for p in pairs], [p[1] for p in pairs]
        ratios = [o["commit_ms_p50"] / y["commit_ms_p50"] for y, o in pairs if y["commit_ms_p50"]]
        each = ", ".join(f"{r:.2f}" for r in ratios)
        rows.append(f"| {MODE_LABELS.get(mode, mode)} | {_ms(_med_at(young, 'commit_ms_p50'))} | "
                    f"{_ms(_med_at(old, 'commit_ms_p50'))} | "
                    f"**{_cell(_median(ratios), '.2f', 'x')}**{f' ({each})' if len(ratios) > 1 else ''} | "
                    f"{_cell(_med_at(young, 'read_ms'), ',.0f')} / {_cell(_med_at(old, 'read_ms'), ',.0f')} ms | "
                    f"{_cell(_med_at(old, 'live_files'), ',.0f')} / {_cell(_med_at(old, 'log_files'), ',.0f')} | "
                    f"{_cell(_med_at(old, 'maintenance_s'), ',.1f', ' s')} |")
    return "\n".join(rows)


MODE_LABELS = {"on": "delta-rs, maintenance at its defaults", "off": "delta-rs, no maintenance",
               "on-log-10m": "delta-rs, maintenance, `log_retention: 10m`", "reopen": "delta-rs, reopened each batch",
               "spark-on": "delta-spark's row path (the whole Spark write), maintenance at its defaults",
               "spark-off": "delta-spark's row path (the whole Spark write), Delta's defaults, no maintenance",
               "spark-direct-on": "delta-spark's direct path (Delta's commit), maintenance at its defaults",
               "spark-direct-off": "delta-spark's direct path (Delta's commit), Delta's defaults, no maintenance"}


# harness.procmem's roles as the long-run table names them (the largest process of each)
SOAK_ROLES = {"jvm": "Spark's JVM", "driver": "the Python driver (commits, maintenance)",
              "python-driver-runner": "the planner", "python-worker": "the largest Python worker",
              "broker": "the embedded broker"}


def soak_table(kept: Mapping[str, Any]) -> str:
    """A long run (benchmarks/soak.py) per column: exactly once through its kills, the first and the
    last quarter's batches and memory, the table at the end."""
    runs = [run["soak"] for run in kept["runs"]]

    def quarters(key: str, spec: str, unit: str = "") -> str:
        return " | ".join(f"{_cell(r['first'].get(key), spec, unit)} / {_cell(r['last'].get(key), spec, unit)}"
                          for r in runs)

    def rss(role: str) -> str:
        return " | ".join(f"{_cell(r['first']['peak_rss_mib'].get(role), ',.0f')} / "
                          f"{_cell(r['last']['peak_rss_mib'].get(role), ',.0f')} MiB" for r in runs)

    roles = [role for role in SOAK_ROLES if any(role in r["last"]["peak_rss_mib"] for r in runs)]
    rows = ["| | " + " | ".join(f"{r['engine']}{', on S3' if r.get('object_store') else ''} "
                                 f"(load {run['load'][0]:.1f}-{run['load'][1]:.1f})"
                                 for r, run in zip(runs, kept["runs"], strict=True)) + " |",
            "|---|" + "---|" * len(runs),
            "| minutes, events/s, SIGKILL restarts, broker pause | " + " | ".join(
                f"{r['seconds'] / 60:.0f}, {r['rate']:,.0f}, {r['kills']}, {r['broker_pause_s']:g} s"
                for r in runs) + " |",
            "| rows; exactly once (duplicates, gaps, beyond the leader, also at each kill) | " + " | ".join(
                f"{r['rows']:,}; {'yes' if r['exactly_once'] else '**no**'} ({r['duplicates']}, {r['gaps']}, "
                f"{r['beyond_leader']})" for r in runs) + " |",
            f"| micro-batches, first / last quarter | {quarters('batches', ',.0f')} |",
            f"| batch duration p50, first / last quarter | {quarters('batch_ms_p50', ',.0f', ' ms')} |",
            f"| batch duration p99, first / last quarter | {quarters('batch_ms_p99', ',.0f', ' ms')} |",
            "| maintenance passes; live files and versions at the end | " + " | ".join(
                f"{r['maintenance_passes']}; {r['live_files']} files, {r['versions']} versions" for r in runs) + " |"]
    rows += [f"| peak RSS, {SOAK_ROLES[role]}, first / last quarter | {rss(role)} |" for role in roles]
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
                        + f" | {_cell(floor_figures(one)['one_row_batch_ms'], ',.0f')}"
                        + f" | {'-' if where == 'local' else sequential} |")
    return "\n".join(rows)


def _warm(results: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """A session's results without each variant's first run on a topic where it ran again (the first
    run of a session also warms the JVM and the Python workers up)."""
    keys = [(result["events"], result["variant"]) for result in results]
    return [result for index, (result, key) in enumerate(zip(results, keys, strict=True))
            if keys.count(key) == 1 or key in keys[:index]]


def dead_letters_table(kept: Mapping[str, Any]) -> str:
    """Per topic (benchmarks/dead_letters.py): Spark's `addBatch` per batch with the plain sink and
    with the dead-letter sink, and the difference (medians over the sessions' warm runs)."""
    runs = kept["runs"]
    rows = ["| topic | rows a batch | plain sink addBatch | dead-letter sink addBatch | difference |",
            "|---|---|---|---|---|"]
    for topic, label in (("clean", "every row parses"), ("poison", "one poison row a batch")):
        found = [result for run in runs for result in _warm(run["dead_letters"]) if result["events"] == topic]
        if not found:
            continue
        plain = _med_at([r for r in found if r["variant"] == "plain"], "add_batch_ms")
        dead = _med_at([r for r in found if r["variant"] == "dead-letters"], "add_batch_ms")
        per_batch = _median([r["rows"] / r["batches"] for r in found if r["batches"]])
        difference = "-" if plain is None or dead is None else f"{dead - plain:+,.0f} ms ({(dead / plain - 1):+.0%})"
        rows.append(f"| {label} | {_cell(per_batch, ',.0f')} | {_ms(plain)} | {_ms(dead)} | {difference} |")
    return "\n".join(rows)


def s3_faults_table(kept: Mapping[str, Any]) -> str:
    """S3's faults under a running job (benchmarks/s3_faults.py), the newest run: a row per fault
    window and the outage (every engine runs the same ones), a column per engine."""
    runs = kept["runs"][-1]["s3_faults"]

    def window(w: Mapping[str, Any]) -> str:
        held = f"**exited** {len(w['exits'])}x ({w['exits'][0]})" if w["exits"] else \
            f"rode it out ({w['requests_faulted']} requests met it)"
        return held + ("" if w["moved_after_s"] is None else f"; the table moved {w['moved_after_s']:g} s after")

    def outage(o: Mapping[str, Any]) -> str:
        said = o["line"].split(" (", 1)[0]  # the line up to its detail: store, request, how long
        ended = "**did not exit**" if o["exit_code"] is None else \
            f"exit {o['exit_code']} after {o['ended_after_s']:g} s, one line: `{said}`"
        return f"{ended}; restarted, the table moved {o['resumed_after_s']:g} s after the outage"

    rows = ["| fault | " + " | ".join(r["engine"] for r in runs) + " |", "|---|" + "---|" * len(runs)]
    rows += [f"| {first['fault']}, {first['seconds']:g} s, {first['fraction']:.0%} of the requests | "
             + " | ".join(window(r["windows"][index]) for r in runs) + " |"
             for index, first in enumerate(runs[0]["windows"])]
    if runs[0]["outage"] is not None:
        rows.append(f"| every request 503 for {runs[0]['outage']['seconds']:g} s | "
                    + " | ".join(outage(r["outage"]) for r in runs) + " |")
    return "\n".join([*rows, "| exactly once against the leader's commits | " + " | ".join(
        f"{'yes' if r['exactly_once'] else '**no**'} ({r['rows']:,} rows)" for r in runs) + " |"])


RENDERERS: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "triggers": triggers_table, "throughput": throughput_table, "requests": requests_table, "cost": cost_table,
    "floors": floors_table, "axis": axis_table, "growth": growth_table, "soak": soak_table,
    "dead-letters": dead_letters_table, "s3-faults": s3_faults_table}
# Request counts do not depend on the machine's load: their tables show the newest run only.
NEWEST_ONLY = {"requests", "cost", "floors", "s3-faults"}
