"""The DDP check of the local cluster (``jobs/local_cluster.py ddp``, submitted as a Ray job): the same tiny
data-parallel trial with its two ranks on two nodes and on one, and what the worker nodes see of the
driver's disk and of the shared storage. Run on the cluster, its driver on the head; the Ray side is
:mod:`itrlab.sweep.ddp_check`, this module imports no Ray.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

_log = logging.getLogger(__name__)


# The platform's own tiny baseline (VSE++, whose loss is the shared itrlab.losses'), no paper's method or scheme:
# the check is of DDP across nodes, not of a method
DEFAULT_EXPERIMENT = "vsepp_synthetic_tiny"


def ddp_check(storage: Path, overrides: Sequence[str] = (), experiment: str = DEFAULT_EXPERIMENT) -> dict[str, Any]:
    """The same tiny DDP trial on two nodes and on one; writes and returns both results
    (``<storage>/ddp_check.json``), with what the worker nodes see of the driver's working directory and
    of the storage."""
    from itrlab.sweep.ddp_check import placed_ddp_runs
    from itrlab.sweep.runner import base_tree
    from itrlab.sweep.trial import trial_config
    from itrlab.tracking import check_tracking_store, resolve_tracking_uri
    from itrlab.train.experiment import generate_if_synthetic

    storage = Path(storage).resolve()
    storage.mkdir(parents=True, exist_ok=True)
    tree = base_tree(SimpleNamespace(experiment=experiment, overrides=list(overrides)), [])
    generate_if_synthetic(trial_config(tree, {}))  # once, on the shared storage
    tracking_uri = check_tracking_store(resolve_tracking_uri())
    # the driver's working directory (the job's, on the head's disk) and the storage, as workers see them
    seen, runs = placed_ddp_runs(
        tree, storage, tracking_uri, time.strftime("%Y%m%d-%H%M%S"), [os.getcwd(), str(storage)]
    )
    report = {
        "experiment": experiment,
        "overrides": list(overrides),
        "runs": runs,
        "driver_cwd": os.getcwd(),
        "workers_see": seen,
    }
    (storage / "ddp_check.json").write_text(json.dumps(report, indent=2))
    for placement, run in runs.items():
        _log.info(f"{placement}: ranks on nodes {run['nodes']}; test_rsum {run['metrics'].get('test_rsum')!r}")
    return report
