"""Run every training the manual documents, as a user runs it, and write the dated page of their results
(docs/results/<date>-documented-trainings.md; docs/training.md#every-documented-training).

    python jobs/check_documented_trainings.py                      # every command of README.md and docs/ that trains
    python jobs/check_documented_trainings.py --only convsepp      # the matching ones; the other rows kept
    python jobs/check_documented_trainings.py --list               # the commands, and nothing run

Each command runs from the checkout's root with this job's python; one that runs past --budget-min is stopped
and recorded as failed. Exit status: 0 every row off chance or not run for a stated reason, 1 a row at chance,
on its plateau or failed, 2 bad input. The check's code is the package ``documented`` beside the tests
(tests/documented/), which this job puts on the path; the tests read the same catalogue and page.
"""

import _bootstrap  # noqa: F401 - first: a python without itrlab says how to start the job

import argparse
import logging
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the check's code (tests/documented/)


def positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"got {text}; a number of minutes above 0")
    return value


def pattern(text: str) -> re.Pattern:
    try:
        return re.compile(text)
    except re.error as err:
        raise argparse.ArgumentTypeError(f"got {text!r}; a regular expression ({err})") from None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only",
        type=pattern,
        help="run only the commands this regular expression finds; keep the newest page's rows of the others",
    )
    parser.add_argument("--budget-min", type=positive, default=15, help="a training's time limit (default 15)")
    parser.add_argument(
        "--sweep-budget-min",
        type=positive,
        default=15,
        help="run a sweep only when its --dry-run puts its training at most this long (default 15)",
    )
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "results", help="the page's folder")
    parser.add_argument("--list", action="store_true", help="print the documented trainings and run nothing")
    args = parser.parse_args(argv)
    from documented.catalogue import catalogue

    if args.list:
        for command in catalogue(REPO):
            print(f"{command.kind:8}  {command.text}    ({', '.join(command.pages)})")
        return 0
    if not args.out.is_dir():
        print(f"itrlab: error: --out: {args.out} is not a folder", file=sys.stderr)
        return 2
    from documented.check import Budget, run_check

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    try:
        path, entries = run_check(
            REPO, args.out, sys.executable, Budget(args.budget_min * 60, args.sweep_budget_min * 60), args.only
        )
    except KeyboardInterrupt:
        print("itrlab: interrupted: the page keeps the rows measured before; --only reruns the others", file=sys.stderr)
        return 130
    bad = [entry for entry in entries if not entry.off_chance and entry.reason is None and entry.alias_of is None]
    print(
        f"{path}: {len(entries)} documented trainings, {sum(e.off_chance for e in entries)} run off chance, "
        f"{sum(e.reason is not None for e in entries)} not run (reasons on the page), {len(bad)} to fix"
    )
    for entry in bad:
        print(f"  {entry.command}: {entry.verdict}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
