"""Which topics and partitions a reader takes: Spark's subscribe / subscribePattern / assign."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Subscription:
    """Exactly one of: topics (subscribe), pattern (subscribePattern), assignment (assign)."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assignment: tuple[tuple[str, int], ...] = ()

    def matches(self, topic: str) -> bool:
        """subscribePattern matches anywhere in the name (`re.search`), as Spark's Kafka source
        (Scala's `Regex.findFirstIn`): `events` takes `events-eu` too; anchor with `^...$`."""
        if self.pattern is not None:
            return re.search(self.pattern, topic) is not None
        if self.assignment:
            return any(t == topic for t, _ in self.assignment)
        return topic in self.topics

    def accepts(self, topic: str, partition: int) -> bool:
        return not self.assignment or (topic, partition) in self.assignment

    @property
    def named_topics(self) -> tuple[str, ...] | None:
        """The topics to describe, or None when every topic must be listed (a pattern)."""
        if self.pattern is not None:
            return None
        return self.topics or tuple(sorted({t for t, _ in self.assignment}))
