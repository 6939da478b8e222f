"""What every job does first: a python that cannot import itrlab ends in one line that says how to start the
job, not in a ``ModuleNotFoundError`` (``python jobs/sweep_dbl.py`` outside the venv); then the job's
console: itrlab logs, and a job shows its records as plain lines (:func:`itrlab.console_log.configure`).

``python jobs/NAME.py`` puts this folder first on ``sys.path``, so each job's ``import _bootstrap``, before
it imports itrlab, finds this file. The check reads the standard library only, and only looks the packages
up; the console imports ``itrlab.console_log`` alone (the standard library's ``logging``), so that a job's
``--help`` stays fast.
"""

from __future__ import annotations

import importlib.util
import shlex
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV_PYTHON = REPO / ".venv" / "bin" / "python"
# the package and what every job imports through it: a venv half installed fails here too
NEEDED = ("itrlab", "torch", "yaml", "pydantic")
EXIT_BAD_START = 2  # as for any bad input: nothing was started


def missing_modules(needed: tuple[str, ...] = NEEDED) -> list[str]:
    """The modules of ``needed`` that this python cannot import."""
    return [name for name in needed if importlib.util.find_spec(name) is None]


def how_to_start(job: str, missing: list[str], python: str = sys.executable, venv_python: Path = VENV_PYTHON) -> str:
    """The one line said when ``missing`` is not empty: which python lacks what, and the command that runs ``job``
    (a path as the user typed it) in the project's venv, or the one that creates the venv first."""
    here = Path.cwd() == REPO  # in the project's folder: paths as the README writes them
    python_path = venv_python.relative_to(REPO) if here and venv_python.is_relative_to(REPO) else venv_python
    command = " ".join(shlex.quote(str(arg)) for arg in [python_path, job, *sys.argv[1:]])
    make = "make setup" if here else f"make -C {shlex.quote(str(REPO))} setup"
    start = (
        f"start it with the project's venv: {command} (or `. {python_path.parent}/activate` once per shell)"
        if venv_python.is_file()
        else f"create the project's venv first (`{make}`), then run: {command}"
    )
    return f"{job}: this python ({python}) cannot import {', '.join(missing)}; {start}"


def require_venv() -> None:
    """Exit with status 2 and one line on stderr when this python lacks what the jobs need."""
    missing = missing_modules()
    if missing:
        print(how_to_start(sys.argv[0], missing), file=sys.stderr)
        raise SystemExit(EXIT_BAD_START)


def configure_console() -> None:
    """The job's console (:mod:`itrlab.console_log`): itrlab's INFO records as lines on stdout, its warnings
    and errors on stderr, as the command line has always shown them."""
    from itrlab.console_log import configure

    configure()


require_venv()
configure_console()
