"""One sweep trial: a Ray Tune function trial that runs one training run and reports every epoch.

A one-worker trial trains inside its own trial process (the fast path: well under a second of overhead).
``num_workers > 1`` starts a Ray Train ``TorchTrainer`` inside the trial (see :mod:`itrlab.sweep.ddp_trial`).
After every epoch the trial saves its run directory in the sweep's storage (:mod:`itrlab.sweep.trial_store`, in
the folder its grid point names), then reports the epoch's metrics. A restarted trial (a crash retried under
``max_failures``, or ``--resume`` of an interrupted sweep) restores that directory, reports again what it had
reported, and the trainer continues from ``last.pt``; a trial that had ended reports its result again and trains
nothing. Its MLflow child run is found again by the trial's key (``itrlab.trial_id``, its folder's name), so a
restart never creates a second run.

A trial whose loss turns NaN or infinite stops, its run is marked FAILED with the reason, and the sweep goes on. A
trial that fails on its input (a :class:`~itrlab.errors.UserInputError`: its data or config) is not retried: it
reports the error, which tells the sweep's driver to give it no further attempt, and fails. Every failure leaves
its reason on the trial's MLflow run (tag ``itrlab.stop_reason``), created if the trial failed before training
started.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from ray import tune

from itrlab.config import ExperimentConfig
from itrlab.config.sweep import VARIANT, label
from itrlab.errors import StorageError, UserInputError, failure_reason
from itrlab.sweep.board import BOARD_FOLDER, BoardWriter
from itrlab.sweep.points import point_key, trial_config, trial_point
from itrlab.sweep.trial_store import TrialStore, trial_key
from itrlab.tracking import MlflowTracker
from itrlab.tracking.run_reader import TRIAL_ID_TAG as TRIAL_TAG
from itrlab.train import EpochReport, NonFiniteLossError, RunResult
from itrlab.train.decay_choice import DecayChoice
from itrlab.train.experiment import MLFLOW_FILE, recorded_run_id
from itrlab.train.lifecycle import RunLifecycle

_log = logging.getLogger(__name__)

NODE_TAG = "itrlab.node_id"  # the Ray node of the trial's latest attempt
NODES_TAG = "itrlab.node_ids"  # every attempt's node, in order: a trial retried after a lost node names both
INPUT_ERROR = "input_error"  # in a trial's last result: it failed on its input, do not retry it
STORAGE_ERROR = "storage_error"  # in a trial's last result: it could not write its checkpoint: stop the sweep


@dataclass(frozen=True)
class TrialContext:
    """What every trial of one sweep invocation shares (sent once, through Ray's object store, by
    ``tune.with_parameters``)."""

    base_tree: dict[str, Any]  # the composed experiment, absolute paths
    experiment: str  # MLflow experiment of the sweep
    tracking_uri: str
    parent_run_id: str
    sweep_name: str
    storage_dir: str = ""  # where multi-worker trials keep their Ray Train runs
    sweep_dir: str = ""  # the sweep's folder: each trial keeps its saved state under <sweep_dir>/trials/<key>
    metric: str = "rsum"  # the objective: every report carries it (NaN before the first epoch)
    source: tuple[tuple[str, str], ...] = ()  # the driver's MLflow source tags (user, script, git commit)
    # the grid points' configs as the driver checked them before Ray started, by point_key(params)
    checked: dict[str, ExperimentConfig] = field(default_factory=dict)


def config_of(context: TrialContext, params: dict[str, Any]) -> ExperimentConfig:
    """A trial's checked config: the driver's for a grid point (checked once, before Ray started), else
    (an Optuna trial's sampled point, or a context without them) checked here."""
    checked = context.checked.get(point_key(params))
    return checked.model_copy(deep=True) if checked is not None else trial_config(context.base_tree, params)


class EpochReporter:
    """Reports each epoch's metrics through ``report`` (``tune.report`` in a function trial,
    ``ray.train.report`` in a TorchTrainer worker). With a ``store``, the run directory is saved there first,
    with every result reported so far (``reports``: those an earlier attempt reported, replayed already).
    ``last`` holds the latest metrics."""

    def __init__(
        self,
        run_dir: Path,
        report: Callable[..., None],
        metric: str = "rsum",
        store: TrialStore | None = None,
        reports: list[dict[str, Any]] | None = None,
    ):
        self.run_dir, self.report = run_dir, report
        self.store, self.reports = store, list(reports or [])
        first = {"rsum": float("nan"), metric: float("nan")}
        self.last: dict[str, float] = dict(self.reports[-1]) if self.reports else first

    def on_epoch_end(self, report: EpochReport) -> None:
        self.last = {"epoch": report.epoch, **report.metrics()}
        self.reports.append(self.last)
        if self.store is not None:  # a StorageError when the storage does not take it: the sweep stops
            self.store.save(report.epoch, self.run_dir, self.reports)
        self.report(self.last)

    def end(self, result: dict[str, Any]) -> None:
        """Report the trial's last result, recorded first as how it ended (a resume reports it again)."""
        if self.store is not None:
            self.store.finish(result)
        self.report(result)

    def on_decay_chosen(self, choice: DecayChoice) -> None:
        """A run that chose its decay (``train.lr_decay_choices``) ends on the chosen branch: the final report
        repeats that branch's last epoch, not the last branch trained."""
        if choice.history:
            self.last = dict(choice.history[-1])


def trial_tags(trial_id: str, sweep_name: str, params: dict[str, Any], run_dir: str | None = None) -> dict[str, Any]:
    """Tags of a trial's MLflow child run: its key (how a restart finds the run), sweep and swept values,
    and ``run_dir``: where the trial's checkpoints live in the sweep's storage (not the temporary
    folder Ray runs the trial in)."""
    tags = {TRIAL_TAG: trial_id, "itrlab.sweep": sweep_name}
    for key, value in params.items():  # a named variant by its name (the UI groups by it), its settings apart
        tags[f"param.{key}"] = label(value, key)
        if isinstance(value, dict):
            tags[f"param.{key}.settings"] = json.dumps({k: v for k, v in value.items() if k != "name"}, default=str)
    if run_dir:
        tags["run_dir"] = run_dir
    return tags


def trial_params(params: dict[str, Any]) -> dict[str, str]:
    """MLflow params a trial's run gets beside its config's: a named variant by its name (the UI's
    group-by and the compare page's box plots split by params)."""
    return {key: label(value, key) for key, value in params.items() if key == VARIANT}


def node_tags(tracker: MlflowTracker, run_dir: Path) -> dict[str, str]:
    """The Ray node this attempt of the trial runs on, as the tags ``itrlab.node_id`` and ``itrlab.node_ids``
    (every attempt's node, comma-separated). The run an earlier attempt created gets them at once (a
    reopened run keeps the tags it was created with); returned for the run this attempt creates."""
    node = ray.get_runtime_context().get_node_id()
    try:
        run_id = recorded_run_id(run_dir / MLFLOW_FILE)
        earlier = tracker.client.get_run(run_id).data.tags.get(NODES_TAG, "") if run_id else None
    except Exception:  # a record, or a run, that run_experiment refuses with its own message
        earlier = None
    if earlier is None:
        return {NODE_TAG: node, NODES_TAG: node}
    tags = {NODE_TAG: node, NODES_TAG: ",".join([*filter(None, earlier.split(",")), node])}
    for key, value in tags.items():
        tracker.client.set_tag(run_id, key, value)
    return tags


def trial_run_name(params: dict[str, Any]) -> str:
    """A trial's MLflow run name: what it varies, ``strategy=F seed=0`` (the last part of a dotted key;
    a named variant or a whole section by its label), so that runs can be told apart in the UI."""
    parts = []
    for key, value in params.items():
        shown = label(value, key)
        parts.append(str(shown) if isinstance(value, dict) else f"{key.rsplit('.', 1)[-1]}={shown}")
    return " ".join(parts) or "trial"


def reuse_child_run(tracker: MlflowTracker, run_dir: Path, trial_id: str, parent_run_id: str) -> None:
    """Point the run directory at this trial's existing MLflow child run, if there is one."""
    if (run_dir / MLFLOW_FILE).is_file():
        return
    existing = tracker.find_run({TRIAL_TAG: trial_id, "mlflow.parentRunId": parent_run_id})
    if existing is not None:
        (run_dir / MLFLOW_FILE).write_text(json.dumps({"run_id": existing, "tracking_uri": tracker.tracking_uri}))


def train_and_report(train: Callable[[], RunResult], reporter: EpochReporter, run: RunLifecycle) -> None:
    """Run ``train`` (``run``'s training) and report how it ended through the reporter's channel.

    A loss that turned NaN or infinite is reported as ``diverged`` with its reason (recorded, not
    retried: the sweep goes on). An input error (UserInputError) is reported with ``input_error`` set,
    which tells the driver not to retry the trial, then raised: the trial fails with its real message.
    A checkpoint that cannot be written (StorageError) is reported with ``storage_error`` set: the
    driver stops the whole sweep, whose storage every trial shares.
    Any other error is raised (Tune retries the trial up to ``max_failures`` times). Each leaves its
    reason on the MLflow run, which ends FAILED. The final report repeats the last epoch's validation
    metrics, so the objective stays defined, and adds the test table and the timings the overhead
    benchmark reads.
    """
    try:
        result = train()
    except NonFiniteLossError as err:  # recorded, not retried: the sweep goes on
        run.fail(str(err))
        reporter.end({**reporter.last, "diverged": 1, "stop_reason": str(err)})
        return
    except StorageError as err:  # the sweep's storage, not this trial, is broken: the driver stops the sweep
        run.fail(failure_reason(err))
        reporter.report({**reporter.last, STORAGE_ERROR: 1, "stop_reason": failure_reason(err)})
        raise
    except UserInputError as err:  # retrying cannot help: the driver gives this trial no further attempt
        run.fail(failure_reason(err))
        reporter.report({**reporter.last, INPUT_ERROR: 1, "stop_reason": failure_reason(err)})
        raise
    except Exception as err:  # Tune retries the trial (into the same run) up to max_failures times
        run.fail(failure_reason(err))
        raise
    # "epoch" from the result too: a trial restored from its last epoch's checkpoint trains no epoch here
    reporter.end(
        {
            **reporter.last,
            "done": 1,
            "epoch": result.epochs,
            "best_epoch": result.best_epoch,
            "best_val_rsum": result.best_val_rsum,
            "run_seconds": result.seconds,
            "trial_end_time": time.time(),
            **result.test_metrics(),
        }
    )


def board_writer(context: TrialContext, trial_id: str) -> list[BoardWriter]:
    """The callback that notes the trial's phase and step on the sweep's progress board (none without a sweep
    folder)."""
    return [BoardWriter(Path(context.sweep_dir) / BOARD_FOLDER, trial_id)] if context.sweep_dir else []


def working_folder(name: str) -> Path:
    """The folder ``name`` under this Tune trial's directory, where the trial works (its saved state is restored
    into it)."""
    folder = Path(tune.get_context().get_trial_dir()) / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def replayed(
    store: TrialStore, point: dict[str, Any], working: Path | None = None
) -> tuple[list[dict[str, Any]], bool]:
    """Start a trial from its saved state: record its point, restore its newest saved epoch into ``working``
    (emptied first: what an attempt that crashed left after it), and report again what it reported up to that
    epoch and, for a trial that had ended, its last result. (The reports, whether it had ended: then it trains
    nothing.)"""
    store.begin(point)
    final = store.final()
    if working is not None:
        shutil.rmtree(working)
        working.mkdir()
    reports = store.restore(working) if working is not None and final is None else store.reports()
    for result in reports:
        tune.report(result)
    if final is not None:
        tune.report(final)
    return reports, final is not None


def run_trial(params: dict[str, Any], context: TrialContext) -> None:
    """The Tune function trainable."""
    params = trial_point(params)
    store = TrialStore(context.sweep_dir, trial_key(params))
    with store.held():
        _run_trial(params, context, store)


def _run_trial(params: dict[str, Any], context: TrialContext, store: TrialStore) -> None:
    run_dir = working_folder("run")  # Tune runs the trial in a temporary folder: its state is saved in the store
    reports, ended = replayed(store, params, run_dir)
    if ended:
        return

    tracker = MlflowTracker(context.experiment, context.tracking_uri)
    reuse_child_run(tracker, run_dir, store.key, context.parent_run_id)
    tracker.default_tags = {
        **dict(context.source),
        **trial_tags(store.key, context.sweep_name, params, run_dir=str(store.folder)),
        **node_tags(tracker, run_dir),
    }
    tracker.default_params = trial_params(params)
    reporter = EpochReporter(run_dir, tune.report, metric=context.metric, store=store, reports=reports)
    run = RunLifecycle(None, run_dir, tracker, context.parent_run_id, trial_run_name(params))
    callbacks = [reporter, *board_writer(context, tune.get_context().get_trial_id())]
    train_and_report(lambda: run.train(callbacks, config_of(context, params)), reporter, run)
