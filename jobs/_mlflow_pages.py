"""The pages of a finished sweep in the MLflow UI and what each shows: their links, the headline, and the
scripts that find the test recalls on each page (``jobs/mlflow_screenshots.py``, beside it, says what is looked
at and why). Imports MLflow and itrlab's sweep modules, so that the job imports it only once its arguments are read.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from _chromium import Browser
from itrlab.eval.names import RECALLS
from itrlab.sweep.reporting import REPORT, REPORT_LINK
from itrlab.sweep.runs_table import trials_view_id
from itrlab.tracking import MlflowTracker
from itrlab.tracking.chart_names import chart_name
from itrlab.tracking.mlflow_tracker import DESCRIPTION_TAG
from itrlab.tracking.runs_view import RECALLS_TAG
from itrlab.tracking.store import OVERVIEW_TAB, ui_link

REPORT_HEADERS = ["rsum", "i2t R@1", "i2t R@5", "i2t R@10", "t2i R@1", "t2i R@5", "t2i R@10"]  # paper_report's
TEST_SECTION = "1_test"

# Whether the window shows all of an element: inside the window, and what the browser finds at both of its ends is
# the element or a part of it (not the panel over it, not a parent that a scroll clips it by).
SHOWN = """const shownBox = (element, r) => {
  if (r.width <= 0 || r.right > innerWidth || r.bottom > innerHeight || r.left < 0 || r.top < 0) return false;
  const y = r.top + r.height / 2;
  return [r.left + 1, r.right - 1].every(x => { const hit = document.elementFromPoint(x, y);
    return hit !== null && element.contains(hit); }); };
const shown = (element) => !!element && [...element.getClientRects()].length > 0
  && [...element.getClientRects()].every(r => shownBox(element, r));"""
# Elements by their own text (its text nodes, trimmed), in document order.
BY_TEXT = """const byText = (text, root = document.body) => { const found = [];
  const walk = document.createTreeWalker(root, NodeFilter.SHOW_TEXT); let node;
  while ((node = walk.nextNode())) if (node.textContent.trim() === text) found.push(node.parentElement);
  return found; };"""


def _script(body: str, **values) -> str:
    """An expression: ``body`` (JavaScript statements ending in a ``return``) with ``values`` as constants."""
    constants = "".join(f"const {name} = {json.dumps(value)};" for name, value in values.items())
    return f"(() => {{ {SHOWN} {BY_TEXT} {constants} {body} }})()"


# a run's "Model metrics" tab: the charts of the section 1_test, each a card titled by the metric's name (or its
# last part), after the section's header
RUN_READY = """const header = byText(section)[0]; if (!header) return null;
  const after = (e) => header.compareDocumentPosition(e) & Node.DOCUMENT_POSITION_FOLLOWING;
  const card = (n) => [...byText(n), ...byText(n.split("/").pop())].filter(after)[0];
  return names.every(card) && document.querySelectorAll("svg.main-svg").length > 0;"""
RUN_SHOWN = """const header = byText(section)[0];
  const after = (e) => header.compareDocumentPosition(e) & Node.DOCUMENT_POSITION_FOLLOWING;
  const card = (n) => [...byText(n), ...byText(n.split("/").pop())].filter(after)[0];
  return Object.fromEntries(names.map(n => [n, shown(card(n))]));"""
# the runs table: its rows loaded, each column headed by the metric's MLflow name; a column counts as shown when
# the window shows its whole header cell (not its label, which runs past the cell that clips it), and the header's
# text ends inside the box that clips it (cut short, `1_test/i2t_R0` could be R@1 or R@5)
RUNS_READY = """return document.querySelector(".ag-row") !== null && names.every(n => byText(n).length > 0);"""
RUNS_SHOWN = """const label = (n) => byText(n).find(e => e.closest(".ag-header-cell"));
  const whole = (e) => e.getBoundingClientRect().right <= e.parentElement.getBoundingClientRect().right + 0.5;
  return Object.fromEntries(names.map(n => { const e = label(n);
    return [n, e !== undefined && shown(e.closest(".ag-header-cell")) && whole(e)]; }));"""
# the artifact view: the frame MLflow shows an HTML file in, then the report's headers inside that frame
FRAME_READY = """const frame = document.querySelector("iframe.mlflow-html-iframe");
  return frame !== null && frame.getBoundingClientRect().width > 0 && shown(frame);"""
REPORT_READY = "return document.querySelector('table th') !== null;"
REPORT_SHOWN = """const page = document.scrollingElement;
  return {...Object.fromEntries(names.map(n => [n, shown(byText(n).find(e => e.tagName === "TH"))])),
    [scroll]: page.scrollWidth <= page.clientWidth, [headline]: shown(document.querySelector("p.headline"))};"""
NO_SCROLL = "no horizontal scroll"
HEADLINE = "the headline"
# the report's entry in the artifact view's file list, beside its frame
ENTRY_SHOWN = """return {[entry]: shown(byText(entry)[0])};"""
REPORT_ENTRY = REPORT.rsplit("/", 1)[-1]
# the parent's Overview: its description's link to the report (a link whose text is REPORT_LINK) and its headline
# (the bold paragraph whose text is the headline), once MLflow's boxes above it have loaded (their placeholders,
# labelled "Child runs loading", "Loading...", gone: the child runs' names take lines of their own)
OVERVIEW_READY = """return [...document.querySelectorAll("a")].some(a => a.textContent.trim() === link)
  && ![...document.querySelectorAll("span")].some(e => e.children.length === 0
    && /(^Loading\\.\\.\\.$| loading$)/.test(e.textContent.trim()));"""
OVERVIEW_SHOWN = """const anchor = [...document.querySelectorAll("a")].find(a => a.textContent.trim() === link);
  const bold = [...document.querySelectorAll("strong")].find(e => e.textContent.trim() === headline);
  return {[link]: shown(anchor), [name]: shown(bold)};"""


@dataclass
class PageLook:
    """One page at one width: which test recalls it shows without a click, and its screenshot."""

    page: str
    width: int
    shown: dict[str, bool]
    screenshot: Path | None

    @property
    def missing(self) -> list[str]:
        return [name for name, seen in self.shown.items() if not seen]


def sweep_links(tracking_uri: str, parent_run_id: str, base: str) -> dict[str, str]:
    """The links of the pages (``report``, ``overview``, ``run``, ``runs``) of the sweep whose parent run is
    ``parent_run_id``, on the UI at ``base``."""
    tracker = MlflowTracker.for_reading(tracking_uri)
    experiment = tracker.client.get_run(parent_run_id).info.experiment_id
    children = tracker.child_runs(parent_run_id)
    if not children:
        raise ValueError(f"run {parent_run_id} has no trials (child runs): not a sweep's parent run")
    richest = max(children, key=lambda run: (len(run.data.metrics), run.info.start_time))
    return {
        "report": ui_link(base, experiment, parent_run_id, artifact=REPORT),
        "overview": ui_link(base, experiment, parent_run_id, tab=OVERVIEW_TAB),
        "run": ui_link(base, experiment, richest.info.run_id),
        "runs": ui_link(base, experiment, view=trials_view_id(parent_run_id)),
    }


def sweep_headline(tracking_uri: str, parent_run_id: str) -> str | None:
    """The headline the parent run's description shows: its bold paragraph, as the UI renders it (Markdown's
    escapes undone); None without one."""
    text = MlflowTracker.for_reading(tracking_uri).client.get_run(parent_run_id).data.tags.get(DESCRIPTION_TAG, "")
    bold = [part[2:-2] for part in text.split("\n\n") if part.startswith("**") and part.endswith("**")]
    return re.sub(r"\\(.)", r"\1", bold[0]) if bold else None


def look_at(
    links: dict[str, str],
    folder: Path,
    shots: Path | None,
    widths: tuple[int, ...],
    timeout: float = 600,
    headline: str | None = None,
) -> list[PageLook]:
    """Each page of ``links`` (:func:`sweep_links`) at each width, in a fresh browser: what it shows (the test
    recalls, the headline; on the Overview the report's link and the ``headline``) once they are on the page (a
    RuntimeError if they never are); with ``shots``, its screenshot ``shots/mlflow-<page>-<width>.png``.
    ``folder`` takes the browsers' logs."""
    found = []
    for width in widths:
        for page, link in links.items():
            with Browser(width, folder, timeout) as browser:
                browser.open(link)
                shown = _look(browser, page, headline)
                shot = browser.screenshot(shots / f"mlflow-{page}-{width}.png") if shots else None
            found.append(PageLook(page, width, shown, shot))
    return found


def _look(browser: Browser, page: str, headline: str | None = None) -> dict[str, bool]:
    if page == "overview":
        browser.wait_for(_script(OVERVIEW_READY, link=REPORT_LINK), "the report's link in the parent's description")
        return browser.evaluate(_script(OVERVIEW_SHOWN, link=REPORT_LINK, headline=headline or "", name=HEADLINE))
    if page == "run":
        names = [chart_name(f"test_{recall}") for recall in RECALLS]  # i2t R@1, R@5, R@10, then t2i
        browser.wait_for(_script(RUN_READY, names=names, section=TEST_SECTION), f"the test charts on {page}")
        return browser.evaluate(_script(RUN_SHOWN, names=names, section=TEST_SECTION))
    if page == "runs":
        names = [chart_name("test_rsum"), RECALLS_TAG]
        browser.wait_for(_script(RUNS_READY, names=names), "the trials' rows in the runs table")
        return browser.evaluate(_script(RUNS_SHOWN, names=names))
    browser.wait_for(_script(FRAME_READY), "the artifact view's frame")
    browser.wait_for(_script(REPORT_READY), "the report's table in its frame", frame_of=True)
    frame = next(frame for frame in browser.frames() if browser.evaluate(_script(REPORT_READY), frame))
    shown = browser.evaluate(_script(REPORT_SHOWN, names=REPORT_HEADERS, scroll=NO_SCROLL, headline=HEADLINE), frame)
    return {**browser.evaluate(_script(ENTRY_SHOWN, entry=REPORT_ENTRY)), **shown}
