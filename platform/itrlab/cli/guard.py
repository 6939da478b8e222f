"""What every ``itrlab`` command shares: bad input, an interruption or a full disk as one line and an exit status
(:func:`guarded`), and the line that says where relative paths land (:func:`say_where_it_writes`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from itrlab.errors import ItrlabError, StorageError, disk_full, failure_reason, report
from itrlab.interrupts import interruption


def interrupted(message: str | None = None) -> int:
    """Print one line for an interruption (``message`` names it, else the signal) and return its exit
    status: 130 for Ctrl-C (SIGINT), 143 for SIGTERM (itrlab.interrupts)."""
    reason, status = interruption()
    print(f"itrlab: {message or reason}", file=sys.stderr, flush=True)
    return status


def guarded(main: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """``main`` with its bad input (exit 2), Ctrl-C or SIGTERM (130, 143) and a full disk (one line) told on one
    line, as every command does."""

    def run(args: argparse.Namespace) -> int:
        try:
            return main(args)
        except ItrlabError as err:
            return report(err)
        except KeyboardInterrupt:
            return interrupted()
        except OSError as err:  # a full disk met by a write of its own: one line, the run FAILED with it
            if not disk_full(err):
                raise
            return report(StorageError(failure_reason(err)))

    return run


def say_where_it_writes(paths: list[tuple[str, Path | str | None]], tracking: bool = True) -> None:
    """One line, before the work starts, when relative paths land outside the project folder (itrlab.workdir)."""
    from itrlab.workdir import elsewhere_line

    line = elsewhere_line(paths, tracking)
    if line:
        print(f"itrlab: {line}", flush=True)
