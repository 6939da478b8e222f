"""Ray's ``worker_process_setup_hook`` of a quiet sweep (:mod:`itrlab.sweep.console`), in a module that imports
nothing but :mod:`logging`: Ray imports it in every worker process the sweep starts, Ray Train's helper actors
included, which would otherwise import Ray Tune, torch and the training loop for nothing (docs/speed.md#cpu-figures).
"""

from __future__ import annotations

import logging

QUIET_LOGGERS = ("ray.tune", "ray.train")  # INFO lines: checkpoint paths, "Wrote the latest version ..."
WORKER_SETUP_HOOK = f"{__name__}.quiet_worker_logs"


def quiet_worker_logs() -> None:
    """Ray's ``worker_process_setup_hook`` for a quiet sweep: Tune's and Train's INFO lines off in every
    worker process (trials, Ray Train workers); their warnings and errors stay."""
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
