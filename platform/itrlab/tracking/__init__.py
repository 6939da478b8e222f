"""Experiment tracking in MLflow, the only package of itrlab that imports MLflow (its modules: docs/architecture.md).
The exports are imported when first used (:mod:`itrlab.lazy`), and :mod:`~itrlab.tracking.store` imports MLflow
only to check a store: ``--dry-run`` names the store a cluster job would log to without MLflow."""

from itrlab.lazy import lazy_exports

_EXPORTS = {
    "OWNER_TAG": "mlflow_tracker",
    "STOP_REASON_TAG": "mlflow_tracker",
    "SWEEP_TAG": "run_reader",
    "MlflowTracker": "mlflow_tracker",
    "close_orphaned_runs": "owners",
    "owner_id": "itrlab.process_id",
    **dict.fromkeys(
        ["TRACKING_URI_ENV", "check_tracking_store", "resolve_tracking_uri", "source_tags", "ui_hint"], "store"
    ),
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
