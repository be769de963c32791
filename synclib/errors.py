"""How synclib quotes an error in one line: the first line of its text."""

from __future__ import annotations


def first_line(error: BaseException | str | None) -> str:
    """The first non-blank line of an error or its message, stripped ('' when there is none)."""
    text = "" if error is None else str(error)
    return next((line.strip() for line in text.splitlines() if line.strip()), "")
