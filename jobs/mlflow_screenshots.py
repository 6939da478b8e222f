"""What a finished sweep's MLflow pages show without a click (the headline and the report's link, the test
recalls), and their screenshots (docs/mlflow.md, docs/img/).

Starts the UI with the command a sweep prints, on a free loopback port, over the sweep's store; opens each page in
a fresh headless Chromium (``_chromium.py``, beside this job) at 1280 and 1600 px; stops the UI and every browser it
started. Exits 1 when a page hides what it must show.

    MLFLOW_TRACKING_URI=sqlite:///$PWD/mlflow.db python jobs/mlflow_screenshots.py PARENT_RUN_ID --out docs/img

The pages as a person first opens them (a fresh browser: MLflow's Assistant panel open, a quarter of the window),
each opened by the link itrlab prints for it (:func:`~itrlab.tracking.store.ui_link`):

* ``report``: the link a sweep prints, the parent run's page on ``sweep/report.html`` (its Artifacts tab, the
  report in a frame of its own): the report's entry in the file list, the headline, the rsum and recall columns,
  and no horizontal scroll;
* ``overview``: the parent run's Overview tab: its description's link to the report and the headline
  (:func:`itrlab.sweep.reporting.description`), under MLflow's boxes (the run's details, its child runs, tags);
* ``run``: a trial's page (the link a training prints: its "Model metrics" tab), the trial with the most
  metrics (a boosted one, with its anchor's tables): its six test recalls are the first charts, two rows of three,
  R@1, R@5, R@10 (:mod:`itrlab.tracking.chart_names`);
* ``runs``: the runs table the description's trials link opens (:mod:`itrlab.sweep.runs_table`): the test rsum column
  and the six recalls' column.

A recall (a link, a headline) counts as shown when the window shows all of its chart's title, column header, report
header or text: inside the window, not under the panel, not cut off by a scroll; a column's header also whole, not
cut short. What a page shows is measured once it is on the page, never after a fixed wait.
"""

from __future__ import annotations

import _bootstrap  # noqa: F401 - first: a python without itrlab says how to start the job

import argparse
import json
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from _chromium import Browser, mlflow_ui
from itrlab.errors import ItrlabError, report
from itrlab.eval.names import RECALLS
from itrlab.sweep.reporting import REPORT, REPORT_LINK
from itrlab.sweep.runs_table import trials_view_id
from itrlab.tracking import MlflowTracker
from itrlab.tracking.chart_names import chart_name
from itrlab.tracking.mlflow_tracker import DESCRIPTION_TAG
from itrlab.tracking.runs_view import RECALLS_TAG
from itrlab.tracking.store import OVERVIEW_TAB, resolve_tracking_uri, ui_link

WIDTHS = (1280, 1600)
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
    shots: Path | None = None,
    widths=WIDTHS,
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("parent_run_id", help="the sweep's parent run (its summary line names it)")
    parser.add_argument("--out", type=Path, help="the folder the screenshots go to (none taken without it)")
    parser.add_argument("--width", type=int, action="append", help=f"a window width (repeatable; default {WIDTHS})")
    args = parser.parse_args(argv)
    uri = resolve_tracking_uri()
    try:
        with tempfile.TemporaryDirectory(prefix="itrlab-ui-") as folder, mlflow_ui(uri, Path(folder)) as base:
            if args.out:
                args.out.mkdir(parents=True, exist_ok=True)
            looks = look_at(
                sweep_links(uri, args.parent_run_id, base),
                Path(folder),
                args.out,
                tuple(args.width or WIDTHS),
                headline=sweep_headline(uri, args.parent_run_id),
            )
    except ItrlabError as err:
        return report(err)
    for look in looks:
        state = f"shown: {', '.join(look.shown)}" if not look.missing else f"hidden: {', '.join(look.missing)}"
        print(f"{look.page:7} {look.width} px  {state}" + (f"  ({look.screenshot})" if look.screenshot else ""))
    return 1 if any(look.missing for look in looks) else 0


if __name__ == "__main__":
    sys.exit(main())
