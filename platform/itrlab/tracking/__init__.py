"""Experiment tracking in MLflow (the only package of itrlab that imports MLflow)."""

from itrlab.tracking.mlflow_tracker import MlflowTracker, check_tracking_store, resolve_tracking_uri, source_tags, ui_hint

__all__ = ["MlflowTracker", "check_tracking_store", "resolve_tracking_uri", "source_tags", "ui_hint"]
