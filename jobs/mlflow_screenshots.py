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
import sys
import tempfile
from pathlib import Path

from itrlab.errors import ItrlabError, report

WIDTHS = (1280, 1600)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("parent_run_id", help="the sweep's parent run (its summary line names it)")
    parser.add_argument("--out", type=Path, help="the folder the screenshots go to (none taken without it)")
    parser.add_argument("--width", type=int, action="append", help=f"a window width (repeatable; default {WIDTHS})")
    args = parser.parse_args(argv)
    # the pages' module loads MLflow, Ray and torch (seconds): imported once the arguments are read, so that
    # `--help` and a bad argument answer at once
    from _chromium import mlflow_ui
    from _mlflow_pages import look_at, sweep_headline, sweep_links
    from itrlab.tracking.store import resolve_tracking_uri

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
