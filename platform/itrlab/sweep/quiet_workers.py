"""Ray's ``worker_process_setup_hook`` of a quiet sweep (:mod:`itrlab.sweep.console`), in a module that
imports nothing but :mod:`logging`.

Ray imports the hook's module in every worker process the sweep's job starts: its trials, and where a
trial runs a TorchTrainer, the Train controller, the workers and Ray Train's helper actors (placement
group cleaner, synchronization, dataset manager, autoscaling coordinator, preemption watcher). Defined in
:mod:`itrlab.sweep.console`, the hook made each of them import Ray Tune, torch and the training loop,
which the helpers never use (what that cost is in docs/speed.md#cpu-figures).
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
