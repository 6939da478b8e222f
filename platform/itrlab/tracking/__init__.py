"""Experiment tracking in MLflow (the only package of itrlab that imports MLflow): :mod:`~itrlab.tracking.store`
(which store, whether it works, source tags, UI links), :mod:`~itrlab.tracking.mlflow_tracker` (one run
written and read back), :mod:`~itrlab.tracking.tables` (tables as the MLflow UI shows them),
:mod:`~itrlab.tracking.runs_view` (saved views of an experiment's runs table),
:mod:`~itrlab.tracking.watchdog` (the process that owns a run, and the watchdog a job leaves behind),
:mod:`~itrlab.tracking.owners` (runs of dead processes ended KILLED), :mod:`~itrlab.tracking.models` (trained models
logged and read back) and :mod:`~itrlab.tracking.model_registry` (a sweep's rows as registered models).

The exports are imported when first used (:mod:`itrlab.lazy`), and :mod:`~itrlab.tracking.store` imports
MLflow only to check a store: ``--dry-run`` names the store a cluster job would log to without MLflow."""

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
