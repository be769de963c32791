"""Per-partition synchronization state between the follower and the leader (no I/O).

"local" is the follower's position (the next offset it will read); "remote" is the
leader's committed next offset, an exclusive bound: remote N means events < N are
committed and may be released.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable
from typing import NamedTuple

from synclib.offsets import TopicPartitionKey

logger = logging.getLogger(__name__)


class Offsets(NamedTuple):
    local: int | None
    remote: int | None


class SynchronizedPartitionState(enum.Enum):
    UNKNOWN = "UNKNOWN"
    LOCAL_BEHIND = "LOCAL_BEHIND"
    REMOTE_BEHIND = "REMOTE_BEHIND"
    SYNCHRONIZED = "SYNCHRONIZED"


UNKNOWN = SynchronizedPartitionState.UNKNOWN
LOCAL_BEHIND = SynchronizedPartitionState.LOCAL_BEHIND
REMOTE_BEHIND = SynchronizedPartitionState.REMOTE_BEHIND
SYNCHRONIZED = SynchronizedPartitionState.SYNCHRONIZED
# A flowing partition alternates between these two with every leader commit and batch.
FLOWING = frozenset({LOCAL_BEHIND, SYNCHRONIZED})

StateAndOffsets = tuple[SynchronizedPartitionState, Offsets]
StateChangeCallback = Callable[[str, int, StateAndOffsets, StateAndOffsets], None]


class InvalidStateTransition(ValueError):
    """An offset that was known was set back to unknown (None)."""


def get_state_from_offsets(offsets: Offsets) -> SynchronizedPartitionState:
    """Classify a pair of offsets."""
    local, remote = offsets
    if local is None or remote is None:
        return UNKNOWN
    if local < remote:
        return LOCAL_BEHIND
    if remote < local:
        return REMOTE_BEHIND
    return SYNCHRONIZED


class SynchronizedPartitionStateManager:
    """Tracks `Offsets` per (topic, partition) and reports state changes.

    Thread-safe. The callback runs (outside the lock) only when a partition's state
    changes, with `(topic, partition, (old_state, old_offsets), (new_state, new_offsets))`.
    """

    def __init__(self, callback: StateChangeCallback | None = None) -> None:
        self._callback = callback
        self._offsets: dict[TopicPartitionKey, Offsets] = {}
        self._lock = threading.Lock()

    def snapshot(self) -> dict[TopicPartitionKey, Offsets]:
        """A copy of every tracked partition's offsets."""
        with self._lock:
            return dict(self._offsets)

    def set_local_offset(self, topic: str, partition: int, offset: int | None) -> None:
        self._update(topic, partition, "local", offset)

    def set_remote_offset(self, topic: str, partition: int, offset: int | None) -> None:
        self._update(topic, partition, "remote", offset)

    def _update(self, topic: str, partition: int, side: str, offset: int | None) -> None:
        key = (topic, partition)
        with self._lock:
            old = self._offsets.get(key, Offsets(None, None))
            previous = getattr(old, side)
            if offset == previous:  # most partitions of a wide topic at most planning calls
                return
            if offset is None:
                if previous is not None:
                    raise InvalidStateTransition(
                        f"{topic}[{partition}]: {side} offset cannot go from {previous} back to None"
                    )
                return
            if previous is not None and offset < previous:
                logger.info(
                    "%s[%d]: %s offset moved backwards from %d to %d",
                    topic, partition, side, previous, offset,
                )
            new = old._replace(**{side: offset})
            self._offsets[key] = new
        old_state, new_state = get_state_from_offsets(old), get_state_from_offsets(new)
        if old_state is not new_state and self._callback is not None:
            self._callback(topic, partition, (old_state, old), (new_state, new))
