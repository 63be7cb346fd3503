"""Every relative link in README.md and the docs/ pages points at something.

A link's file must exist (relative to the page); a ``#heading`` anchor into a
Markdown page must name one of its headings (GitHub's slugs); a ``#L<n>``
anchor must name a line the file has. Whether a tour link's name is defined
in the file it points at is tests/test_tour.py's job.
"""

import glob
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = sorted(["README.md", "benchmarks/README.md"]
               + [os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))])
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def _prose_lines(text):
    """The lines outside fenced code blocks (links and headings live there)."""
    inside = False
    for line in text.splitlines():
        if FENCE.match(line):
            inside = not inside
            continue
        if not inside:
            yield line


def _slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped,
    spaces to hyphens (inline code and link markup reduced to their text)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text.replace("`", ""))
    return text.replace(" ", "-")


def anchors(path):
    """The heading anchors of a Markdown file (duplicates get -1, -2, ...)."""
    seen, out = {}, set()
    with open(path) as f:
        for line in _prose_lines(f.read()):
            m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
            if m:
                slug = _slug(m.group(1))
                n = seen.get(slug, 0)
                seen[slug] = n + 1
                out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def broken_links(page, root=ROOT):
    """The relative links of ``page`` (a path under ``root``) that point nowhere."""
    here = os.path.dirname(os.path.join(root, page))
    with open(os.path.join(root, page)) as f:
        text = f.read()
    bad = []
    for line in _prose_lines(text):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(here, path)) if path else os.path.join(root, page)
            if not os.path.exists(full):
                bad.append(f"{target}: no such file")
                continue
            if not anchor:
                continue
            line_anchor = re.fullmatch(r"L(\d+)", anchor)
            if line_anchor:
                with open(full) as f:
                    if int(line_anchor.group(1)) > sum(1 for _ in f):
                        bad.append(f"{target}: the file has fewer lines")
            elif full.endswith(".md"):
                if anchor not in anchors(full):
                    bad.append(f"{target}: no heading with this anchor")
            else:
                bad.append(f"{target}: anchor into a file that is not Markdown")
    return bad


@pytest.mark.parametrize("page", PAGES)
def test_relative_links_resolve(page):
    assert broken_links(page) == [], f"{page} has broken links"


def test_pages_are_found():
    assert "docs/conformance.md" in PAGES and "docs/tour.md" in PAGES


def test_checker_sees_broken_links(tmp_path):
    # The checker itself: a missing file, a missing heading and a line past
    # the end are reported; good links, web links and code blocks are not.
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Title\n\n## Some `code` here\n")
    (tmp_path / "README.md").write_text(
        "[ok](docs/a.md) [ok](docs/a.md#some-code-here) [ok](#top-part) [ok](docs/a.md#L3)\n"
        "[web](https://example.org/x)\n"
        "# Top part\n"
        "[bad](docs/b.md) [bad](docs/a.md#nothing) [bad](docs/a.md#L9)\n"
        "```\n[in code](nowhere.md)\n# not a heading\n```\n[bad](#not-a-heading)\n")
    assert broken_links("README.md", root=str(tmp_path)) == [
        "docs/b.md: no such file", "docs/a.md#nothing: no heading with this anchor",
        "docs/a.md#L9: the file has fewer lines", "#not-a-heading: no heading with this anchor"]
