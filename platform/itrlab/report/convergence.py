"""Converged, or said so: which rows of a sweep were still learning when their training ended, and which trained
on a learning-rate schedule that does not fit them, from each trial's validation rsum per epoch (``rsum`` in its
MLflow run) over the epochs ``1`` to ``E`` every seed of the row reached.

**Still learning**: the mean over seeds of the gain of the best-so-far validation rsum (what the kept checkpoint
gained) over the last fifth of the epochs exceeds the row's :func:`tolerance`. Each seed is compared with itself,
so seeds' levels cancel; a row trained for one epoch has no curve and counts as still learning. Such a row
measured the budget, not the method: the headline never calls it a tie or a loss (:mod:`itrlab.report.headline`)
and a verdict on it is inconclusive (:mod:`itrlab.report.analysis`).

**Schedule not tuned**: with a first decay after epoch ``d`` within the epochs trained, the median seed's first
best epoch lies at or before ``d / 2`` and :data:`SCHEDULE_GAP` epochs or more before ``d``, or at ``d`` the
validation rsum lay below its best so far by more than the tolerance (mean over seeds). A trial that chose its
decay on validation (``train.lr_decay_choices``) is judged at the decay it chose. A row without validation
history (a trial without MLflow) is not judged.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from itrlab.report.stats import finite

TAIL = 5  # the last fifth of the epochs
GAIN_FLOOR = 1.0  # rsum: the tolerance of a row no comparison gives a minimum detectable effect
SCHEDULE_GAP = 3  # epochs: a best epoch this far or more before the first decay (and at or before half of it)
DECAY_PARAM = "train.lr_decay_epochs"  # a trial's learning-rate decays, as its MLflow params keep them: "[15, 25]"
CHOICES_PARAM = "train.lr_decay_choices"  # the decays a trial chose among: "[3, 9, 15]", or "None"
CHOSEN_METRIC = "lr_decay_chosen"  # the decay it chose on validation (itrlab.train.decay_choice)


def _epochs(text: str | None) -> tuple[int, ...]:
    try:
        epochs = json.loads(text or "[]")
    except ValueError:
        return ()
    if not isinstance(epochs, list) or not all(isinstance(e, int) and not isinstance(e, bool) for e in epochs):
        return ()
    return tuple(sorted(epochs))


def decay_epochs(params: Mapping[str, str], metrics: Mapping[str, float] | None = None) -> tuple[int, ...]:
    """A trial's learning-rate decays: the one it chose on validation, else its config's; none when neither says
    epochs."""
    chosen = (metrics or {}).get(CHOSEN_METRIC)
    if finite(chosen) and float(chosen).is_integer() and chosen >= 1:
        return (int(chosen),)
    return _epochs(params.get(DECAY_PARAM))


def decay_choices(params: Mapping[str, str]) -> tuple[int, ...]:
    """The decays a trial chose its own among (``train.lr_decay_choices``); none for a fixed schedule."""
    return _epochs(params.get(CHOICES_PARAM))


def chosen_decays(seeds: Sequence[int | None], decays: Sequence[Sequence[int]]) -> str:
    """Which decay each seed chose: ``after 3 (seeds 0, 2), after 9 (seed 1)``, in increasing decay."""
    by_decay: dict[int, list[str]] = {}
    for seed, found in zip(seeds, decays):
        if found:
            by_decay.setdefault(found[0], []).append("?" if seed is None else str(seed))
    return ", ".join(
        f"after {decay} (seed{'s' if len(names) > 1 else ''} {', '.join(names)})"
        for decay, names in sorted(by_decay.items())
    )


def tolerance(mde: float | None) -> float:
    """Half the row's smallest minimum detectable effect, else :data:`GAIN_FLOOR` (an effect of 0, from differences
    without spread, says nothing of the noise)."""
    return mde / 2 if mde is not None and math.isfinite(mde) and mde > 0 else GAIN_FLOOR


@dataclass(frozen=True)
class Convergence:
    """A row's validation curves in brief (:func:`convergence`): ``learning`` and ``schedule`` say why the row is
    still learning or its schedule is not tuned for it (``""``: it is not); ``gain`` is the mean gain of the
    best-so-far rsum from epoch ``since`` to ``epochs``."""

    seeds: int
    epochs: int
    best_epoch: int
    since: int
    gain: float
    tolerance: float
    learning: str
    decay: int | None = None
    schedule: str = ""
    chosen: str = ""  # which decay each seed chose on validation (train.lr_decay_choices); "": a fixed schedule

    def to_dict(self) -> dict:
        chosen = {"decay_chosen": self.chosen} if self.chosen else {}
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
            **chosen,
        }


def _best_so_far(series: dict[int, float], epochs: list[int]) -> dict[int, float]:
    best, found = -math.inf, {}
    for epoch in epochs:
        best = max(best, series[epoch])
        found[epoch] = best
    return found


def convergence(
    curves: Sequence[Sequence[tuple[int, float]]],
    tol: float = GAIN_FLOOR,
    decay_epochs: Sequence[int] = (),
    seed_decays: Sequence[Sequence[int]] | None = None,
    chosen: str = "",
) -> Convergence | None:
    """The convergence of one row from its seeds' validation curves (``[(epoch, rsum), ...]`` each), with its
    schedule's decays, or each seed's own (``seed_decays``, in the order of ``curves``); None when the curves share
    no epoch."""
    if seed_decays is not None and len(seed_decays) != len(curves):
        raise ValueError(f"{len(seed_decays)} seeds' decays for {len(curves)} curves")
    decays_of = seed_decays if seed_decays is not None else [decay_epochs] * len(curves)
    seeds = [
        (series, tuple(sorted(decays)))
        for series, decays in zip(
            ({int(epoch): float(value) for epoch, value in curve if finite(value)} for curve in curves), decays_of
        )
        if series
    ]
    if not seeds:
        return None
    series = [found for found, _ in seeds]
    epochs = sorted(set.intersection(*(set(s) for s in series)))
    if not epochs:
        return None
    last = epochs[-1]
    since = max((epoch for epoch in epochs if epoch <= last - math.ceil(last / TAIL)), default=epochs[0])
    best = [_best_so_far(s, epochs) for s in series]
    gain = statistics.fmean(b[last] - b[since] for b in best)
    bests = [max(epochs, key=lambda e, s=s: (s[e], -e)) for s in series]
    best_epoch = statistics.median_low(bests)
    if since == last:
        why = f"{last} epoch{'s' if last != 1 else ''} trained: no curve to judge"
    elif gain > tol:
        why = (
            f"best validation rsum still rising: +{gain:.1f} from epoch {since} to {last} (mean over "
            f"{len(series)} seed{'s' if len(series) != 1 else ''}), more than the tolerance {tol:.1f}"
        )
    else:
        why = ""
    firsts = [next((d for d in decays if d < last and d in epochs), None) for _, decays in seeds]
    decay, schedule = _schedule(series, best, bests, best_epoch, firsts, tol)
    return Convergence(len(series), last, best_epoch, since, gain, tol, why, decay, schedule, chosen)


def _schedule(
    series: list[dict[int, float]],
    best: list[dict[int, float]],
    bests: list[int],
    best_epoch: int,
    firsts: list[int | None],
    tol: float,
) -> tuple[int | None, str]:
    """The row's first decay (its seeds' when they share one, else their median) and why its schedule is not tuned
    for it (``""``: it is, or no decay to judge)."""
    judged = [(b, s, e, d) for b, s, e, d in zip(best, series, bests, firsts) if d is not None]
    if not judged:
        return None, ""
    shared = len(set(firsts)) == 1
    decay = firsts[0] if shared else statistics.median_low(d for *_, d in judged)
    early = [e for *_, e, d in judged if e <= d / 2 and d - e >= SCHEDULE_GAP]
    drop = statistics.fmean(b[d] - s[d] for b, s, _, d in judged)
    if len(early) >= (len(series) - 1) // 2 + 1:  # the median seed lies that early
        if shared:
            return (
                decay,
                f"best epoch {best_epoch}, {decay - best_epoch} epochs before the first decay (after epoch {decay})",
            )
        return decay, (
            f"best epochs {', '.join(map(str, bests))} against first decays after "
            f"{', '.join('-' if d is None else str(d) for d in firsts)}: at or before half the decay and "
            f"{SCHEDULE_GAP} or more epochs before it in {len(early)} of {len(series)} seeds"
        )
    if drop > tol:
        after = f"epoch {decay}" if shared else f"epochs {', '.join(str(d) for *_, d in judged)}"
        return (
            decay,
            f"overfitted before the first decay (after {after}): validation rsum {drop:.1f} below its best by then",
        )
    return decay, ""


def row_convergence(
    curves: Mapping[str, Sequence[Sequence[tuple[int, float]]]],
    tolerances: Mapping[str, float] | None = None,
    decays: Mapping[str, Sequence[Sequence[int]]] | None = None,
    chosen: Mapping[str, str] | None = None,
) -> dict[str, Convergence]:
    """Row label -> its :class:`Convergence`, for the rows with a validation history (:data:`GAIN_FLOOR` where
    ``tolerances`` names no tolerance)."""
    found = {
        row: convergence(
            series,
            (tolerances or {}).get(row, GAIN_FLOOR),
            seed_decays=(decays or {}).get(row, [()] * len(series)),
            chosen=(chosen or {}).get(row, ""),
        )
        for row, series in curves.items()
    }
    return {row: result for row, result in found.items() if result is not None}
