"""What every benchmark does first, as every job does: ``jobs/_bootstrap.py`` (a python that cannot import itrlab
ends in one line that says how to start the script; then the console that shows itrlab's log records).

``python benchmarks/NAME.py`` puts this folder first on ``sys.path``, so each script's ``import _bootstrap``
finds this file, which runs the jobs' own (the standard library only, nothing imported from itrlab first)."""

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "_jobs_bootstrap", Path(__file__).resolve().parents[1] / "jobs" / "_bootstrap.py"
)
_spec.loader.exec_module(importlib.util.module_from_spec(_spec))
