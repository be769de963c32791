"""What the forwarder shows on the console: a line per micro-batch, the partition table when
a partition starts or stops waiting on the leader (and every `TABLE_EVERY_S`), and the
end-of-run summary. The line summarises every partition (totals, partitions per state); the
tables list at most `table_rows` partitions, stale and most held back first, and summarise the
rest in one line, so hundreds of partitions stay readable (all of them: `status --json`).

Inputs are plain data: Spark's progress JSON (`StreamingQueryProgress.json`) and the
source's `PlannerStatus`, so everything here is testable without Spark.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from synclib.app.gate_latency import describe
from synclib.app.metrics import batch_duration_ms
from synclib.delta.table import TableSummary
from synclib.source.state import FLOWING, Offsets, get_state_from_offsets
from synclib.source.status import PartitionStatus, PlannerStatus

TABLE_EVERY_S = 10.0
TABLE_ROWS = 10
PARTITION_HEADER = ("topic", "partition", "state", "follower", "leader", "high watermark",
                    "held back", "stale")
SUMMARY_HEADER = ("topic", "partition", "highest offset written", "highest committed by leader",
                  "high watermark", "held back", "state")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain fixed-width table."""
    cells = [[str(h) for h in headers]] + [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(value.ljust(width) for value, width in zip(row, widths, strict=True)).rstrip()
                     for row in cells)


def partition_table(partitions: Sequence[PartitionStatus], rows: int | None = TABLE_ROWS) -> str:
    shown, rest = shown_partitions(partitions, rows)
    return table(PARTITION_HEADER, [
        (p.topic, p.partition, p.state.value, p.follower_offset, p.leader_offset, p.high_watermark, p.held_back,
         "STALE" if p.stale else "") for p in shown]) + rest


def shown_partitions(partitions: Sequence[PartitionStatus], rows: int | None
                     ) -> tuple[list[PartitionStatus], str]:
    """The partitions a table lists (all when they fit in `rows`, else the stale and most held
    back first) and the line summarising the others ("" when none is left out)."""
    if rows is None or len(partitions) <= rows:
        return list(partitions), ""
    ranked = sorted(range(len(partitions)), key=lambda i: (
        not partitions[i].stale, -(partitions[i].held_back or 0), -(partitions[i].lag or 0), i))
    rest = [partitions[i] for i in ranked[rows:]]
    states = Counter(p.state.value for p in rest)
    return [partitions[i] for i in ranked[:rows]], (
        f"\n... {len(rest)} more partitions (" + ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
        + f"), holding back {sum(p.held_back or 0 for p in rest)}; every partition: `status --json`, "
        "or logging.partition_table_rows: null")


def gate_line(partitions: Sequence[PartitionStatus]) -> str:
    """`held back for the leader: N; ready: M; 3 SYNCHRONIZED, 1 LOCAL_BEHIND`."""
    if not partitions:
        return "no partitions yet"
    held = sum(p.held_back or 0 for p in partitions)
    states = Counter(p.state.value for p in partitions)
    stale = sum(bool(p.stale) for p in partitions)
    line = (f"held back for the leader: {held}; ready: {sum(p.ready for p in partitions)}; "
            + ", ".join(f"{n} {state}" for state, n in sorted(states.items())))
    return line + (f"; {stale} STALE" if stale else "")


def _malformed_note(status: PlannerStatus | None) -> str:
    """`; 3 malformed commit-log messages skipped` once there are any."""
    skipped = 0 if status is None else status.commit_log.skipped_malformed
    return f"; {skipped} malformed commit-log messages skipped" if skipped else ""


class ProgressReporter:
    """Turns new progress reports into console lines; tracks rows and batches of this run."""

    def __init__(self, table_every_s: float = TABLE_EVERY_S, table_rows: int | None = TABLE_ROWS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rows = 0
        self.batches = 0
        self.dead_letters = 0  # rows written to the dead-letter table by the batches shown
        self._table_every_s = table_every_s
        self._table_rows = table_rows
        self._clock = clock
        self._seen: tuple[str, int] = ("", -1)
        self._shape: tuple[tuple[str, int, str, bool], ...] | None = None
        self._table_at: float | None = None

    def update(self, progresses: Sequence[Mapping[str, Any]], status: PlannerStatus | None,
               dead_letters: Mapping[int, int] | None = None,
               gate_latency: tuple[float, float] | None = None) -> list[str]:
        """Lines for the reports not shown yet (oldest first), then the table if due;
        `dead_letters`: batch id -> rows that batch wrote to the dead-letter table; `gate_latency`:
        the recent p50 and p99 (`synclib.app.gate_latency`), added to the batches' lines."""
        partitions = () if status is None else status.partitions
        lines = []
        for progress in progresses:
            key = (progress["timestamp"], progress["batchId"])
            if key <= self._seen:
                continue
            self._seen = key
            letters = (dead_letters or {}).get(int(progress["batchId"])) if "addBatch" in progress.get(
                "durationMs", {}) else None
            self.dead_letters += letters or 0
            line = self._line(progress, partitions, gate_latency)
            lines.append(line + (f"; {letters} dead letters" if letters else "") + _malformed_note(status))
        shape = tuple((p.topic, p.partition, "flowing" if p.state in FLOWING else p.state.value, bool(p.stale))
                      for p in partitions)
        now = self._clock()
        if partitions and lines and (shape != self._shape or self._table_at is None
                                     or now - self._table_at >= self._table_every_s):
            lines.append(partition_table(partitions, self._table_rows))
            self._shape, self._table_at = shape, now
        return lines

    def _line(self, progress: Mapping[str, Any], partitions: Sequence[PartitionStatus],
              gate_latency: tuple[float, float] | None) -> str:
        durations = progress.get("durationMs", {})
        if "addBatch" not in durations:  # Spark's report of a trigger that found nothing new
            return f"{_clock(progress, 0)} idle: nothing newly committed; {gate_line(partitions)}"
        rows = int(progress.get("numInputRows") or 0)
        self.rows += rows
        self.batches += 1
        return (f"{_clock(progress, int(durations.get('triggerExecution') or 0))} batch {progress['batchId']}: "
                f"{rows} rows in {batch_duration_ms(progress)} ms ({self.rows} this run); {gate_line(partitions)}"
                + (f"; {describe(gate_latency)}" if gate_latency is not None else ""))


def _clock(progress: Mapping[str, Any], after_ms: int) -> str:
    """`HH:MM:SS` (UTC, as Spark's progress timestamps) `after_ms` after the trigger started: a batch's
    line shows when it ended, so lines stay in the order of the log lines around them."""
    started = datetime.fromisoformat(str(progress["timestamp"]).replace("Z", "+00:00"))
    return (started + timedelta(milliseconds=after_ms)).strftime("%H:%M:%S")


def dead_letters_note(total: int, path: str) -> str:
    """`; dead letters: 3 this run (table PATH)` for the end-of-run headline."""
    return f"; dead letters: {total} this run (table {path})"


def format_summary(path: str, summary: TableSummary | None, status: PlannerStatus | None, headline: str,
                   rows: int | None = TABLE_ROWS) -> str:
    """The end of a run: `headline`, the table's location and size, and per partition the
    highest offset written against what the leader committed (at most `rows` partitions, the
    most held back first, when there are more)."""
    if summary is None:
        return f"{headline}\nDelta table {path}: not created yet (the leader committed nothing)"
    written = summary.offsets or {}
    planned = {(p.topic, p.partition): p for p in (() if status is None else status.partitions)}
    finals = []
    for tp in sorted(set(written) | set(planned)):
        end = written.get(tp)
        leader, hwm = (planned[tp].leader_offset, planned[tp].high_watermark) if tp in planned else (None, None)
        finals.append(PartitionStatus(tp[0], tp[1], get_state_from_offsets(Offsets(end, leader)),
                                      follower_offset=end, leader_offset=leader, high_watermark=hwm))
    shown, rest = shown_partitions(finals, rows)
    rows_text = "unknown number of" if summary.rows is None else summary.rows
    return "\n".join([
        headline,
        f"Delta table {path}: version {summary.version}, {rows_text} rows, "
        f"last batch {summary.batch_id} of {summary.app_id}",
        table(SUMMARY_HEADER, [(p.topic, p.partition, _last(p.follower_offset), _last(p.leader_offset),
                                p.high_watermark, p.held_back, p.state.value) for p in shown]) + rest,
    ])


def _last(next_offset: int | None) -> int | None:
    """The last offset below an exclusive `next_offset` (None when there is none)."""
    return None if not next_offset else next_offset - 1
