"""Converged, or said so (issue 41): which rows of a sweep were still learning when their training ended.

A row's validation curve is the mean over its finished seeds of the validation rsum at each epoch that
every one of them reached (the epochs a trial logs, ``rsum`` in its MLflow run). The row is **still
learning** when

* its best validation epoch is its last (the mean curve peaks at the end: more epochs might raise it),
  or
* its validation rsum rose, over the last fifth of its epochs (from epoch ``E - ceil(E / 5)`` to ``E``),
  by more than its seed spread: the standard deviation over its seeds of the last epoch's validation
  rsum (with one seed there is no spread, and any rise counts).

Validation rsum is the one curve every trial logs and the one its best checkpoint is chosen by. A row
still learning measured the budget, not the method: the headline never says it fails to beat (or does
not differ from) the baseline (:mod:`itrlab.report.headline`). A row with no validation history (a
summary written before this check, a trial without MLflow) is not judged: it gets no mark.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

TAIL = 5  # the last fifth of the epochs


@dataclass(frozen=True)
class Convergence:
    """A row's validation curve in brief: ``epochs`` (its last), ``best_epoch`` (of the mean curve), the
    ``rise`` of the mean over the last fifth (from ``since``), the seeds' ``spread`` at the last epoch
    (None with one seed), and why it is still learning (``""``: it is not)."""

    seeds: int
    epochs: int
    best_epoch: int
    since: int
    rise: float
    spread: float | None
    learning: str

    def to_dict(self) -> dict:
        return {
            "seeds": self.seeds,
            "epochs": self.epochs,
            "best_epoch": self.best_epoch,
            "since": self.since,
            "rise": round(self.rise, 2),
            "spread": None if self.spread is None else round(self.spread, 2),
            "still_learning": self.learning,
        }


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def convergence(curves: list[list[tuple[int, float]]]) -> Convergence | None:
    """The convergence of one row from its seeds' validation curves (``[(epoch, rsum), ...]`` each); None
    when no epoch is common to all of them."""
    series = [{int(epoch): float(value) for epoch, value in curve if _finite(value)} for curve in curves]
    series = [s for s in series if s]
    if not series:
        return None
    epochs = sorted(set.intersection(*(set(s) for s in series)))
    if not epochs:
        return None
    mean = {epoch: statistics.fmean(s[epoch] for s in series) for epoch in epochs}
    last = epochs[-1]
    best = max(epochs, key=lambda epoch: (mean[epoch], -epoch))  # the first epoch of the highest mean
    since_target = last - math.ceil(last / TAIL)
    since = max((epoch for epoch in epochs if epoch <= since_target), default=epochs[0])
    rise = mean[last] - mean[since]
    spread = statistics.stdev(s[last] for s in series) if len(series) > 1 else None
    if best == last:
        why = f"best validation epoch {best} of {last}"
    elif since < last and rise > (spread or 0.0):
        why = (
            f"validation rsum +{rise:.1f} from epoch {since} to {last}, more than its seed spread {spread:.1f}"
            if spread is not None
            else f"validation rsum +{rise:.1f} from epoch {since} to {last} (one seed: no spread)"
        )
    else:
        why = ""
    return Convergence(len(series), last, best, since, rise, spread, why)


def row_convergence(curves: dict[str, list[list[tuple[int, float]]]]) -> dict[str, Convergence]:
    """Row label -> its :class:`Convergence`, for the rows with a validation history."""
    found = {row: convergence(series) for row, series in curves.items()}
    return {row: result for row, result in found.items() if result is not None}
