"""What the dead-letter table (`sink.dead_letters`) holds, read with delta-rs (no Spark): for the
status command. The table and how it is written: `synclib.delta.dead_letters`."""

from __future__ import annotations

from collections import Counter

from synclib.delta.table import open_table


def dead_letter_counts(path: str) -> dict[str, int] | None:
    """Dead letters per topic in the table at `path`; None when it does not exist (none yet)."""
    table = open_table(path)
    if table is None:
        return None
    topics = table.to_pyarrow_table(columns=["topic"]).column("topic").to_pylist()
    return dict(sorted(Counter(str(t) for t in topics).items()))
