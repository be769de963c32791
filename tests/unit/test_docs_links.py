"""The documentation's links as GitHub resolves them: relative to the linking file, anchors by
GitHub's heading slugs. (`./spark-submit.sh docs` checks the same links on the site, with
MkDocs' slugs; a heading both slug alike keeps both working.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", ROOT / "DESIGN.md", *(ROOT / "docs").rglob("*.md")])
LINK = re.compile(r"\]\((?!\w+:|/)([^)\s#]*)(?:#([^)\s]*))?\)")
FENCE = re.compile(r"^ *```.*?^ *```", re.MULTILINE | re.DOTALL)


def headings(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return [line.lstrip("#").strip().replace("`", "") for line in text.splitlines() if re.match(r"#{1,6} ", line)]


def github_anchor(heading: str) -> str:
    """GitHub's slug: lower case, punctuation but hyphens and underscores dropped, each space a hyphen."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves_on_github(page: Path) -> None:
    broken = []
    for target, anchor in LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        linked = (page.parent / target).resolve() if target else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and anchor not in {github_anchor(h) for h in headings(linked)}:
            broken.append(f"{target}#{anchor}: no such heading")

    assert broken == []


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_headings_have_the_same_anchor_on_github_and_on_the_site(page: Path) -> None:
    assert [h for h in headings(page) if github_anchor(h) != slugify(h, "-")] == []
