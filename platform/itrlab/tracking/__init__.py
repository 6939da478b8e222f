"""Experiment tracking in MLflow (the only package of itrlab that imports MLflow)."""

from itrlab.tracking.mlflow_tracker import (STOP_REASON_TAG, MlflowTracker, check_tracking_store, resolve_tracking_uri,
                                            source_tags, ui_hint)

__all__ = ["STOP_REASON_TAG", "MlflowTracker", "check_tracking_store", "resolve_tracking_uri", "source_tags", "ui_hint"]
