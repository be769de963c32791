"""What the dead-letter table (`sink.dead_letters`) holds, read with delta-rs (no Spark): for the
status command. The table and how it is written: `synclib.dead_letters.sink`."""

from __future__ import annotations

from collections import Counter

from synclib.delta.table import read_arrow


def dead_letter_counts(path: str) -> dict[str, int] | None:
    """Dead letters per topic in the table at `path`; None when it does not exist (none yet)."""
    topics = read_arrow(path, columns=["topic"])
    if topics is None:
        return None
    return dict(sorted(Counter(str(t) for t in topics.column("topic").to_pylist()).items()))
