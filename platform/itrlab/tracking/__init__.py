"""Experiment tracking in MLflow (the only package of itrlab that imports MLflow): :mod:`~itrlab.tracking.store`
(which store, whether it works, source tags, UI links), :mod:`~itrlab.tracking.mlflow_tracker` (one run
written and read back), :mod:`~itrlab.tracking.tables` (tables as the MLflow UI shows them)."""

from itrlab.tracking.mlflow_tracker import STOP_REASON_TAG, MlflowTracker
from itrlab.tracking.store import TRACKING_URI_ENV, check_tracking_store, resolve_tracking_uri, source_tags, ui_hint

__all__ = ["STOP_REASON_TAG", "TRACKING_URI_ENV", "MlflowTracker", "check_tracking_store", "resolve_tracking_uri",
           "source_tags", "ui_hint"]
