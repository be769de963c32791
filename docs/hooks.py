"""MkDocs hooks (mkdocs.yml): README.md and DESIGN.md join the site, and every page's links are
written as they work on GitHub (relative to the file in the repository).

README.md becomes the site's home page (index.md) and DESIGN.md its design page, from the files
themselves (one copy of each). A relative link is resolved against the linking file's place in the
repository and rewritten to the page it names on the site; a link to a file that is not a page
stays as written, so `mkdocs build --strict` fails on it, as on any broken link or anchor.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

ROOT = Path(__file__).resolve().parents[1]
ROOT_PAGES = {"README.md": "index.md", "DESIGN.md": "design.md"}  # repository path -> site page
LINK = re.compile(r"\]\((?!\w+:|#|/)([^)\s#]+)(#[^)\s]*)?\)")  # ](relative-target#anchor)


def on_files(files: Files, config: Any) -> Files:
    for source, page in ROOT_PAGES.items():
        files.append(File.generated(config, page, abs_src_path=str(ROOT / source)))
    return files


def repository_path(page: Page) -> str:
    """Where the page's markdown lives in the repository."""
    site_to_repository = {page: source for source, page in ROOT_PAGES.items()}
    return site_to_repository.get(page.file.src_uri, f"docs/{page.file.src_uri}")


def site_path(target: str) -> str | None:
    """The site page of a repository path, or None when the path is no page."""
    if target in ROOT_PAGES:
        return ROOT_PAGES[target]
    return target.removeprefix("docs/") if target.startswith("docs/") else None


def on_page_markdown(markdown: str, page: Page, config: Any, files: Files) -> str:
    here = repository_path(page)

    def rewrite(match: re.Match[str]) -> str:
        target = posixpath.normpath(posixpath.join(posixpath.dirname(here), match[1]))
        on_site = site_path(target)
        if on_site is None:
            return match[0]
        relative = posixpath.relpath(on_site, posixpath.dirname(page.file.src_uri) or ".")
        return f"]({relative}{match[2] or ''})"

    return LINK.sub(rewrite, markdown)
