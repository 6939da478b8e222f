"""MLflow tracking: the only module of itrlab that imports MLflow.

One :class:`MlflowTracker` writes one run: the flattened config as params, per-epoch metrics,
recall tables (as an MLflow table, JSON and Markdown), and tags naming the method, dataset,
protocol and seed. It talks to MLflow through an explicit ``MlflowClient`` bound to one
tracking URI, never through the process-global active run, so that several trackers (a sweep's
parent and its trials) can live in one process.

The tracking URI is ``MLFLOW_TRACKING_URI`` when set; otherwise a SQLite store ``mlflow.db`` in the
working directory (MLflow 3's own default, made explicit so that every process agrees on it).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Mapping

import mlflow
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunStatus, RunTag

from itrlab.eval import RecallTable

TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"
MAX_PARAMS_PER_BATCH = 100  # MLflow's log_batch limit
PARENT_TAG = "mlflow.parentRunId"

logging.getLogger("alembic").setLevel(logging.WARNING)


def resolve_tracking_uri(uri: str | None = None) -> str:
    """The tracking URI to use: the argument, else ``$MLFLOW_TRACKING_URI``, else ``./mlflow.db``."""
    if uri:
        return uri
    if os.environ.get(TRACKING_URI_ENV):
        return os.environ[TRACKING_URI_ENV]
    return f"sqlite:///{Path.cwd() / 'mlflow.db'}"


def ui_hint(tracking_uri: str, experiment_id: str, run_id: str | None = None) -> str:
    """How a person opens the MLflow UI on this run."""
    fragment = f"#/experiments/{experiment_id}" + (f"/runs/{run_id}" if run_id else "")
    if tracking_uri.startswith(("http://", "https://")):
        return f"open {tracking_uri.rstrip('/')}/{fragment}"
    return (f"run `mlflow ui --backend-store-uri {tracking_uri} --port 5000` "
            f"and open http://127.0.0.1:5000/{fragment}")


class MlflowTracker:
    """Writes one MLflow run (create, or reopen by id when a training resumes)."""

    def __init__(self, experiment: str, tracking_uri: str | None = None):
        self.tracking_uri = resolve_tracking_uri(tracking_uri)
        mlflow.set_tracking_uri(self.tracking_uri)  # for the artifact helpers of log_table
        self.client = MlflowClient(tracking_uri=self.tracking_uri)
        found = self.client.get_experiment_by_name(experiment)
        self.experiment_id = found.experiment_id if found else self.client.create_experiment(experiment)
        self.experiment = experiment
        self.run_id: str | None = None
        self.default_tags: dict[str, Any] = {}  # added to the tags of a run this tracker creates

    # -- run lifecycle -----------------------------------------------------------------------
    def start(self, run_name: str, tags: Mapping[str, Any], params: Mapping[str, str],
              run_id: str | None = None, parent_run_id: str | None = None) -> str:
        """Create a run, or reopen ``run_id`` (a resumed training) and mark it running again."""
        if run_id is not None:
            self.run_id = run_id
            self.client.update_run(run_id, status="RUNNING")
            logged = self.client.get_run(run_id).data.params
            params = {k: v for k, v in params.items() if k not in logged}
        else:
            all_tags = {k: str(v) for k, v in {**tags, **self.default_tags}.items()}
            if parent_run_id:
                all_tags[PARENT_TAG] = parent_run_id
            run = self.client.create_run(self.experiment_id, tags=all_tags, run_name=run_name)
            self.run_id = run.info.run_id
        items = [Param(k, str(v)[:6000]) for k, v in params.items()]
        for start in range(0, len(items), MAX_PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=items[start:start + MAX_PARAMS_PER_BATCH])
        return self.run_id

    def find_run(self, tags: Mapping[str, str]) -> str | None:
        """The id of this experiment's run carrying all ``tags`` (the newest), or None."""
        query = " and ".join(f"tags.`{k}` = '{v}'" for k, v in tags.items())
        runs = self.client.search_runs([self.experiment_id], filter_string=query, max_results=1,
                                       order_by=["attributes.start_time DESC"])
        return runs[0].info.run_id if runs else None

    def end(self, status: str = "FINISHED") -> None:
        if self.run_id is not None:
            self.client.set_terminated(self.run_id, status=RunStatus.to_string(RunStatus.from_string(status)))

    # -- logging ------------------------------------------------------------------------------
    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        timestamp = mlflow.utils.time.get_current_time_millis()
        batch = [Metric(k, float(v), timestamp, step) for k, v in metrics.items()]
        self.client.log_batch(self.run_id, metrics=batch)

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        self.client.log_batch(self.run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def log_recall_table(self, table: RecallTable, split: str, step: int = 0) -> None:
        """The table as an MLflow table, JSON and Markdown artifacts, and ``{split}_*`` metrics.

        MLflow appends to an existing table artifact, so each logging adds rows tagged with
        ``epoch`` (the epochs trained): a resumed run that trains longer shows both results.
        The JSON and Markdown artifacts hold the latest table.
        """
        columns = table.columns()
        columns["epoch"] = [step] * len(columns["direction"])
        self.client.log_table(self.run_id, data=columns, artifact_file=f"recall/{split}_table.json")
        self.client.log_dict(self.run_id, table.to_dict(), f"recall/{split}.json")
        self.client.log_text(self.run_id, table.to_markdown(), f"recall/{split}.md")
        self.log_metrics(table.metrics(prefix=f"{split}_"), step=step)

    def log_table(self, data: dict[str, list], artifact_file: str) -> None:
        self.client.log_table(self.run_id, data=data, artifact_file=artifact_file)

    def log_dict(self, data: dict, artifact_file: str) -> None:
        self.client.log_dict(self.run_id, data, artifact_file)

    def log_text(self, text: str, artifact_file: str) -> None:
        self.client.log_text(self.run_id, text, artifact_file)

    def ui_hint(self) -> str:
        return ui_hint(self.tracking_uri, self.experiment_id, self.run_id)
