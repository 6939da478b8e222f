"""Converged, or said so: which rows of a sweep were still learning when their training ended, and which
trained on a learning-rate schedule that does not fit them.

Each trial logs its validation rsum per epoch (``rsum`` in its MLflow run), the curve its best checkpoint is
chosen by. A row's seeds are read over the epochs every one of them reached, ``1`` to ``E``.

**Still learning.** Per seed, the gain of its *best-so-far* validation rsum over the last fifth of the epochs
(from epoch ``E - ceil(E / 5)`` to ``E``): what more epochs added to the checkpoint a trial keeps. The row is
still learning when the mean of those gains over its seeds exceeds its **tolerance** (:func:`tolerance`): half
the smallest minimum detectable effect of the comparisons the row is in (what the table must resolve:
:func:`itrlab.report.analysis.smallest_mdes`), else :data:`GAIN_FLOOR` rsum where no comparison gives a
positive one. Seeds are compared with themselves, so their different levels cancel; a flat curve whose last
epoch happens to be its highest gains next to nothing and is not still learning. A row trained for one epoch
has no curve to judge and counts as still learning. A row still learning measured the budget, not the method:
the headline never says it fails to beat, or does not differ from, the baseline (:mod:`itrlab.report.headline`),
and a verdict on it is inconclusive (:mod:`itrlab.report.analysis`).

**Schedule not tuned for this row.** With a first learning-rate decay after epoch ``d``
(``train.lr_decay_epochs``; the rate changes once epoch ``d`` has completed) within the epochs trained, the
row is marked when

* its best epoch (the median over seeds of each seed's first best epoch) lies well before the decay: at or
  before ``d / 2`` and :data:`SCHEDULE_GAP` epochs or more before ``d``; or
* it had overfitted before the decay: at epoch ``d`` its validation rsum lay below its best so far by more
  than the tolerance (the mean over seeds).

Such a row was measured at a schedule chosen for others; the mark is separate from "still learning", and
the verdicts that read the row say so. A row with no validation history (a trial without MLflow) is not
judged: it gets no mark.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

TAIL = 5  # the last fifth of the epochs
GAIN_FLOOR = 1.0  # rsum: the tolerance of a row no comparison gives a minimum detectable effect
SCHEDULE_GAP = 3  # epochs: a best epoch this far or more before the first decay (and at or before half of it)
DECAY_PARAM = "train.lr_decay_epochs"  # a trial's learning-rate decays, as its MLflow params keep them: "[15, 25]"


def decay_epochs(params: Mapping[str, str]) -> tuple[int, ...]:
    """A trial's learning-rate decays from its flattened config (``train.lr_decay_epochs``); none when it does
    not say or says something else than a list of epochs."""
    try:
        epochs = json.loads(params.get(DECAY_PARAM) or "[]")
    except ValueError:
        return ()
    if not isinstance(epochs, list) or not all(isinstance(e, int) and not isinstance(e, bool) for e in epochs):
        return ()
    return tuple(sorted(epochs))


def tolerance(mde: float | None) -> float:
    """A row's tolerance for its gain: half its smallest minimum detectable effect, else :data:`GAIN_FLOOR` (an
    effect of 0, from differences without spread such as a row against its own copy, says nothing of the
    noise)."""
    return mde / 2 if mde is not None and math.isfinite(mde) and mde > 0 else GAIN_FLOOR


@dataclass(frozen=True)
class Convergence:
    """A row's validation curves in brief: its ``seeds``, ``epochs`` (the last every seed reached),
    ``best_epoch`` (the median of its seeds' best epochs), the mean ``gain`` of the best-so-far validation rsum
    from epoch ``since`` to the last, the ``tolerance`` it is held to, why it is still learning (``learning``,
    ``""``: it is not), its first learning-rate decay (``decay``, None: none within its epochs) and why its
    schedule is not tuned for it (``schedule``, ``""``: it is, or no decay to judge)."""

    seeds: int
    epochs: int
    best_epoch: int
    since: int
    gain: float
    tolerance: float
    learning: str
    decay: int | None = None
    schedule: str = ""

    def to_dict(self) -> dict:
        return {
            "seeds": self.seeds,
            "epochs": self.epochs,
            "best_epoch": self.best_epoch,
            "since": self.since,
            "gain": round(self.gain, 2),
            "tolerance": round(self.tolerance, 2),
            "still_learning": self.learning,
            "decay": self.decay,
            "schedule": self.schedule,
        }


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _best_so_far(series: dict[int, float], epochs: list[int]) -> dict[int, float]:
    best, found = -math.inf, {}
    for epoch in epochs:
        best = max(best, series[epoch])
        found[epoch] = best
    return found


def convergence(
    curves: Sequence[Sequence[tuple[int, float]]], tol: float = GAIN_FLOOR, decay_epochs: Sequence[int] = ()
) -> Convergence | None:
    """The convergence of one row from its seeds' validation curves (``[(epoch, rsum), ...]`` each), held to
    the tolerance ``tol``, with the decays of its schedule (``train.lr_decay_epochs``); None when no epoch is
    common to all of them."""
    series = [{int(epoch): float(value) for epoch, value in curve if _finite(value)} for curve in curves]
    series = [s for s in series if s]
    if not series:
        return None
    epochs = sorted(set.intersection(*(set(s) for s in series)))
    if not epochs:
        return None
    last = epochs[-1]
    since = max((epoch for epoch in epochs if epoch <= last - math.ceil(last / TAIL)), default=epochs[0])
    best = [_best_so_far(s, epochs) for s in series]
    gain = statistics.fmean(b[last] - b[since] for b in best)
    best_epoch = statistics.median_low(max(epochs, key=lambda e, s=s: (s[e], -e)) for s in series)
    if since == last:
        why = f"{last} epoch{'s' if last != 1 else ''} trained: no curve to judge"
    elif gain > tol:
        why = (
            f"best validation rsum still rising: +{gain:.1f} from epoch {since} to {last} (mean over "
            f"{len(series)} seed{'s' if len(series) != 1 else ''}), more than the tolerance {tol:.1f}"
        )
    else:
        why = ""
    decay = next((d for d in decay_epochs if d < last and d in epochs), None)
    schedule = ""
    if decay is not None:
        drop = statistics.fmean(b[decay] - s[decay] for b, s in zip(best, series))
        if best_epoch <= decay / 2 and decay - best_epoch >= SCHEDULE_GAP:
            schedule = (
                f"best epoch {best_epoch}, {decay - best_epoch} epochs before the first decay (after epoch {decay})"
            )
        elif drop > tol:
            schedule = (
                f"overfitted before the first decay (after epoch {decay}): validation rsum {drop:.1f} below "
                f"its best by then"
            )
    return Convergence(len(series), last, best_epoch, since, gain, tol, why, decay, schedule)


def row_convergence(
    curves: Mapping[str, Sequence[Sequence[tuple[int, float]]]],
    tolerances: Mapping[str, float] | None = None,
    decays: Mapping[str, Sequence[int]] | None = None,
) -> dict[str, Convergence]:
    """Row label -> its :class:`Convergence`, for the rows with a validation history; ``tolerances`` per row
    (:func:`tolerance`; :data:`GAIN_FLOOR` for a row not given), ``decays``: per row, its
    ``train.lr_decay_epochs``."""
    found = {
        row: convergence(series, (tolerances or {}).get(row, GAIN_FLOOR), (decays or {}).get(row, ()))
        for row, series in curves.items()
    }
    return {row: result for row, result in found.items() if result is not None}
