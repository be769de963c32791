"""The README's sample output, as line shapes a run of the first command must print.

The README shows what `./spark-submit.sh` prints (its first command); a run prints other numbers,
paths, ids, times and mixes of partition states. `shapes` turns each sample line into a pattern
that keeps everything else (the words, the order of the fields, the punctuation), and
`missing_shapes` names the sample lines no line of a run matches: the sample drifts from the
console, and tests/e2e/test_job.py fails, when the console changes.
"""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
STATE = r"(?:UNKNOWN|LOCAL_BEHIND|SYNCHRONIZED|REMOTE_BEHIND)"
# (what, in the escaped sample line, what a run may print instead), applied in order; each match
# becomes a placeholder first, so later rules do not rewrite the patterns of earlier ones
_RULES = (
    (r"forwarder\\ stopped\\ \\\(.*\\\)\\ after", r"forwarder stopped \(.*\) after"),  # any stop reason
    (r"synclib\\-(?:[0-9a-f]|\\-){36}", r"synclib-[0-9a-f-]{36}"),  # the query's app id
    (r"/path/to/synclib/(?:[\w/]|\\[.\-])*", r"\S+"),  # where the checkout is
    (r"\d+\\ " + STATE + r"(?:,\\ \d+\\ " + STATE + r")*", rf"\d+ {STATE}(?:, \d+ {STATE})*"),  # states by count
    (STATE, STATE),
    (r"\d+(?:\\\.\d+)?", r"\d+(?:\.\d+)?"),  # every number
    (r"(?:\\\ )+", r"\s+"),  # table padding
)
_PLACEHOLDER = 0xE000


def sample_lines(readme: Path = README) -> list[str]:
    """The lines of the code block under the README's "A first run" that show output."""
    text = readme.read_text(encoding="utf-8")
    section = text[text.index("## A first run"):]
    block = section[section.index("```\n") + 4:]
    return [line for line in block[:block.index("```")].splitlines() if line.strip() and line.strip() != "..."]


def shape(line: str) -> re.Pattern[str]:
    pattern = re.escape(line.strip())
    for index, (found, _) in enumerate(_RULES):  # a private-use character per rule: no digit, no space
        pattern = re.sub(found, chr(_PLACEHOLDER + index), pattern)
    return re.compile("".join(_RULES[ord(c) - _PLACEHOLDER][1] if ord(c) >= _PLACEHOLDER else c for c in pattern))


def missing_shapes(output: str, readme: Path = README) -> list[str]:
    """The README's sample lines that no line of `output` has the shape of."""
    lines = [line.strip() for line in output.splitlines()]
    return [sample for sample in sample_lines(readme)
            if not any(shape(sample).fullmatch(line) for line in lines)]
