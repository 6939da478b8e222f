"""What a finished sweep's MLflow pages show without a click (the headline and the report's link, the test
recalls), and their screenshots.

The pages as a person first opens them, in headless Chromium at 1280 and 1600 px (docs/mlflow.md, docs/img/).

Starts the UI with the command a sweep prints, on a free loopback port, over the sweep's store; opens the parent
run's page (the sweep's link), a trial's page, the runs table of the trials' link and ``sweep/report.html``
(itrlab.sweep.ui_pages); stops the UI and every browser it started. Exits 1 when a page hides what it must show.

    MLFLOW_TRACKING_URI=sqlite:///$PWD/mlflow.db python jobs/mlflow_screenshots.py PARENT_RUN_ID --out docs/img
"""

import _bootstrap  # noqa: F401 - first: a python without itrlab says how to start the job

import argparse
import sys
import tempfile
from pathlib import Path

from itrlab.errors import ItrlabError, report


def main(argv=None) -> int:
    from itrlab.sweep.ui_pages import WIDTHS, look_at, sweep_headline, sweep_links
    from itrlab.tracking.store import resolve_tracking_uri
    from itrlab.tracking.ui_browser import mlflow_ui

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
