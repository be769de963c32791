"""The benchmark's phases at a trigger: gate latency (each run) and the micro-batch floor (once),
per engine of `--engines` and per trigger, each trigger's engines one after the other; and the
trigger labels they are keyed by (`leader`, or an interval: 400ms, 1s).

A run keeps each engine's figures under `engines` (`run["engines"][ENGINE]["latencies"]`,
`results["engines"][ENGINE]["floor"]`, `results["median"]["engines"][ENGINE]["latency"]`, as the
object-store phase keys its engines) and the first engine's under the keys a single-engine run
had (`latencies`, `latency`, `floor`), which the targets, the partitions axis and records made
before read; `report.by_engine` reads either shape.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from typing import Any

from benchmarks import floor
from benchmarks.object_store_cost import Attempt
from benchmarks.phases import Bench
from synclib.settings import ForwarderConfig
from synclib.settings.values import LEADER, PROCESSING_TIME, parse_duration


def _label(seconds: float) -> str:
    """A trigger interval as the benchmark names it: 1s, 500ms."""
    return f"{seconds:g}s" if seconds >= 1 and seconds == int(seconds) else f"{round(seconds * 1000)}ms"


def trigger_label(text: str) -> str:
    """`leader`, or an interval as `_label` names it ('0.25s' -> '250ms'); ValueError otherwise."""
    text = text.strip()
    return LEADER if text.lower() == LEADER else _label(parse_duration(text))


def config_trigger(config: ForwarderConfig) -> str:
    """The trigger a config runs, as `trigger_label` names it."""
    trigger = config.trigger
    return LEADER if trigger.mode != PROCESSING_TIME else _label(trigger.processing_time)


def trigger_overrides(label: str) -> list[str]:
    """The config overrides that run trigger `label`."""
    if label == LEADER:
        return [f"trigger.mode={LEADER}"]
    return [f"trigger.mode={PROCESSING_TIME}", f"trigger.processing_time={label}"]


def overrides(engine: str, trigger: str) -> list[str]:
    """The config overrides of the forwarder into `engine` at `trigger`."""
    return [f"sink.engine={engine}", *trigger_overrides(trigger)]


def latencies(bench: Bench, engines: Sequence[str], triggers: Sequence[str], name: str,
              attempt: Attempt) -> dict[str, dict[str, dict[str, Any]]]:
    """engine -> trigger -> the gate latency phase (`Bench.latency`), or {"error"}; phases named `NAME-lat-...`."""
    found: dict[str, dict[str, dict[str, Any]]] = {engine: {} for engine in engines}
    for trigger in triggers:
        for engine in engines:
            found[engine][trigger] = attempt(f"latency {engine} at {trigger}", partial(
                bench.latency, f"{name}-lat-{engine}-{trigger}", overrides(engine, trigger)))
    return found


def floors(bench: Bench, engines: Sequence[str], triggers: Sequence[str], steps: int,
           interval_s: float, attempt: Attempt) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(engine, trigger, the floor phase or {"error"}) as each is measured (`benchmarks.floor`)."""
    for trigger in triggers:
        for engine in engines:
            yield engine, trigger, attempt(f"floor {engine} at {trigger}", partial(
                floor.floor, bench, f"floor-{engine}-{trigger}", overrides(engine, trigger), steps, interval_s))


def keyed(per_engine: Mapping[str, Any], key: str, first: str) -> dict[str, Any]:
    """engine -> figures as a run keeps them: `first`'s under `key` (as a single-engine run had
    them), every engine's under `engines` (the same objects: the JSON holds the first's twice)."""
    return {key: per_engine.get(first, {}), "engines": {engine: {key: one} for engine, one in per_engine.items()}}
