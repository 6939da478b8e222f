"""Every text that reaches Markdown or HTML is escaped for where it goes.

A sweep whose rows are labelled ``<script>alert(1)</script>``, ``"><img src=x onerror=alert(1)>``, ``a|b``
and ``two\\nlines`` (and a trial whose reason holds the same) is reported as a sweep is, in process with a
real MLflow store: ``report_sweep`` writes ``report.md``, ``summary.md``, ``report.html``, the parent
run's description (``mlflow.note.content``) and ``summary.json``; ``itrlab report`` writes the results
page. Each Markdown text is rendered by a CommonMark renderer (markdown-it-py, with GitHub's tables):
no element comes from a label, the labels read as written, and every table row has the header's cells.
"""

from __future__ import annotations

import html
import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from itrlab.cli import main
from itrlab.config.sweep import load_sweep
from itrlab.report.escape import md_cell, md_code, md_text, visible
from itrlab.report.pages import escape
from itrlab.report.summary import TrialRow

HOSTILE = ["<script>alert(1)</script>", '"><img src=x onerror=alert(1)>', "a|b", "two\nlines"]
REASON = "<script>alert(2)</script> | *boom* [x](javascript:alert(3))\n# heading"
RECALLS = ("i2t_R1", "i2t_R5", "i2t_R10", "t2i_R1", "t2i_R5", "t2i_R10")
# what our own Markdown makes: headings, lists, paragraphs, emphasis, tables, code spans, the plots
MARKDOWN_TAGS = {
    "h1",
    "h2",
    "h3",
    "p",
    "ul",
    "li",
    "strong",
    "em",
    "code",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "img",
}
HTML_TAGS = {
    "html",
    "head",
    "meta",
    "title",
    "style",
    "body",
    "h1",
    "ul",
    "li",
    "p",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "figure",
    "img",
    "figcaption",
    # report.html's own: a line-break hint after a dot of its first header, a cell's "± interval" kept
    # on one line; both wrap text that was escaped first
    "wbr",
    "span",
}


class Elements(HTMLParser):
    """The elements of an HTML text (tag, attributes) and its tables (rows of cell texts)."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict]] = []
        self.tables: list[list[list[str]]] = []
        self._cell: list[str] | None = None
        self.text: list[str] = []  # every text, as a reader sees it
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))
        if tag == "table":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self.tables and self.tables[-1]:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)


def rendered(markdown: str) -> Elements:
    return Elements(MarkdownIt("commonmark").enable("table").render(markdown))


def assert_no_label_markup(page: Elements, allowed: set[str], images: tuple[str, ...]) -> None:
    """No element the page's own format does not make, no event handler, no image but the page's plots."""
    for tag, attrs in page.elements:
        assert tag in allowed, (tag, attrs)
        assert not any(name.startswith("on") for name in attrs), (tag, attrs)
        if tag == "img":
            assert attrs.get("src", "").startswith(images) and "onerror" not in attrs, attrs


def assert_tables_hold(page: Elements) -> None:
    assert page.tables
    for table in page.tables:
        assert all(len(row) == len(table[0]) for row in table), table


def test_each_target_function_shows_text_as_written():
    md = MarkdownIt("commonmark").enable("table")
    for text in [*HOSTILE, REASON, "# h", "1. x", "    code", "---", "&lt;b&gt;", "a_b _c_", "$x$", "~~s~~", "+DCL"]:
        shown = visible(text)
        paragraph = Elements(md.render(md_text(text)))
        assert [tag for tag, _ in paragraph.elements] == ["p"], (text, md.render(md_text(text)))
        assert md.render(md_text(text)) == f"<p>{html.escape(shown, quote=True).replace('&#x27;', chr(39))}</p>\n"
        cell = Elements(md.render(f"| h | i |\n|---|---|\n| {md_cell(text)} | x |"))
        assert cell.tables == [[["h", "i"], [shown.strip(), "x"]]], text
        assert Elements(f"<p>{escape(text)}</p>").elements == [("p", {})]
    assert visible("two\nlines\t\x00") == "two␊lines␉␀"
    assert md.render(md_code("a``b`")) == "<p><code>a``b`</code></p>\n"


@pytest.fixture(scope="module")
def hostile_sweep(tmp_path_factory):
    """A finished sweep's report, in process: rows A (the baseline) and the hostile labels over two seeds, one
    more hostile row whose seeds both diverged with a hostile reason. Returns (folder, store URI, run id)."""
    from itrlab.assembly import load_experiment
    from itrlab.sweep.reporting import report_sweep
    from itrlab.tracking import MlflowTracker

    folder = tmp_path_factory.mktemp("hostile")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    spec = load_sweep("dbl_table4", "budget").model_copy(update={"seeds": [0, 1]})
    rows = []
    for number, row in enumerate(["A", *HOSTILE]):
        for seed in (0, 1):
            rsum = 150.0 + 10 * number + seed
            rows.append(
                TrialRow(
                    f"t{number}{seed}",
                    {"cooperative.strategy": row, "seed": seed},
                    {
                        **{f"test_{k}": rsum / 6 for k in RECALLS},
                        "test_rsum": rsum,
                        "test_md": 0.01,
                        "run_seconds": 5.0,
                        "rsum": rsum,
                    },
                    "finished",
                )
            )
    rows += [
        TrialRow(f"x{seed}", {"cooperative.strategy": "<b>all diverged</b>|x", "seed": seed}, {}, "diverged", REASON)
        for seed in (0, 1)
    ]
    parent = MlflowTracker("hostile", uri)
    run_id = parent.start(run_name="hostile", tags={"itrlab.sweep": "dbl_table4"}, params={})
    report_sweep(spec, rows, parent, load_experiment(spec.experiment, [f"dataset.root={folder / 'nodata'}"]), 12.0)
    parent.end()
    artifacts = {
        name: Path(parent.client.download_artifacts(run_id, f"sweep/{name}", str(folder)))
        for name in ("report.md", "summary.md", "report.html", "summary.json")
    }
    description = parent.client.get_run(run_id).data.tags["mlflow.note.content"]
    return folder, uri, run_id, artifacts, description


def test_every_page_and_the_mlflow_description_show_labels_as_text(hostile_sweep, capsys):
    folder, uri, run_id, artifacts, description = hostile_sweep
    assert main(["report", run_id, "--out", str(folder / "results"), "--tracking-uri", uri]) == 0, capsys.readouterr()
    (page,) = (folder / "results").glob("*.md")
    markdown = {
        "report.md": artifacts["report.md"].read_text(),
        "summary.md": artifacts["summary.md"].read_text(),
        "results page": page.read_text(),
        "MLflow description": description,
    }
    for name, text in markdown.items():
        html = rendered(text)
        own_links = name == "MLflow description"  # its own two links, to the report and the trials, in the UI
        assert_no_label_markup(html, MARKDOWN_TAGS | ({"a"} if own_links else set()), ("img/", "plots/"))
        links = [attrs["href"] for tag, attrs in html.elements if tag == "a"]
        assert len(links) == (2 if own_links else 0) and all(link.startswith("#/experiments/") for link in links)
        if name != "MLflow description":
            assert_tables_hold(html)
            cells = {cell for table in html.tables for row in table for cell in row}
            assert {visible(label) for label in HOSTILE} <= cells, name  # each label, as written, in a cell
    shown = "".join(rendered(description).text)  # the headline names its rows and the reason, as written
    assert "best row: two␊lines" in shown
    assert "no result: <b>all diverged</b>|x (diverged 2/2: <script>alert(2)" in shown
    report = Elements(artifacts["report.html"].read_text())
    assert_no_label_markup(report, HTML_TAGS, ("data:image/png;base64,",))
    assert_tables_hold(report)
    assert {visible(label) for label in HOSTILE} <= {cell for table in report.tables for row in table for cell in row}
    # the row whose seeds all diverged is in every table, with its reason as text
    summary = json.loads(artifacts["summary.json"].read_text())
    diverged = next(row for row in summary["report"]["rows"] if row[0] == "<b>all diverged</b>|x")
    assert diverged[-1].startswith("0 of 2 seeds, diverged 2/2: <script>alert(2)</script> | *boom*")
    assert "no result: <b>all diverged</b>|x (diverged 2/2: " in summary["headline"]
    results = rendered(markdown["results page"])
    assert any(
        row[0] == "<b>all diverged</b>|x" and "*boom* [x](javascript:alert(3))" in row[-1]
        for table in results.tables
        for row in table
    )
