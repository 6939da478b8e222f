"""Sweeps: Ray Tune (grid or Optuna) over training runs, every trial in MLflow (only this package,
itrlab.train's callers and the distributed feature extraction import Ray)."""

from itrlab.sweep.runner import SweepResult, run_sweep
from itrlab.config.sweep import SweepSpec, load_sweep

__all__ = ["SweepResult", "SweepSpec", "load_sweep", "run_sweep"]
