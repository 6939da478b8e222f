"""Sweeps: Ray Tune (grid or Optuna) over training runs, every trial in MLflow (only this package,
itrlab.train's callers and the distributed feature extraction import Ray).

The exports are imported when first used (:mod:`itrlab.lazy`): ``itrlab.sweep.dry_run`` (``--dry-run``)
and ``itrlab.sweep.catalog`` (``--list``) do not start by importing Ray and MLflow."""

from itrlab.lazy import lazy_exports

_EXPORTS = {
    "SweepResult": "runner",
    "run_sweep": "runner",
    "SweepSpec": "itrlab.config.sweep",
    "load_sweep": "itrlab.config.sweep",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = list(_EXPORTS)
