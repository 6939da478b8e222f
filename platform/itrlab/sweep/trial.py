"""One sweep trial: a Ray Tune function trial that runs one training run and reports every epoch.

A one-worker trial trains inside its own trial process (the fast path: well under a second of
overhead). ``num_workers > 1`` starts a Ray Train ``TorchTrainer`` inside the trial (see
:mod:`itrlab.sweep.distributed`). After every epoch the trial reports the epoch's metrics with a
Tune checkpoint of its run directory; a restarted trial (a crash retried under
``max_failures``, or ``--resume`` of an interrupted sweep) restores that directory and the
trainer continues from ``last.pt``. Its MLflow child run is found again by the trial id tag, so a
restart never creates a second run. A trial whose loss turns NaN or infinite stops, its run is
marked FAILED with the reason, and the sweep goes on.
"""

from __future__ import annotations

import copy
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray import tune

from itrlab.config import validate
from itrlab.config.loader import set_path
from itrlab.errors import ItrlabError
from itrlab.tracking import MlflowTracker
from itrlab.train import EpochReport, NonFiniteLossError, run_experiment
from itrlab.train.experiment import MLFLOW_FILE

TRIAL_TAG = "itrlab.trial_id"
STOP_REASON_TAG = "itrlab.stop_reason"


@dataclass(frozen=True)
class TrialContext:
    """What every trial of one sweep invocation shares (small: sent to each trial)."""

    base_tree: dict[str, Any]  # the composed experiment, absolute paths
    experiment: str  # MLflow experiment of the sweep
    tracking_uri: str
    parent_run_id: str
    sweep_name: str
    storage_dir: str = ""  # where multi-worker trials keep their Ray Train runs


def trial_config(base_tree: dict[str, Any], params: dict[str, Any]):
    """The validated experiment config of one trial: the base tree with the trial's dotted keys set."""
    tree = copy.deepcopy(base_tree)
    for key, value in params.items():
        set_path(tree, key.split("."), value)
    return validate(tree)


class TuneReporter:
    """Reports each epoch to Tune with a checkpoint of the run directory."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.last: dict[str, float] = {"rsum": float("nan")}

    def on_epoch_end(self, report: EpochReport) -> None:
        self.last = {"epoch": report.epoch, **report.metrics()}
        tune.report(self.last, checkpoint=tune.Checkpoint.from_directory(str(self.run_dir)))


def restore_run_dir(run_dir: Path) -> None:
    """Copy the trial's latest Tune checkpoint (if any) into its run directory."""
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        return
    with checkpoint.as_directory() as saved:
        shutil.copytree(saved, run_dir, dirs_exist_ok=True)


def reuse_child_run(tracker: MlflowTracker, run_dir: Path, trial_id: str, parent_run_id: str) -> None:
    """Point the run directory at this trial's existing MLflow child run, if there is one."""
    if (run_dir / MLFLOW_FILE).is_file():
        return
    existing = tracker.find_run({TRIAL_TAG: trial_id, "mlflow.parentRunId": parent_run_id})
    if existing is not None:
        (run_dir / MLFLOW_FILE).write_text(json.dumps({"run_id": existing, "tracking_uri": tracker.tracking_uri}))


def run_trial(params: dict[str, Any], context: TrialContext) -> None:
    """The Tune function trainable."""
    tune_context = tune.get_context()
    trial_id = tune_context.get_trial_id()
    config = trial_config(context.base_tree, params)
    run_dir = Path(tune_context.get_trial_dir()) / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    restore_run_dir(run_dir)

    tracker = MlflowTracker(context.experiment, context.tracking_uri)
    reuse_child_run(tracker, run_dir, trial_id, context.parent_run_id)
    tracker.default_tags = {TRIAL_TAG: trial_id, "itrlab.sweep": context.sweep_name,
                            **{f"param.{k}": v for k, v in params.items()}}
    reporter = TuneReporter(run_dir)
    try:
        result = run_experiment(config, run_dir, callbacks=[reporter], tracker=tracker,
                                parent_run_id=context.parent_run_id, run_name=f"{context.sweep_name}-{trial_id}")
    except NonFiniteLossError as err:  # recorded, not retried: the sweep goes on
        tracker.set_tags({STOP_REASON_TAG: str(err)})
        tune.report({**reporter.last, "diverged": 1, "stop_reason": str(err)})
        return
    except ItrlabError as err:
        tracker.set_tags({STOP_REASON_TAG: str(err)})
        raise
    # the final report repeats the last epoch's validation metrics so the objective stays defined
    tune.report({**reporter.last, "done": 1, "best_epoch": result.best_epoch, "best_val_rsum": result.best_val_rsum,
                 "run_seconds": result.seconds, "trial_end_time": time.time(),
                 **result.test.metrics(prefix="test_")})
