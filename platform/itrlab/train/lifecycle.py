"""One training run's life from its folder to its result, shared by ``itrlab train`` and a sweep's trial.

:class:`RunLifecycle` holds the run folder against a second process (``hold``: a fresh run's folder is claimed
once every check passed, under another name when another run took it, and a folder made here that nothing landed
in is removed again), checks what a ``--resume`` changes (:meth:`~RunLifecycle.check_resume`), runs the checks
before MLflow (:meth:`~RunLifecycle.open`: the data's content, the MLflow store, the runs dead processes left
RUNNING on it ended KILLED, then the process watched, :mod:`itrlab.tracking.watchdog`) and trains
(:meth:`~RunLifecycle.train`: :func:`~itrlab.train.experiment.run_experiment`, whose tracker ends the MLflow run
FINISHED, FAILED or KILLED). A run that failed before its MLflow run opened gets one all the same, ended FAILED
with the reason (:meth:`~RunLifecycle.fail`). A sweep's trial holds its folder through its store
(:mod:`itrlab.sweep.trial_store`), and its driver checked the store: it passes its own tracker and neither holds
nor opens.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from itrlab.assembly import Experiment
from itrlab.config import ExperimentConfig
from itrlab.config.checks import check_data_content
from itrlab.errors import failure_reason
from itrlab.files import claim_new_dir, file_lock
from itrlab.tracking import MlflowTracker, check_tracking_store, close_orphaned_runs
from itrlab.tracking.watchdog import watching
from itrlab.train.experiment import MLFLOW_FILE, RunResult, recorded_run_id, run_experiment
from itrlab.train.loop import EpochCallback
from itrlab.train.provenance import check_resume, finished_resume

_log = logging.getLogger(__name__)


@dataclass
class RunLifecycle:
    """One run, used as a context manager: entering holds its folder (with ``hold``), leaving releases it and
    removes a folder made here that nothing landed in."""

    # a config is checked against its data where the run starts; None: given to train() (a trial checks its own)
    experiment: Experiment | ExperimentConfig | None
    run_dir: Path
    tracker: MlflowTracker | None = None  # none given: made by :meth:`train` after :meth:`open`, with tracking
    parent_run_id: str | None = None
    run_name: str | None = None
    hold: bool = False  # lock the folder for as long as the run lives
    claim: bool = False  # with ``hold``: a new folder, claimed by :meth:`open` (``<name>-1`` ... when taken)
    changes: list[str] = field(default_factory=list)  # what a --resume --allow-changes changes (check_resume)
    _held: contextlib.ExitStack = field(default_factory=contextlib.ExitStack, init=False, repr=False)
    _made: bool = field(default=False, init=False, repr=False)
    _opened: bool = field(default=False, init=False, repr=False)

    @property
    def config(self) -> ExperimentConfig:
        return self.experiment.config if isinstance(self.experiment, Experiment) else self.experiment

    def __enter__(self) -> RunLifecycle:
        if self.hold and not self.claim:
            self._made = not self.run_dir.exists()
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._lock()
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._held.__exit__(*exc)
        finally:
            if self._made and self.run_dir.is_dir() and not any(self.run_dir.iterdir()):
                self.run_dir.rmdir()

    def _lock(self) -> None:
        self._held.enter_context(file_lock(self.run_dir, blocking=False, what=f"the run folder {self.run_dir}"))

    def check_resume(self, allow_changes: bool) -> str | None:
        """A resume's changes against what the run recorded (a UserInputError for one refused; those accepted with
        ``allow_changes`` kept in :attr:`changes`, recorded on the MLflow run once it is reopened), then the line a
        finished run answers with when it has nothing to train (None when it trains)."""
        self.changes = check_resume(self.run_dir, self.config, allow_changes)
        return finished_resume(self.run_dir, self.config)

    def open(self, watch: str = "the training") -> None:
        """Every check that can run before MLflow and the run folder exist (the data's content); with tracking,
        the MLflow store checked and its orphaned runs ended KILLED; then the folder claimed and locked, and the
        process watched (``watch`` names it) for as long as it owns an MLflow run."""
        config = self.config
        check_data_content(config)
        if config.tracking.enabled:
            close_orphaned_runs(check_tracking_store())  # answers; runs of dead processes here end KILLED
        if self.claim:
            self.run_dir, self._made = claim_new_dir(self.run_dir.parent, self.run_dir.name), True
            self._lock()
        if config.tracking.enabled:
            self._held.enter_context(watching(watch))
        self._opened = True

    def train(
        self,
        callbacks: Sequence[EpochCallback] = (),
        experiment: Experiment | ExperimentConfig | None = None,
        *,
        rank: int = 0,
        world_size: int = 1,
        device: torch.device | None = None,
    ) -> RunResult:
        """Train (or continue training) in the run folder and evaluate the best checkpoint on test
        (:func:`~itrlab.train.experiment.run_experiment`); the MLflow run ends as the training does. ``experiment``:
        the run's, when it was not known as the run began; ``rank``, ``world_size`` and ``device``: a Ray Train
        worker's."""
        self.experiment = experiment or self.experiment
        if self.tracker is None and self._opened and self.config.tracking.enabled:
            self.tracker = MlflowTracker(self.config.experiment_name)
            self.tracker.resume_changes = self.changes  # recorded on the run once it is reopened
        return run_experiment(
            self.experiment,
            self.run_dir,
            callbacks=list(callbacks),
            tracker=self.tracker,
            parent_run_id=self.parent_run_id,
            run_name=self.run_name,
            rank=rank,
            world_size=world_size,
            device=device,
        )

    @property
    def mlflow_run_opened(self) -> bool:
        """Whether the run opened an MLflow run (which its tracker ends KILLED on an interruption)."""
        return self.tracker is not None and self.tracker.run_id is not None

    def fail(self, reason: str) -> None:
        """The run failed with ``reason``: recorded on its MLflow run (:func:`record_failure`)."""
        record_failure(self.tracker, self.run_dir, reason, self.run_name or "", self.parent_run_id)


def record_failure(
    tracker: MlflowTracker | None, run_dir: Path, reason: str, run_name: str, parent_run_id: str | None
) -> None:
    """A run that failed before its MLflow run started (bad data, say) gets a run all the same, ended
    FAILED with ``reason``, so that MLflow shows why it failed (a started run was ended by
    :meth:`MlflowTracker.ending` inside ``run_experiment``)."""
    if tracker is None or (tracker.run_id is not None and tracker.status() != "RUNNING"):
        return
    try:
        if tracker.run_id is None:
            reuse = recorded_run_id(run_dir / MLFLOW_FILE)
            tracker.start(run_name=run_name, tags={}, params={}, run_id=reuse, parent_run_id=parent_run_id)
        tracker.stop("FAILED", reason)
    except Exception as err:  # MLflow itself failing must not hide the trial's own error
        _log.warning(f"itrlab: could not record the failure on the MLflow run: {failure_reason(err)}")
