"""Check every internal link and anchor of the built documentation site.

Usage: python scripts/check_doc_links.py [HTML_DIR]   (default: docs/_build/html)

Every ``href`` and ``src`` in the built pages that points inside the site must
name a file that exists, and its ``#fragment`` an ``id`` on that page. Links to
other sites are not followed (the build runs offline). Exit status 1, with one
line per broken link, when any is broken.
"""

from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit


class _Page(HTMLParser):
    """The ids a page defines and the internal links it makes."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for key in ("id", "name") if tag == "a" else ("id",):
            if values.get(key):
                self.ids.add(str(values[key]))
        for key in ("href", "src"):
            link = values.get(key)
            if link and _internal(link):
                self.links.append(link)


def _internal(link: str) -> bool:
    """Whether ``link`` points into the site (no scheme, no host, not a bare ``#``)."""
    parts = urlsplit(link)
    return not (parts.scheme or parts.netloc) and link != "#"


def read(path: Path) -> _Page:
    """Parse one built page."""
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def broken_links(root: Path) -> list[str]:
    """One line per internal link of the site under ``root`` that leads nowhere."""
    pages = {p.resolve(): read(p) for p in sorted(root.rglob("*.html"))}
    problems = []
    for path, page in pages.items():
        for link in page.links:
            parts = urlsplit(link)
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            where = f"{path.relative_to(root.resolve())}: {link}"
            if not target.exists():
                problems.append(f"{where}: no such file")
            elif parts.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else read(target).ids
                if unquote(parts.fragment) not in ids:
                    problems.append(f"{where}: no anchor #{parts.fragment}")
    return problems


def main(argv: list[str]) -> int:
    """Check the site; print the broken links, if any."""
    root = Path(argv[0] if argv else "docs/_build/html")
    if not (root / "index.html").is_file():
        print(f"{root}: no built site here (run make docs)", file=sys.stderr)
        return 2
    problems = broken_links(root)
    for line in problems:
        print(line, file=sys.stderr)
    pages = len(list(root.rglob("*.html")))
    print(f"{pages} pages, {len(problems)} broken internal link(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
