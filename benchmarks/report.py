"""The benchmark's medians, targets and printed tables (benchmarks/benchmark.py runs the phases)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence, Sized
from typing import Any

from synclib.app.progress import table

# CPU roles as printed: procmem's roles, the Python driver and other Python processes together.
# On a standalone cluster "jvm" and "py-workers" are the driver's, and the executors' own columns
# follow (printed only when a row has them).
CPU_COLUMNS = (("jvm", ("jvm",)), ("py-workers", ("python-worker",)),
               ("py-driver", ("driver", "python-driver-runner")), ("broker", ("broker",)),
               ("exec-jvm", ("executor-jvm",)), ("exec-py", ("executor-python-worker", "executor-other")),
               ("daemons", ("standalone-master", "standalone-worker")))
ALWAYS_PRINTED = 4  # the first CPU columns, printed even when empty


def by_engine(found: Mapping[str, Any], key: str, first: str = "") -> dict[str, Any]:
    """engine -> `found[key]` of that engine (a trigger's figures: `latencies` of a run, `floor` of
    the results, `latency` of the medians, `triggers` of a record): `found["engines"][ENGINE][key]`
    as a run of several engines keeps them (benchmarks/trigger_phases.py), else `found[key]` as
    the first engine's, named `first` (results and records of one engine, and those made before)."""
    engines = {engine: one[key] for engine, one in (found.get("engines") or {}).items() if key in one}
    return engines or ({first: found[key]} if found.get(key) else {})


def beside(per_engine: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str, Any]]:
    """(trigger, engine, figures) of engine -> trigger -> figures, each trigger's engines together."""
    triggers = dict.fromkeys(trigger for one in per_engine.values() for trigger in one)
    return [(trigger, engine, one[trigger]) for trigger in triggers for engine, one in per_engine.items()
            if trigger in one]


def at(trigger: str, engine: str, engines: Sized) -> str:
    """`at trigger T`, after `into ENGINE` where several engines were measured (one engine's lines read as before)."""
    return (f"into {engine} " if len(engines) > 1 else "") + f"at trigger {trigger}"


def median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def peers(run: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every measured contender of one run: name -> {rows, rows_per_s, cpu_s} or {error}."""
    found: dict[str, dict[str, Any]] = {
        "kafka-python (1 process)": {"rows": run["backlog_rows"], "rows_per_s": run["reference_msgs_per_s"],
                                     "cpu_s": run["reference_cpu_s"]},
        "librdkafka (1 process)": {"rows": run["backlog_rows"], "rows_per_s": run["librdkafka_msgs_per_s"],
                                   "cpu_s": run["librdkafka_cpu_s"]},
    }
    for engine, result in run.get("spark_kafka", {}).items():
        found[f"Spark Kafka source -> {engine}"] = result
    for engine, result in run.get("forwarders", {}).items():
        found[f"forwarder -> {engine}"] = result
    return found


def cpu_us_per_row(result: Mapping[str, Any]) -> dict[str, float]:
    cpu, rows = result.get("cpu_s") or {}, result.get("rows") or 0
    if not rows:
        return {}
    per_role = {column: sum(cpu.get(role, 0.0) for role in roles) * 1e6 / rows for column, roles in CPU_COLUMNS}
    per_role["total"] = sum(cpu.values()) * 1e6 / rows
    return per_role


def ratios(run: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """forwarder engine -> contender -> the forwarder's rows/s over the contender's."""
    contenders = peers(run)
    out: dict[str, dict[str, float]] = {}
    for engine, forwarder in run.get("forwarders", {}).items():
        if "rows_per_s" not in forwarder:
            continue
        out[engine] = {name: forwarder["rows_per_s"] / peer["rows_per_s"]
                       for name, peer in contenders.items() if peer.get("rows_per_s")}
    return out


def medians(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    names = list(peers(runs[0]))
    table: dict[str, Any] = {}
    for name in names:
        results = [peers(r).get(name, {}) for r in runs]
        ok = [r for r in results if "rows_per_s" in r]
        cpu = [cpu_us_per_row(r) for r in ok]
        peaks = [r["memory_mib"] for r in ok if r.get("memory_mib")]
        table[name] = {
            "rows_per_s": median([r["rows_per_s"] for r in ok]),
            "cpu_us_per_row": {column: median([c.get(column) for c in cpu])
                               for column in [*(c for c, _ in CPU_COLUMNS), "total"]} if ok else {},
            "peak_mib": {role: median([p.get(role) for p in peaks]) for role in sorted({k for p in peaks for k in p})},
            "errors": [r["error"] for r in results if "error" in r],
        }
        for engine in {e for r in runs for e in ratios(r)}:
            table[name][f"forwarder {engine} x"] = median([ratios(r).get(engine, {}).get(name) for r in runs])
    first = next(iter(by_engine(runs[0], "latencies")), "")
    latencies: dict[str, dict[str, Any]] = {}
    for engine in dict.fromkeys(e for r in runs for e in by_engine(r, "latencies", first)):
        per_run = [by_engine(r, "latencies", first).get(engine, {}) for r in runs]
        latencies[engine] = {}
        for trigger in dict.fromkeys(t for one in per_run for t in one):
            found = [one[trigger] for one in per_run if "p50_s" in one.get(trigger, {})]
            latencies[engine][trigger] = {
                "p50_s": median([x["p50_s"] for x in found]), "p99_s": median([x["p99_s"] for x in found]),
                "max_s": max((x["max_s"] for x in found), default=None),
                "query_cpu_s_per_s": median([query_cpu(x) for x in found]),
            }
    return {"table": table, "latency": latencies.get(first, {}),
            "engines": {engine: {"latency": one} for engine, one in latencies.items()},
            "reference_msgs_per_s": table["kafka-python (1 process)"]["rows_per_s"],
            "librdkafka_msgs_per_s": table["librdkafka (1 process)"]["rows_per_s"],
            "forwarder_rows_per_s": median([r["forwarder"].get("rows_per_s") for r in runs]),
            "ratio": median([r.get("ratio") for r in runs]),
            "ratio_librdkafka": median([r.get("ratio_librdkafka") for r in runs]),
            "load_avg_1m": median([r["load_avg"][0] for r in runs])}


def targets(results: Mapping[str, Any]) -> dict[str, bool | None]:
    med, memory = results["median"], results.get("memory")
    table = med["table"]
    found: dict[str, bool | None] = {
        "ratio >= 1.5": None if med["ratio"] is None else med["ratio"] >= 1.5,
        "ratio to librdkafka >= 1.0": None if med["ratio_librdkafka"] is None else med["ratio_librdkafka"] >= 1.0,
    }
    for name, row in table.items():
        if name.startswith("Spark Kafka source -> "):
            engine = name.rsplit(" ", 1)[1]
            ratio = row.get(f"forwarder {engine} x")
            found[f"forwarder {engine} >= 1.2x Spark's Kafka source -> {engine}"] = (
                None if ratio is None else ratio >= 1.2)
    latency = med["latency"].get(results["settings"]["trigger"]) or {}
    p50, p99 = latency.get("p50_s"), latency.get("p99_s")
    found["latency p50 <= 0.25s"] = None if p50 is None else p50 <= 0.25
    found["latency p99 <= 0.45s"] = None if p99 is None else p99 <= 0.45
    one_row = ((results.get("floor") or {}).get(results["settings"]["trigger"]) or {}).get("latency") or {}
    p50, p99 = one_row.get("p50_s"), one_row.get("p99_s")
    found["one-row latency p50 <= 0.25s"] = None if p50 is None else p50 <= 0.25
    found["one-row latency p99 <= 0.40s"] = None if p99 is None else p99 <= 0.40
    found["peak memory at the larger backlog <= 1.2x N (total)"] = (
        None if memory is None else memory["ratio"].get("total", 0) <= 1.2)
    return found


def _cell(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(table: Mapping[str, Mapping[str, Any]], title: str) -> None:
    engines = sorted({k for row in table.values() for k in row if k.startswith("forwarder ") and k.endswith(" x")})
    columns = [c for index, (c, _) in enumerate(CPU_COLUMNS)
               if index < ALWAYS_PRINTED or any((row.get("cpu_us_per_row") or {}).get(c) for row in table.values())]
    columns.append("total")
    print(title)
    print(f"  {'':<34} {'rows/s':>10}  CPU us/row: " + " ".join(f"{c:>10}" for c in columns)
          + "".join(f"  {e:>22}" for e in engines))
    for name, row in table.items():
        if row.get("rows_per_s") is None:
            print(f"  {name:<34} failed: {'; '.join(row.get('errors', []))[:200]}")
            continue
        cpu = row["cpu_us_per_row"]
        print(f"  {name:<34} {row['rows_per_s']:>10,.0f}              "
              + " ".join(f"{_cell(cpu.get(c), '.2f'):>10}" for c in columns)
              + "".join(f"  {_cell(row.get(e), '.2f'):>22}" for e in engines))


def run_table(run: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """One run's contenders in the shape `print_table` takes."""
    table: dict[str, dict[str, Any]] = {}
    run_ratios = ratios(run)
    for name, result in peers(run).items():
        row: dict[str, Any] = {"rows_per_s": result.get("rows_per_s"), "cpu_us_per_row": cpu_us_per_row(result),
                               "errors": [result["error"]] if "error" in result else []}
        for engine, against in run_ratios.items():
            row[f"forwarder {engine} x"] = against.get(name)
        table[name] = row
    return table


def query_cpu(latency: Mapping[str, Any]) -> float | None:
    """CPU seconds per second of the query's processes in a latency phase: the JVM, the
    planner and the Python workers (not the driver, which also runs the benchmark's producer)."""
    cpu = latency.get("cpu_s_per_s")
    return None if cpu is None else sum(v for k, v in cpu.items() if k not in ("driver", "broker"))


def print_run(number: int, run: Mapping[str, Any]) -> None:
    load = " ".join(f"{x:.2f}" for x in run["load_avg"])
    print_table(run_table(run), f"run {number} (load average {load})")
    per_engine = by_engine(run, "latencies")
    for trigger, engine, latency in beside(per_engine):
        where = at(trigger, engine, per_engine)
        if "error" in latency:
            print(f"  gate latency {where}: failed: {latency['error']}", flush=True)
            continue
        print(f"  gate latency {where}: p50 {latency['p50_s']:.2f} / p99 {latency['p99_s']:.2f} / "
              f"max {latency['max_s']:.2f} s; median batch ms {latency['batch_ms']}; CPU s/s "
              + ", ".join(f"{k} {v:.3f}" for k, v in (latency.get("cpu_s_per_s") or {}).items()), flush=True)


def print_report(results: Mapping[str, Any]) -> None:
    med, env = results["median"], results["environment"]
    loads = ", ".join(f"{r['load_avg'][0]:.2f}" for r in results["runs"])
    print_table(med["table"], f"median of {len(results['runs'])} runs (1-min load average per run: {loads})")
    for name, row in med["table"].items():
        if row.get("peak_mib"):
            print(f"peak RSS MiB, {name} (medians; per role the largest process, total: all of them): "
                  + ", ".join(f"{role} {mib:,.0f}" for role, mib in row["peak_mib"].items() if mib is not None))
    latencies = by_engine(med, "latency")
    for trigger, engine, latency in beside(latencies):
        print(f"gate latency {at(trigger, engine, latencies)} (medians): p50 {_cell(latency['p50_s'], '.2f')} / "
              f"p99 {_cell(latency['p99_s'], '.2f')} / max {_cell(latency['max_s'], '.2f')} s; the query's "
              f"CPU {_cell(latency.get('query_cpu_s_per_s'), '.3f')} s/s")
    floors = by_engine(results, "floor")
    for trigger, engine, floor in beside(floors):
        print(f"batch floor {at(trigger, engine, floors)}: {floor_line(floor)}")
    for trigger, floor in results.get("floor_spark_kafka", {}).items():
        print(f"Spark's Kafka source -> delta-rs, floor at trigger {trigger}: {floor_line(floor)}")
    if "floor_spark" in results:
        print(f"Spark's own floor (rate -> Parquet), medians ms: {durations_line(results['floor_spark'])}")
    memory = results.get("memory")
    if memory:
        for label, peaks in memory["peak_mib"].items():
            print(f"peak RSS MiB at {label:>4} ({memory['rows'][label]:,} rows, "
                  f"{memory['rows_per_s'][label]:,.0f} rows/s): "
                  + ", ".join(f"{k} {v:,.0f}" for k, v in peaks.items()))
        print("ratio: " + ", ".join(f"{k} {v:.2f}" for k, v in memory["ratio"].items()))
    print("targets: " + ", ".join(f"{k}: {'-' if v is None else 'met' if v else 'NOT met'}"
                                  for k, v in results["targets"].items()))
    print(f"machine: {env['cpus']} cpus, {env['memory_gib']} GiB, master {env['spark_master']} "
          f"(executor memory {env.get('executor_memory') or '-'}), broker "
          f"{results['broker']}, load {env['load_avg'][0]:.2f} -> {env['load_avg_end'][0]:.2f}, "
          f"crc32c native: {env['kafka_crc32c_native']}")


def durations_line(durations: Mapping[str, Any]) -> str:
    """`triggerExecution 154, addBatch 80, ...`, or why there are none."""
    if "error" in durations:
        return f"failed: {durations['error']}"
    return ", ".join(f"{key} {value:.0f}" for key, value in durations.items())


def floor_line(floor: Mapping[str, Any]) -> str:
    if "error" in floor:
        return f"failed: {floor['error']}"
    one, idle = floor.get("one_row_ms") or {}, floor.get("idle_ms") or {}
    latency = floor.get("latency") or {}
    wait, batch = floor.get("until_planned_s") or {}, floor.get("planned_to_table_s") or {}
    parts = [f"one-row latency p50 {_cell(latency.get('p50_s'), '.3f')} / p99 {_cell(latency.get('p99_s'), '.3f')} s"
             f" = until the batch is planned (p50 {_cell(wait.get('p50'), '.3f')} s) + planned to table "
             f"(p50 {_cell(batch.get('p50'), '.3f')} s)",
             "one-row batch ms " + ", ".join(f"{k} {v:.0f}" for k, v in one.items()),
             f"batches carrying the steps {floor.get('step_rows')} rows, ms "
             + ", ".join(f"{k} {v:.0f}" for k, v in (floor.get("step_ms") or {}).items()),
             "idle trigger ms " + ", ".join(f"{k} {v:.0f}" for k, v in idle.items()),
             "idle CPU s/s " + ", ".join(f"{k} {v:.3f}" for k, v in (floor.get("idle_cpu_s_per_s") or {}).items())]
    return "; ".join(parts)


def axis_rows(axis: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per partition count, the figures that must stay flat: backlog rows/s of the forwarder and
    of Spark's Kafka source (first engine), gate latency, the one-row batch (floor phase, first
    trigger; Spark's durationMs), the idle trigger's latestOffset and the idle planner's CPU, peak RSS."""
    rows = []
    for count, results in axis.items():
        engine = results["settings"]["engines"][0]
        table = results["median"]["table"]
        latency = results["median"]["latency"].get(results["settings"]["trigger"]) or {}
        floors: Mapping[str, Mapping[str, Any]] = results.get("floor") or {}
        trigger, floor = next(iter(floors.items()), ("-", {}))
        peer_floor = next(iter((results.get("floor_spark_kafka") or {}).values()), {})
        one, idle = floor.get("one_row_ms") or {}, floor.get("idle_ms") or {}
        planner_cpu = (floor.get("idle_cpu_s_per_s") or {}).get("python-driver-runner")
        memory = results.get("memory") or {}
        rows.append({
            "partitions": int(count), "load": results["median"]["load_avg_1m"],
            "forwarder_rows_per_s": (table.get(f"forwarder -> {engine}") or {}).get("rows_per_s"),
            "spark_kafka_rows_per_s": (table.get(f"Spark Kafka source -> {engine}") or {}).get("rows_per_s"),
            "latency_p50_s": latency.get("p50_s"), "latency_p99_s": latency.get("p99_s"),
            "floor_trigger": trigger, "one_row_ms": one.get("triggerExecution"),
            "one_row_latest_offset_ms": one.get("latestOffset"), "one_row_add_batch_ms": one.get("addBatch"),
            "spark_kafka_one_row_ms": (peer_floor.get("one_row_ms") or {}).get("triggerExecution"),
            "idle_latest_offset_ms": idle.get("latestOffset"),
            "planner_cpu_ms_per_s": None if planner_cpu is None else planner_cpu * 1000,
            "peak_total_mib": (memory.get("peak_mib") or {}).get("N", {}).get("total"),
            "memory_ratio": (memory.get("ratio") or {}).get("total"),
        })
    return rows


AXIS_COLUMNS = (("partitions", "partitions", "d"), ("load", "load", ".1f"),
                ("forwarder_rows_per_s", "rows/s", ",.0f"), ("spark_kafka_rows_per_s", "Spark Kafka rows/s", ",.0f"),
                ("latency_p50_s", "gate p50 s", ".2f"), ("latency_p99_s", "gate p99 s", ".2f"),
                ("one_row_ms", "1-row batch ms", ".0f"), ("one_row_latest_offset_ms", "latestOffset", ".0f"),
                ("one_row_add_batch_ms", "addBatch", ".0f"), ("spark_kafka_one_row_ms", "Spark Kafka 1-row ms", ".0f"),
                ("idle_latest_offset_ms", "idle latestOffset ms", ".0f"),
                ("planner_cpu_ms_per_s", "idle planner CPU ms/s", ".1f"),
                ("peak_total_mib", "peak RSS MiB", ",.0f"), ("memory_ratio", "RSS 10N/N", ".2f"))


def axis_targets(rows: Sequence[Mapping[str, Any]]) -> dict[str, bool | None]:
    """Issue 28's targets: at 256 partitions against the 4-partition figures, at 1,024 against
    Spark's Kafka source (None where a count or figure is missing)."""
    by = {row["partitions"]: row for row in rows}
    four, at_256, at_1024 = by.get(4, {}), by.get(256, {}), by.get(1024, {})

    def ratio(a: Any, b: Any, test: Callable[[float], bool]) -> bool | None:
        return None if a is None or not b else test(a / b)
    return {
        "256: one-row batch <= 1.5x 4's": ratio(at_256.get("one_row_ms"), four.get("one_row_ms"), lambda r: r <= 1.5),
        "256: rows/s >= 0.8x 4's": ratio(at_256.get("forwarder_rows_per_s"), four.get("forwarder_rows_per_s"),
                                          lambda r: r >= 0.8),
        "256: gate p50 <= 1 s": None if at_256.get("latency_p50_s") is None else at_256["latency_p50_s"] <= 1.0,
        "1024: rows/s >= Spark's Kafka source": ratio(at_1024.get("forwarder_rows_per_s"),
                                                      at_1024.get("spark_kafka_rows_per_s"), lambda r: r >= 1.0),
        "1024: memory bounded (RSS 10N/N <= 1.2)": None if at_1024.get("memory_ratio") is None
        else at_1024["memory_ratio"] <= 1.2,
    }


def print_axis(axis: Mapping[str, Mapping[str, Any]]) -> None:
    """One table: each figure per partition count, and issue 28's targets."""
    rows = axis_rows(axis)
    print("partitions axis (same total backlog and event rate over all partitions; medians of the runs):")
    print(table([title for _, title, _ in AXIS_COLUMNS],
                [[_cell(row[key], spec) for key, _, spec in AXIS_COLUMNS] for row in rows]))
    print("targets: " + ", ".join(f"{k}: {'-' if v is None else 'met' if v else 'NOT met'}"
                                  for k, v in axis_targets(rows).items()))
