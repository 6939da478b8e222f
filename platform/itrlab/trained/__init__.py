"""Trained models: a run's best model as a folder and an MLflow model, opened for use, loaded from a URI, run id or
folder, and evaluated on any data and protocol, alone or as an ensemble (its modules: docs/architecture.md). The exports
are imported when first used (:mod:`itrlab.lazy`)."""

from itrlab.lazy import lazy_exports

_EXPORTS = {
    "TrainedModel": "model",
    "open_bundle": "model",
    "load_model": "sources",
    "bundle_from_run": "sources",
    **dict.fromkeys(["Evaluation", "evaluate_models", "open_eval_split"], "evaluation"),
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
