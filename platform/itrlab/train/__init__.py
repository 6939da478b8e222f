"""Training: the epoch loop, checkpoints and resume, and one whole run (data, model, MLflow)."""

from itrlab.train.callbacks import ConsoleProgress
from itrlab.train.experiment import RunResult, prepare_data, run_experiment
from itrlab.train.loop import EpochReport, NonFiniteLossError, Trainer, TrainingData

__all__ = ["ConsoleProgress", "EpochReport", "NonFiniteLossError", "RunResult", "Trainer", "TrainingData",
           "prepare_data", "run_experiment"]
