"""Experiment tracking in MLflow (the only package of itrlab that imports MLflow): :mod:`~itrlab.tracking.store`
(which store, whether it works, source tags, UI links), :mod:`~itrlab.tracking.mlflow_tracker` (one run
written and read back), :mod:`~itrlab.tracking.tables` (tables as the MLflow UI shows them),
:mod:`~itrlab.tracking.watchdog` (the process that owns a run, and the watchdog a job leaves behind),
:mod:`~itrlab.tracking.owners` (runs of dead processes ended KILLED)."""

from itrlab.tracking.mlflow_tracker import OWNER_TAG, STOP_REASON_TAG, MlflowTracker
from itrlab.tracking.owners import close_orphaned_runs
from itrlab.process_id import owner_id
from itrlab.tracking.store import TRACKING_URI_ENV, check_tracking_store, resolve_tracking_uri, source_tags, ui_hint

__all__ = ["OWNER_TAG", "STOP_REASON_TAG", "close_orphaned_runs", "owner_id", "TRACKING_URI_ENV", "MlflowTracker", "check_tracking_store", "resolve_tracking_uri",
           "source_tags", "ui_hint"]
