"""Human-readable progress lines and the end-of-run summary of the forwarder."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from synclib.table import TableSummary

PARTITION_HEADER = ("topic", "partition", "state", "follower", "leader", "high watermark", "stale")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain fixed-width table."""
    cells = [[str(h) for h in headers]] + [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(value.ljust(width) for value, width in zip(row, widths)).rstrip()
                     for row in cells)


def partition_rows(status: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    return [
        (p["topic"], p["partition"], p["state"], p["follower_offset"], p["leader_offset"],
         p["high_watermark"], "STALE" if p["stale"] else "")
        for p in status.get("partitions", [])
    ]


def format_batch(progress: Mapping[str, Any], status: Optional[Mapping[str, Any]]) -> str:
    """One micro-batch: id, rows, duration, then the per-partition state table."""
    duration_ms = progress.get("durationMs", {}).get("triggerExecution")
    line = f"batch {progress['batchId']}: {progress['numInputRows']} rows in {duration_ms} ms"
    if not status:
        return line
    log = status.get("commit_log", {})
    line += f"; commit log: {log.get('applied', 0)} applied, {log.get('skipped_malformed', 0)} malformed skipped"
    return line + "\n" + table(PARTITION_HEADER, partition_rows(status))


def format_summary(path: str, summary: Optional[TableSummary], status: Optional[Mapping[str, Any]]) -> str:
    """What the run left in Delta, per partition, against what the leader committed."""
    if summary is None:
        return f"Delta table {path}: not created (nothing was released)"
    written = {(topic, int(p)): end for topic, ends in (summary.offsets or {}).items() for p, end in ends.items()}
    leader = {(p["topic"], p["partition"]): (p["leader_offset"], p["state"])
              for p in (status or {}).get("partitions", [])}
    rows = []
    for tp in sorted(set(written) | set(leader)):
        end = written.get(tp)
        leader_offset, state = leader.get(tp, (None, None))
        rows.append((tp[0], tp[1], None if end is None or end == 0 else end - 1, leader_offset, state))
    return "\n".join([
        f"Delta table {path}: version {summary.version}, {summary.rows} rows, last batch {summary.batch_id}",
        table(("topic", "partition", "highest offset written", "leader committed (next)", "state"), rows),
    ])
