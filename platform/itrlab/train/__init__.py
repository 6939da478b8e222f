"""Training: the epoch loop, checkpoints and resume, and one whole run (data, model, MLflow).

The exports are imported when first used (:mod:`itrlab.lazy`): ``itrlab.train.throughput`` and
``itrlab.train.stage_identity`` (``--dry-run``) do not import MLflow."""

from itrlab.lazy import lazy_exports

_EXPORTS = {
    "ConsoleProgress": "callbacks",
    "LossHistory": "callbacks",
    "RunResult": "experiment",
    "prepare_data": "experiment",
    "run_experiment": "experiment",
    "EpochReport": "loop",
    "NonFiniteLossError": "loop",
    "Trainer": "loop",
    "TrainingData": "loop",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
