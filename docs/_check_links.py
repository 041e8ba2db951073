"""Check every local link of the built site: each href and src in docs/_build/html.

Sphinx's own linkcheck builder checks external links over the network and, for a local
link, only that a file of that name exists next to the source page: it never checks a
#fragment of a local link, and it cannot run in CI, which has no network. This checks what
the built pages link to among themselves, without any network: every local target file
exists, and every #fragment names an id (or a name) in the page it points to. External
links (http, https, mailto) are counted, not checked.

    python docs/_check_links.py [docs/_build/html]

Exits 1, listing each broken link with the page it is on, if any is broken.
"""

from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

#: Schemes that leave the site; such links are not checked here.
EXTERNAL = ("http", "https", "mailto", "tel", "ftp", "data", "javascript")


class _Page(HTMLParser):
    """The ids a page defines and the links it makes."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name == "id" or (name == "name" and tag == "a"):
                self.ids.add(value)
            elif (name == "href" and tag in {"a", "link", "area"}) or (
                    name == "src" and tag in {"img", "script", "iframe", "source"}):
                self.links.append(value)


def _parse(path: Path, cache: dict[Path, _Page]) -> _Page:
    if path not in cache:
        page = _Page()
        page.feed(path.read_text(encoding="utf-8", errors="replace"))
        cache[path] = page
    return cache[path]


def check(site: Path) -> tuple[list[str], int, int]:
    """Broken links (as text), and how many local and external links were seen."""
    site = site.resolve()
    cache: dict[Path, _Page] = {}
    broken: list[str] = []
    local = external = 0
    for page_path in sorted(site.rglob("*.html")):
        page = _parse(page_path, cache)
        shown = page_path.relative_to(site)
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme in EXTERNAL or link.startswith("//"):
                external += 1
                continue
            if parts.scheme:
                broken.append(f"{shown}: {link}: unknown scheme {parts.scheme!r}")
                continue
            local += 1
            if parts.path:
                target = (page_path.parent / unquote(parts.path)).resolve()
                if target.is_dir():
                    target = target / "index.html"
            else:
                target = page_path
            if not target.is_relative_to(site):
                broken.append(f"{shown}: {link}: outside the site")
                continue
            if not target.is_file():
                broken.append(f"{shown}: {link}: no such file")
                continue
            fragment = unquote(parts.fragment)
            if fragment and target.suffix == ".html" and \
                    fragment not in _parse(target, cache).ids:
                broken.append(f"{shown}: {link}: no id {fragment!r} in "
                              f"{target.relative_to(site)}")
    return broken, local, external


def main(argv: list[str]) -> int:
    site = Path(argv[1]) if len(argv) > 1 else Path(__file__).parent / "_build" / "html"
    if not (site / "index.html").is_file():
        print(f"{site}: no built site here (make docs builds it)", file=sys.stderr)
        return 1
    broken, local, external = check(site)
    for line in broken:
        print(f"broken link: {line}", file=sys.stderr)
    print(f"links: {local} local checked, {len(broken)} broken; "
          f"{external} external not checked")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
