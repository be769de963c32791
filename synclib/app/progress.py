"""What the forwarder shows on the console: a line per micro-batch, the partition table when
a partition starts or stops waiting on the leader (and every `TABLE_EVERY_S`), and the
end-of-run summary.

Inputs are plain data: Spark's progress JSON (`StreamingQueryProgress.json`) and the
source's status file (see `synclib.source.datasource`), so everything here is testable without Spark.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

from synclib.delta.table import TableSummary
from synclib.source.state import Offsets, get_state_from_offsets

TABLE_EVERY_S = 10.0
# A flowing partition alternates between these two with every leader commit and batch.
FLOWING = frozenset({"LOCAL_BEHIND", "SYNCHRONIZED"})
PARTITION_HEADER = ("topic", "partition", "state", "follower", "leader", "high watermark",
                    "held back", "stale")
SUMMARY_HEADER = ("topic", "partition", "highest offset written", "highest committed by leader",
                  "high watermark", "held back", "state")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain fixed-width table."""
    cells = [[str(h) for h in headers]] + [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(value.ljust(width) for value, width in zip(row, widths)).rstrip()
                     for row in cells)


@dataclass(frozen=True)
class PartitionView:
    """One partition as the source last planned it ("follower"/"leader" are next offsets)."""

    topic: str
    partition: int
    state: str
    follower: Optional[int]
    leader: Optional[int]
    high_watermark: Optional[int]
    stale: bool = False

    @property
    def held_back(self) -> Optional[int]:
        """Events in Kafka beyond what the leader committed: what the gate holds back."""
        if self.high_watermark is None or self.follower is None:
            return None
        released = self.follower if self.leader is None else max(self.follower, self.leader)
        return max(0, self.high_watermark - released)

    @property
    def ready(self) -> int:
        """Committed by the leader, in Kafka, not yet forwarded: the next batch's work."""
        if self.follower is None or self.leader is None or self.high_watermark is None:
            return 0
        return max(0, min(self.leader, self.high_watermark) - self.follower)


def partition_views(status: Optional[Mapping[str, Any]]) -> list[PartitionView]:
    return [PartitionView(p["topic"], p["partition"], p["state"], p["follower_offset"],
                          p["leader_offset"], p["high_watermark"], bool(p.get("stale")))
            for p in (status or {}).get("partitions", [])]


def partition_table(views: Sequence[PartitionView]) -> str:
    return table(PARTITION_HEADER, [
        (v.topic, v.partition, v.state, v.follower, v.leader, v.high_watermark, v.held_back,
         "STALE" if v.stale else "") for v in views])


def gate_line(views: Sequence[PartitionView]) -> str:
    """`held back for the leader: N; ready: M; 3 SYNCHRONIZED, 1 LOCAL_BEHIND`."""
    if not views:
        return "no partitions yet"
    held = sum(v.held_back or 0 for v in views)
    states = Counter(v.state for v in views)
    stale = sum(v.stale for v in views)
    line = (f"held back for the leader: {held}; ready: {sum(v.ready for v in views)}; "
            + ", ".join(f"{n} {state}" for state, n in sorted(states.items())))
    return line + (f"; {stale} STALE" if stale else "")


def _malformed_note(status: Optional[Mapping[str, Any]]) -> str:
    """`; 3 malformed commit-log messages skipped` once there are any."""
    skipped = int(((status or {}).get("commit_log") or {}).get("skipped_malformed") or 0)
    return f"; {skipped} malformed commit-log messages skipped" if skipped else ""


class ProgressReporter:
    """Turns new progress reports into console lines; tracks rows and batches of this run."""

    def __init__(self, table_every_s: float = TABLE_EVERY_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.rows = 0
        self.batches = 0
        self._table_every_s = table_every_s
        self._clock = clock
        self._seen: tuple[str, int] = ("", -1)
        self._shape: Optional[tuple[tuple[str, int, str, bool], ...]] = None
        self._table_at: Optional[float] = None

    def update(self, progresses: Sequence[Mapping[str, Any]],
               status: Optional[Mapping[str, Any]]) -> list[str]:
        """Lines for the reports not shown yet (oldest first), then the table if due."""
        views = partition_views(status)
        lines = []
        for progress in progresses:
            key = (progress["timestamp"], progress["batchId"])
            if key <= self._seen:
                continue
            self._seen = key
            lines.append(self._line(progress, views) + _malformed_note(status))
        shape = tuple((v.topic, v.partition, "flowing" if v.state in FLOWING else v.state, v.stale)
                      for v in views)
        now = self._clock()
        if views and lines and (shape != self._shape or self._table_at is None
                                or now - self._table_at >= self._table_every_s):
            lines.append(partition_table(views))
            self._shape, self._table_at = shape, now
        return lines

    def _line(self, progress: Mapping[str, Any], views: Sequence[PartitionView]) -> str:
        clock = str(progress["timestamp"])[11:19]
        durations = progress.get("durationMs", {})
        if "addBatch" not in durations:  # Spark's report of a trigger that found nothing new
            return f"{clock} idle: nothing newly committed; {gate_line(views)}"
        rows = int(progress.get("numInputRows") or 0)
        self.rows += rows
        self.batches += 1
        return (f"{clock} batch {progress['batchId']}: {rows} rows in "
                f"{durations.get('triggerExecution', 0)} ms ({self.rows} this run); "
                f"{gate_line(views)}")


def format_summary(path: str, summary: Optional[TableSummary], status: Optional[Mapping[str, Any]],
                   headline: str) -> str:
    """The end of a run: `headline`, the table's location and size, and per partition the
    highest offset written against what the leader committed."""
    if summary is None:
        return f"{headline}\nDelta table {path}: not created yet (the leader committed nothing)"
    written = {(topic, int(p)): int(end) for topic, ends in (summary.offsets or {}).items()
               for p, end in ends.items()}
    views = {(v.topic, v.partition): v for v in partition_views(status)}
    rows = []
    for tp in sorted(set(written) | set(views)):
        end, view = written.get(tp), views.get(tp)
        leader = view.leader if view else None
        hwm = view.high_watermark if view else None
        held = None if hwm is None or end is None else max(0, hwm - max(end, leader or 0))
        rows.append((tp[0], tp[1], _last(end), _last(leader), hwm, held,
                     get_state_from_offsets(Offsets(end, leader)).value))
    rows_text = "unknown number of" if summary.rows is None else summary.rows
    return "\n".join([
        headline,
        f"Delta table {path}: version {summary.version}, {rows_text} rows, "
        f"last batch {summary.batch_id} of {summary.app_id}",
        table(SUMMARY_HEADER, rows),
    ])


def _last(next_offset: Optional[int]) -> Optional[int]:
    """The last offset below an exclusive `next_offset` (None when there is none)."""
    return None if not next_offset else next_offset - 1
