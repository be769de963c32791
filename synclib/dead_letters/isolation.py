"""Finding the poison rows of a micro-batch: the rows on which the transform raises.

Pure arithmetic over the batch's Kafka offsets, no Spark: `isolate` halves a failing batch
until each failure is pinned to one offset, asking a caller-supplied `evaluate` whether the
transform raises on a set of offset ranges (`synclib.dead_letters.sink` runs the transform on
those rows with Spark's `noop` writer). A part of the batch is handed over as one contiguous
offset range per partition, so a filter on it stays short whatever the batch's size.

The work is bounded: with `k` poison rows among `n`, at most `2 k log2(n)` evaluations (one
poison row: about `log2(n) + 1`, the second half of a failing part whose first half passes
is known to fail), and the search stops (`TooManyFailures`) once more than `limit` rows have
failed. `error_of` names what the transform raised: Spark's error condition, or a Python UDF's
exception class.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import groupby

from synclib.offsets import OffsetRange

Key = tuple[str, int, int]  # (topic, partition, offset) of a row


@dataclass(frozen=True)
class Failure:
    """A poison row: its partition and offset, and what the transform raised on it."""

    topic: str
    partition: int
    offset: int
    error_class: str
    message: str

    @property
    def key(self) -> Key:
        return self.topic, self.partition, self.offset


class TooManyFailures(Exception):
    """More rows failed than the limit allows; `found` holds those pinned so far."""

    def __init__(self, found: Sequence[Failure], limit: int) -> None:
        super().__init__(f"more than {limit} rows failed")
        self.found = list(found)
        self.limit = limit


Error = tuple[str, str]  # (error class, message) of what the transform raised
MESSAGE_CHARS = 4000  # error messages are cut to this length
# evaluate(ranges) -> None when the transform succeeds on every row in `ranges`, else the error.
Evaluate = Callable[[Sequence[OffsetRange]], "Error | None"]


def ranges_of(keys: Sequence[Key]) -> list[OffsetRange]:
    """The tightest offset range per partition covering sorted `keys`."""
    return [OffsetRange(topic, partition, group[0][2], group[-1][2] + 1)
            for (topic, partition), rows in groupby(keys, key=lambda k: (k[0], k[1]))
            for group in [list(rows)]]


def describe(keys: Sequence[Key]) -> str:
    """`events[0] offsets [5, 9), events[1] offsets [3, 4)` for sorted `keys`."""
    return ", ".join(str(r) for r in ranges_of(keys))


def isolate(keys: Sequence[Key], evaluate: Evaluate, limit: int, known_error: Error | None = None) -> list[Failure]:
    """The poison rows among `keys` (the batch's rows, sorted), in offset order. `known_error`:
    what evaluating all of them raised (else they are evaluated first). Raises
    TooManyFailures once more than `limit` rows have failed."""
    found: list[Failure] = []
    # (part, what it raised or None when not evaluated yet, whether that error is its own)
    todo: list[tuple[Sequence[Key], Error | None, bool]] = [(keys, known_error, True)]
    while todo:
        part, error, own = todo.pop()
        if not part:
            continue
        if error is None or (len(part) == 1 and not own):  # a single row reports its own error
            error = evaluate(ranges_of(part))
            if error is None:
                continue
        if len(part) == 1:
            found.append(Failure(*part[0], *error))
            if len(found) > limit:
                raise TooManyFailures(sorted(found, key=lambda f: f.key), limit)
            continue
        middle = len(part) // 2
        first, second = part[:middle], part[middle:]
        first_error = evaluate(ranges_of(first))
        # The part fails and its first half does not: the second fails too, without asking.
        todo.append((second, error if first_error is None else None, False))
        if first_error is not None:
            todo.append((first, first_error, True))
    return sorted(found, key=lambda f: f.key)


_PYTHON_ERROR = re.compile(r"^(\w+(?:\.\w+)*(?:Error|Exception|Exit|Interrupt)): ", re.MULTILINE)


def error_of(exc: BaseException) -> Error:
    """(error class, message) of what evaluating the transform raised: Spark's error condition
    (e.g. CAST_OVERFLOW), or for a Python UDF the Python exception's class (e.g. ValueError)."""
    message = str(exc)
    python = _PYTHON_ERROR.findall(message)
    if python:
        name = python[-1]
        tail = message[message.rfind(name + ": "):]
        return name.rsplit(".", 1)[-1], tail[len(name) + 2:].strip()[:MESSAGE_CHARS]
    condition = None
    for getter in ("getCondition", "getErrorClass"):
        function = getattr(exc, getter, None)
        if callable(function):
            try:
                condition = function()
            except Exception:  # noqa: BLE001 - no condition then
                condition = None
            if condition:
                break
    return str(condition or type(exc).__name__), message[:MESSAGE_CHARS]
