"""What a micro-batch costs on an object store: requests per batch by kind and owner, the one-row
batch floor on S3 beside local disk, and a rough cost per day.

    ./spark-submit.sh jobs/benchmark.py object-store [--engines delta-rs,delta-spark]

At the config's settings (conf/local.yaml by default) with the table and checkpoint on the S3
server (S3Proxy, harness/object_store.py), per engine of `--engines`:

1. requests of steady-state one-row micro-batches: the leader releases one event, the forwarder
   writes it; each step's requests are counted from the server's log, by kind (LIST, GET, HEAD,
   PUT, POST, DELETE) and by owner (Spark's checkpoint, synclib's files in it, the Delta log,
   data files), after `WARMUP_BATCHES` untimed ones;
2. requests while idle (no new events): Spark's triggers keep polling the source, and a trigger
   with no new offsets runs no batch;
3. requests of single maintenance passes (the job runs one every `sink.maintenance.interval`),
   each counted alone with the query stopped: after the batches, again with nothing new, one that
   writes a Delta log checkpoint (interval 1 for that pass), and one right after the checkpoint;
4. the one-row floor (benchmarks/floor.py) at the config's trigger on local disk, on S3, and on S3
   behind a proxy that holds each request `--request-delay-ms` (harness/delay_proxy.py: the
   test server answers in about a millisecond, a real bucket in tens), beside the requests on a
   one-row batch's path from the leader's commit to the Delta commit (one batch runs at a time and
   nothing else does, so they are sequential: each adds a round trip to the batch's latency).

Requests are deterministic, unlike times on a shared machine; the cost per day multiplies them
by AWS's published S3 Standard request prices (`PRICES`).
"""

from __future__ import annotations

import contextlib
import itertools
import re
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from benchmarks import floor
from benchmarks.cluster import PartitionEnds
from benchmarks.phases import Bench
from harness.object_store import (
    DATA_FILES,
    DELTA_LOG,
    SPARK_CHECKPOINT,
    SYNCLIB_FILES,
    Request,
    bucket_key,
    kind,
    owner,
)
from synclib.app.metrics import batch_duration_ms
from synclib.delta.maintenance import PassReport
from synclib.settings import ForwarderConfig
from synclib.settings.job import MaintenanceConfig

Attempt = Callable[[str, Callable[[], dict[str, Any]]], dict[str, Any]]  # benchmark._attempt
KINDS = ("LIST", "GET", "HEAD", "PUT", "POST", "DELETE")
OWNERS = (SPARK_CHECKPOINT, SYNCLIB_FILES, DELTA_LOG, DATA_FILES)
# USD per 1,000 requests: AWS's published S3 Standard prices for US East (N. Virginia)
# (aws.amazon.com/s3/pricing) as of 2026-11-26, not re-read from the page: PUT, COPY, POST, LIST
# 0.005; GET, SELECT and all other 0.0004; DELETE free (a multi-object delete, POST ?delete, too)
PRICES = {"LIST": 0.005, "PUT": 0.005, "POST": 0.005, "GET": 0.0004, "HEAD": 0.0004, "DELETE": 0.0}
PRICE_SOURCE = "AWS S3 Standard request prices, US East (N. Virginia), aws.amazon.com/s3/pricing, as of 2026-11-26"
WARMUP_BATCHES = 3  # the first batches create the table and read the checkpoint's metadata
AFTER_CHECKPOINT = 3  # batches counted after the maintenance passes
_COMMIT_ENTRY = re.compile(r"/_delta_log/[0-9]{20}\.json$")  # a Delta commit's log entry (its PUT commits)
DAY_S = 86_400.0
MAINTENANCE = "maintenance"
DELAYED = "s3, each request delayed"  # the floor behind harness.delay_proxy


def tally(requests: Sequence[Request], table: str, checkpoint: str,
          as_owner: str | None = None) -> dict[str, Counter[str]]:
    """owner -> kind -> count; `as_owner` puts every request under one owner (a maintenance pass)."""
    counts: dict[str, Counter[str]] = {}
    for request in requests:
        counts.setdefault(as_owner or owner(request, table, checkpoint), Counter())[kind(request)] += 1
    return counts


def per_unit(counts: Mapping[str, Mapping[str, int]], units: float) -> dict[str, dict[str, float]]:
    return {who: {k: round(n / units, 2) for k, n in by_kind.items()} for who, by_kind in counts.items()}


def dollars(counts: Mapping[str, Mapping[str, float]]) -> float:
    """What these requests cost at `PRICES`."""
    return sum(n * PRICES[k] / 1000 for by_kind in counts.values() for k, n in by_kind.items())


def cost_per_day(batch: Mapping[str, Mapping[str, float]], idle_per_s: Mapping[str, Mapping[str, float]],
                 busy_pass: Mapping[str, Mapping[str, float]], idle_pass: Mapping[str, Mapping[str, float]],
                 batches_per_s: float, maintenance_interval_s: float) -> dict[str, float]:
    """USD per day of a job that writes a batch every trigger all day (busy) and of one that gets
    no event all day (idle), maintenance passes included."""
    passes = DAY_S / maintenance_interval_s
    return {"busy_usd": round(DAY_S * batches_per_s * dollars(batch) + passes * dollars(busy_pass), 2),
            "idle_usd": round(DAY_S * dollars(idle_per_s) + passes * dollars(idle_pass), 2),
            "batches_per_day": round(DAY_S * batches_per_s), "passes_per_day": round(passes)}


def to_commit(requests: Sequence[Request], table: str, checkpoint: str) -> dict[str, Counter[str]]:
    """The requests of one batch's step up to its Delta commit (the PUT of its log entry): its
    path from the leader's commit to the commit; all of them when there is none."""
    ends = [i for i, r in enumerate(requests) if r.method == "PUT" and _COMMIT_ENTRY.search(r.key)]
    return tally(requests[:ends[0] + 1] if ends else requests, table, checkpoint)


def _pass_function(spark: Any, config: ForwarderConfig) -> Callable[[], PassReport]:
    """One maintenance pass as the job runs it for the config's engine."""
    from synclib.delta import maintenance, spark_maintenance
    from synclib.delta.engine import resolve_engine
    from synclib.settings.values import DELTA_SPARK

    options = config.sink.maintenance
    if resolve_engine(spark, config.sink.engine) == DELTA_SPARK:
        return lambda: spark_maintenance.run_pass(spark, config.sink.path, options)
    return lambda: maintenance.run_pass(config.sink.path, options)


def _wait_for_progress(bench: Bench, query: Any, batch_id: int | None, timeout_s: float = 60.0) -> None:
    """Until the query reported batch `batch_id` (its checkpoint commit is written by then)."""
    deadline = time.monotonic() + timeout_s
    while not any(p["batchId"] >= (batch_id or 0) for p in bench.forwarder_progress(query)):
        if time.monotonic() > deadline:
            raise TimeoutError(f"batch {batch_id} reported no progress in {timeout_s:.0f}s")
        time.sleep(0.02)


class _Steps:
    """One-row batches of a running forwarder, one at a time, each step's requests marked."""

    def __init__(self, bench: Bench, topic: str, log_topic: str, query: Any, watcher: Any) -> None:
        self.bench, self.topic, self.log_topic, self.query, self.watcher = bench, topic, log_topic, query, watcher
        self.producer = bench.cluster.producer(linger_ms=0)
        self.ends: PartitionEnds = {}
        self.sent = 0

    def run(self, count: int) -> list[int]:
        """`count` one-row batches; the request log's length before each and after the last."""
        assert self.bench.store is not None
        marks = []
        for _ in range(count):
            partition = self.sent % self.bench.cluster.partitions
            metadata = self.producer.send(self.topic, value=b'{"cost": %d}' % self.sent,
                                          partition=partition).get(30)
            self.sent += 1
            self.ends = {**self.ends, partition: metadata.offset + 1}
            marks.append(len(self.bench.store.log()))
            self.bench.cluster.commit(self.log_topic, self.topic, self.ends)
            commit = self.watcher.wait_for(self.topic, self.ends, self.query)
            _wait_for_progress(self.bench, self.query, commit.batch_id)
        return [*marks, len(self.bench.store.log())]


def measure(spark: Any, bench: Bench, engine: str, batches: int, idle_s: float, suffix: str = "") -> dict[str, Any]:
    """Requests per one-row batch, per idle second and per maintenance pass of `engine` on S3.

    The passes run while the query waits for data, as the job's maintenance thread runs them
    (an idle query sends no request), each counted alone; then `AFTER_CHECKPOINT` more batches
    show what a batch costs right after the log checkpoint the first pass writes."""
    store = bench.store
    assert store is not None, "the cost phase needs the benchmark's S3 server"
    cluster = bench.cluster
    name = f"cost-{engine}{suffix}"
    topic, log_topic = cluster.topic(name, cluster.partitions), cluster.topic(f"{name}-commit-log", 1)
    extra = [f"sink.engine={engine}"]
    config = bench.config(topic, log_topic, name, extra)
    table, checkpoint = bucket_key(config.sink.path), bucket_key(config.checkpoint.location)
    passes = {}
    with bench.forwarder(topic, log_topic, name, extra) as (query, watcher):
        steps = _Steps(bench, topic, log_topic, query, watcher)
        try:
            steps.run(WARMUP_BATCHES)
            marks = steps.run(batches)
            time.sleep(idle_s)
            idle_end = len(store.log())
            time.sleep(config.sink.maintenance.min_age)  # the batches' files are old enough to compact
            for label in ("after the batches", "nothing new"):
                mark = len(store.log())
                started = time.monotonic()
                report = _pass_function(spark, config)()
                passes[label] = {"requests": per_unit(tally(store.log()[mark:], table, checkpoint, MAINTENANCE), 1),
                                 "seconds": round(time.monotonic() - started, 2), "summary": report.summary()}
            after = steps.run(AFTER_CHECKPOINT)
        finally:
            steps.producer.close(timeout=5)
        progress = [p for p in bench.forwarder_progress(query) if p["numInputRows"] == 1]
    log = store.log()
    batch = per_unit(tally(log[marks[0]:marks[-1]], table, checkpoint), batches)
    idle = per_unit(tally(log[marks[-1]:idle_end], table, checkpoint), idle_s)

    def by_step(step_marks: Sequence[int]) -> list[dict[str, Counter[str]]]:
        return [tally(log[start:end], table, checkpoint) for start, end in itertools.pairwise(step_marks)]

    path = [to_commit(log[start:end], table, checkpoint) for start, end in itertools.pairwise(marks)]

    trigger_s = config.trigger.busiest_interval
    one_row = progress[WARMUP_BATCHES:WARMUP_BATCHES + batches]
    batch_s = statistics.median(batch_duration_ms(p) for p in one_row) / 1000 if one_row else 0.0
    return {
        "batches": batches, "idle_s": idle_s, "trigger_s": trigger_s, "batch_s_p50": round(batch_s, 3),
        "maintenance_interval_s": config.sink.maintenance.interval,
        "one_row_batch": batch, "idle_per_s": idle, "passes": passes,
        # sequential requests from the leader's commit to the Delta commit, median over the batches
        "to_commit": {who: statistics.median(sum(step.get(who, Counter()).values()) for step in path)
                      for who in OWNERS},
        # per batch in order: a batch costs more as the log grows since its last checkpoint
        "steps_all": [sum(sum(by_kind.values()) for by_kind in step.values()) for step in by_step(marks)],
        "steps_delta_log_get": [step.get(DELTA_LOG, Counter())["GET"] for step in by_step(marks)],
        "after_checkpoint_delta_log_get": [step.get(DELTA_LOG, Counter())["GET"] for step in by_step(after)],
        # a batch every trigger all day (the most a busy job runs), maintenance at the config's
        # interval and at the settings model's (production) default
        "cost_per_day": {f"maintenance every {interval:g} s": cost_per_day(
            batch, idle, passes["after the batches"]["requests"], passes["nothing new"]["requests"],
            1 / trigger_s, interval)
            for interval in dict.fromkeys((config.sink.maintenance.interval, MaintenanceConfig().interval))},
    }


@contextlib.contextmanager
def _storage_of(spark: Any, bench: Bench, then: Bench) -> Iterator[None]:
    """The session's `storage.s3` pointed at `bench`'s server (behind the delaying proxy), then at
    `then`'s again."""
    from synclib.app.session import use_storage
    from synclib.settings.storage import S3Config

    assert bench.store is not None and then.store is not None
    use_storage(spark, S3Config(**bench.store.storage_settings()))
    try:
        yield
    finally:
        use_storage(spark, S3Config(**then.store.storage_settings()))


def run(spark: Any, local: Bench, s3: Bench, engines: Sequence[str], batches: int, idle_s: float,
        floor_steps: int, floor_interval: float, attempt: Attempt,
        save: Callable[[Mapping[str, Any]], None], delayed: Bench | None = None,
        request_delay_ms: float = 0.0) -> dict[str, Any]:
    """Per engine: the request counts on S3 and the floor on local disk, on S3 and, with `delayed`
    (a bench whose server is reached through `harness.delay_proxy`, in a bucket of its own: Spark's
    S3A clients are cached per bucket), on S3 at a real bucket's request time; each part through
    `attempt` (a failure is reported, the other parts' numbers stay) and saved when done;
    `request_delay_ms`: the proxy's delay, for the report."""
    def twice(what: str, part: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
        """`part(suffix of its names)`, once more if it fails (on a loaded machine a Python worker
        can fail to connect back in time); the first failure is kept in the result."""
        first = attempt(what, lambda: part(""))
        if "error" not in first:
            return first
        return {**attempt(f"{what}, again", lambda: part("-again")), "first_error": first["error"]}

    results: dict[str, Any] = {"prices": PRICE_SOURCE, "engines": {}, "request_delay_ms": request_delay_ms}
    for engine in engines:
        extra = [f"sink.engine={engine}"]
        result: dict[str, Any] = {"floor": {}}
        results["engines"][engine] = result
        result["requests"] = twice(f"{engine} requests", lambda suffix, e=engine: measure(
            spark, s3, e, batches, idle_s, suffix))
        save(results)
        benches = {"local": local, "s3": s3, **({DELAYED: delayed} if delayed is not None else {})}
        for where, bench in benches.items() if floor_steps else ():
            name = "s3-delayed" if where == DELAYED else where
            with _storage_of(spark, bench, s3) if where == DELAYED else contextlib.nullcontext():
                result["floor"][where] = twice(
                    f"{engine} floor on {where}", lambda suffix, b=bench, n=name, e=engine, x=extra:
                    floor.floor(b, f"floor-{n}-{e}{suffix}", x, floor_steps, floor_interval))
            save(results)
    return results


def _row(label: str, counts: Mapping[str, Mapping[str, float]], who: str) -> str:
    by_kind = counts.get(who, {})
    cells = [f"{by_kind.get(k, 0):g}" for k in KINDS]
    return (f"| {label} | {who} | {' | '.join(cells)} | {sum(by_kind.values()):g} | "
            f"{dollars({who: by_kind}) * 1e6:,.0f} |")


def _total(label: str, counts: Mapping[str, Mapping[str, float]]) -> str:
    total: Counter[str] = Counter()
    for by_kind in counts.values():
        total.update({k: round(n, 2) for k, n in by_kind.items()})
    return _row(label, {"**total**": total}, "**total**")


def table(results: Mapping[str, Any]) -> list[str]:
    """One Markdown table: requests per one-row batch, per idle second and per maintenance pass,
    by owner and kind, per engine; then the cost per day and the floor."""
    lines = [f"| engine: what | owner | {' | '.join(KINDS)} | all | USD per million |",
             "|---|---|" + "---|" * (len(KINDS) + 2)]
    notes = []
    for engine, result in results["engines"].items():
        counts = result["requests"]
        if "error" in counts:
            notes.append(f"{engine}: requests not counted: {counts['error']}")
            counts = {"one_row_batch": {}, "idle_per_s": {}, "passes": {}, "cost_per_day": {},
                      "trigger_s": 0, "batch_s_p50": 0, "steps_all": [], "steps_delta_log_get": [],
                      "after_checkpoint_delta_log_get": []}
        units = [(f"{engine}: one-row batch", counts["one_row_batch"]),
                 (f"{engine}: idle, per s", counts["idle_per_s"])]
        units += [(f"{engine}: maintenance pass, {label}", one["requests"]) for label, one in counts["passes"].items()]
        for label, unit in units:
            lines += [_row(label, unit, who) for who in (*OWNERS, MAINTENANCE, "other") if who in unit]
            lines.append(_total(label, unit))
        for maintenance, day in counts["cost_per_day"].items():
            notes.append(f"{engine}, {maintenance}: busy (a one-row batch every trigger, {counts['trigger_s']:g} s; "
                         f"{day['batches_per_day']:,} batches/day) ${day['busy_usd']:,.2f}/day; idle "
                         f"${day['idle_usd']:,.2f}/day; {day['passes_per_day']:,} maintenance passes/day")
        if "to_commit" in counts:
            path = counts["to_commit"]
            notes.append(f"{engine}: sequential requests from the leader's commit to the Delta commit (median): "
                         f"{sum(path.values()):g} (" + ", ".join(f"{who} {n:g}" for who, n in path.items()) + ")")
        notes.append(f"{engine}: requests of each counted batch in order {counts['steps_all']} (batch p50 "
                     f"{counts['batch_s_p50']:g} s); their Delta log GETs {counts['steps_delta_log_get']}, "
                     f"after the passes' log checkpoint {counts['after_checkpoint_delta_log_get']}")
        notes += [f"{engine}: maintenance pass {label}: {one['summary']}" for label, one in counts["passes"].items()]
        for where, one in result["floor"].items():
            if "error" in one:
                notes.append(f"{engine} floor on {where}: {one['error']}")
                continue
            ms = one.get("one_row_ms", {})
            if where == DELAYED:
                where = f"{where} {results.get('request_delay_ms', 0):g} ms"
            notes.append(f"{engine} floor on {where}: latency p50 {one['latency']['p50_s']:.3f} s, p99 "
                         f"{one['latency']['p99_s']:.3f} s; one-row batch durationMs median " +
                         ", ".join(f"{k} {v:g}" for k, v in ms.items()))
    return [*lines, "", *notes, f"prices: {results['prices']}"]
