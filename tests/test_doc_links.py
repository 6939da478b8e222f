"""Every link from one manual page to a heading (``[text](page.md#anchor)``, ``[text](#anchor)``) names a file
that exists and a heading it has, by GitHub's rule for a heading's anchor: lower case, punctuation but ``-``
and ``_`` dropped, each space a ``-``, a repeated heading's anchor numbered ``-1``, ``-2`` ... So does every
``docs/<page>.md#<anchor>`` the package, the jobs, the configs and the tests cite (docstrings, ``--help`` texts,
comments)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from conftest import REPO

LINK = re.compile(r"\]\(([^()\s#]*)#([^()\s]+)\)")
HEADING = re.compile(r"^#{1,6} +(.+?) *#*$", re.M)
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives the headings of ``text`` (headings inside code blocks are none)."""
    seen: Counter[str] = Counter()
    found = set()
    for heading in HEADING.findall(FENCE.sub("", text)):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(f"{slug}-{seen[slug]}" if seen[slug] else slug)
        seen[slug] += 1
    return found


def broken_links(page: Path, root: Path = REPO) -> list[str]:
    """The links of ``page`` whose file or heading is missing, as ``page: target#anchor`` (``page`` from ``root``)."""
    broken = []
    for target, anchor in LINK.findall(FENCE.sub("", page.read_text(encoding="utf-8"))):
        linked = (page.parent / target).resolve() if target else page
        if linked.suffix != ".md":
            continue
        if not linked.is_file() or anchor not in anchors(linked.read_text(encoding="utf-8")):
            broken.append(f"{page.relative_to(root)}: {target}#{anchor}")
    return broken


def test_a_heading_anchor_follows_githubs_rule():
    text = "# Results: the report, the headline\n## AsCL (input noise)\n```\n# a comment\n```\n## Usage\n## Usage\n"
    assert anchors(text) == {"results-the-report-the-headline", "ascl-input-noise", "usage", "usage-1"}


def test_a_link_to_a_missing_heading_is_found(tmp_path):
    (tmp_path / "a.md").write_text("# Top\n[ok](#top), [gone](#bottom), [other](b.md#there)\n")
    (tmp_path / "b.md").write_text("# Here\n")
    assert broken_links(tmp_path / "a.md", tmp_path) == ["a.md: #bottom", "a.md: b.md#there"]


@pytest.mark.parametrize("page", [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))], ids=lambda p: p.name)
def test_every_link_to_a_heading_finds_it(page):
    assert broken_links(page) == []


CITED = re.compile(r"\b(docs/[\w/.-]+?\.md)#([\w-]+)")
SOURCES = ["platform", "jobs", "benchmarks", "configs", "tests"]


def cited_anchors(root: Path = REPO) -> list[tuple[str, str, str]]:
    """Every ``docs/<page>.md#<anchor>`` the code, the jobs, the configs and the tests cite (docstrings, ``--help``
    texts, error lines, comments): (where, page, anchor)."""
    found = []
    for folder in SOURCES:
        for path in sorted((root / folder).rglob("*")):
            if path.suffix in (".py", ".yaml", ".yml") and path.is_file():
                for page, anchor in CITED.findall(path.read_text(encoding="utf-8")):
                    found.append((str(path.relative_to(root)), page, anchor))
    return found


def test_a_cited_heading_is_found_in_code_text(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Top\n")
    (tmp_path / "platform").mkdir()
    cites = "docs/a.md" + "#top and docs/a.md" + "#gone"  # split: this file is read by the test below
    (tmp_path / "platform" / "m.py").write_text(f'"""See {cites}."""\n')
    assert cited_anchors(tmp_path) == [("platform/m.py", "docs/a.md", "top"), ("platform/m.py", "docs/a.md", "gone")]


def test_every_heading_the_code_cites_exists():
    """A manual link in a docstring, a ``--help`` text or an error line names a page and a heading it has."""
    broken = [
        f"{where}: {page}#{anchor}"
        for where, page, anchor in cited_anchors()
        if not (REPO / page).is_file() or anchor not in anchors((REPO / page).read_text(encoding="utf-8"))
    ]
    assert broken == []
