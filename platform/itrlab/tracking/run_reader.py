"""Reading runs back from MLflow: :class:`RunReader`, the half of :class:`~itrlab.tracking.mlflow_tracker.MlflowTracker`
that writes nothing: a run's status, a sweep's trials with their metrics per epoch, a metric's history, a run's
artifacts. Metrics come back by itrlab's flat names (:mod:`~itrlab.tracking.chart_names`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from itrlab.errors import UserInputError
from itrlab.tracking.chart_names import flat_metrics, mlflow_names

PARENT_TAG = "mlflow.parentRunId"
SWEEP_TAG = "itrlab.sweep"  # a sweep's parent run: the sweep's name
TRIAL_ID_TAG = "itrlab.trial_id"  # a sweep trial's id on its run


class RunReader:
    """Reads the runs of one tracking store through ``client``; ``run_id`` and ``experiment_id`` (None when
    unset) are the defaults of the calls that take a run or look in an experiment."""

    tracking_uri: str
    client: MlflowClient
    run_id: str | None
    experiment_id: str | None

    def status(self, run_id: str | None = None) -> str | None:
        """The status (RUNNING, FINISHED, FAILED, KILLED) of ``run_id`` (default: this tracker's run)."""
        run_id = run_id or self.run_id
        return self.client.get_run(run_id).info.status if run_id else None

    def child_runs(self, parent_run_id: str | None = None) -> list:
        """The runs whose parent is ``parent_run_id`` (default: this tracker's run), in the parent's experiment, newest
        first."""
        parent = parent_run_id or self.run_id
        experiment_id = self.experiment_id or self.client.get_run(parent).info.experiment_id
        return self.client.search_runs(
            [experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{parent}'", max_results=50000
        )

    def metrics(self, run_id: str) -> dict[str, float]:
        """The latest value of each metric of ``run_id``, by itrlab's names."""
        return flat_metrics(self.client.get_run(run_id).data.metrics)

    def trial_runs(self, parent_run_id: str, parts: bool = True) -> dict[str, dict[str, Any]]:
        """The trials of the sweep whose parent run is ``parent_run_id``, by trial id: each child run's name, run id,
        status, latest ``metrics``, params, tags and ``history`` (series -> (epoch, value) in order: validation rsum,
        training loss, and every logged part of the loss in ``parts``). A trial retried in a new run counts once: its
        run that finished, else its newest."""
        trials: dict[str, Any] = {}
        for run in sorted(self.child_runs(parent_run_id), key=lambda run: run.info.start_time):  # later (and
            # finished) runs of a trial replace its earlier ones
            trial = run.data.tags.get(TRIAL_ID_TAG)
            if trial and (
                trial not in trials or run.info.status == "FINISHED" or trials[trial].info.status != "FINISHED"
            ):
                trials[trial] = run
        found = {}
        for trial, run in trials.items():
            metrics = flat_metrics(run.data.metrics)
            keys = ["rsum", "loss", *sorted(key for key in metrics if parts and key.startswith("loss_"))]
            history = {key: self.metric_history(run.info.run_id, key) for key in dict.fromkeys(keys)}
            found[trial] = {
                "name": run.info.run_name or run.info.run_id,
                "run_id": run.info.run_id,
                "status": run.info.status,
                "metrics": metrics,
                "params": dict(run.data.params),
                "tags": dict(run.data.tags),
                "history": history,
                "loss": history.get("loss", []),
            }
        return found

    def metric_history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        """(step, value) of every value of itrlab's metric ``key`` in ``run_id``, in step order, under each MLflow name
        it may have (:func:`~itrlab.tracking.chart_names.mlflow_names`)."""
        names = mlflow_names(key)
        return sorted((m.step, m.value) for name in names for m in self.client.get_metric_history(run_id, name))

    def run_record(self, run_id: str) -> dict[str, Any]:
        """What a report says of a run: its experiment, name, status, start and end (ms since the
        epoch) and tags; UserInputError for a run the store does not have."""
        try:
            run = self.client.get_run(run_id)
            experiment = self.client.get_experiment(run.info.experiment_id)
        except MlflowException:
            raise UserInputError(f"no MLflow run {run_id} in the store {self.tracking_uri}") from None
        return {
            "run_id": run_id,
            "experiment": experiment.name,
            "name": run.info.run_name,
            "status": run.info.status,
            "start_time": run.info.start_time,
            "end_time": run.info.end_time,
            "tags": dict(run.data.tags),
        }

    def download_artifact(self, run_id: str, path: str, destination: str | Path) -> Path | None:
        """The run's artifact ``path`` copied under ``destination``; None when the run has no such artifact."""
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # one line per page, not bars
        try:
            return Path(self.client.download_artifacts(run_id, path, str(destination)))
        except (MlflowException, OSError):
            return None
