"""Recall metrics from a trial's per-query test ranks, and the paired bootstrap over test images and seeds.

A trial's test ranks (``test_ranks.npz``, :mod:`itrlab.eval.ranking`; any :class:`RankSource`) hold, for ``N``
test images cut into the protocol's folds (``fold_sizes``, in image order), ``i2t``: the 0-based rank of each
image's best own caption in its fold, and ``t2i`` (``cpi * N``): the rank of each caption's image, caption ``j``
belonging to image ``j // cpi``. A fold's R@K is the share of its queries ranked below K and the protocol's value
the mean over its ``F`` folds, so every recall and rsum is a sum over images (:func:`image_contributions`): image
``i`` of a fold of ``n`` gives i2t R@K ``100 / (F n)`` when ranked below K, and t2i R@K ``100 / (F n cpi)`` per
caption below K. A resample of images is then a weighted sum: the bootstrap is a matrix product.

:func:`paired_bootstrap`: each of :data:`REPLICATES` replicates draws every fold's images with replacement and the
shared seeds with replacement, the same draws for both rows (so what they share of test sample and seed cancels),
and takes the mean over the drawn seeds of the difference on the drawn images. The interval is the replicates'
2.5th to 97.5th percentile; the two-sided p is ``2 min(share <= 0, share >= 0)`` with the add-one rule (never 0),
capped at 1. The generator is seeded (:data:`BOOTSTRAP_SEED`): the same ranks give the same interval everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Protocol

import numpy as np

from itrlab.eval.names import RECALLS

RANK_METRICS = ("rsum", *RECALLS)
"""The metrics that per-query ranks give (MD and the median ranks are not sums over images)."""
KS = (1, 5, 10)
REPLICATES = 2000
BOOTSTRAP_SEED = 56
CONFIDENCE = 0.95
CHUNK = 250  # replicates drawn at once: the image counts of a chunk are CHUNK x N floats


class RankSource(Protocol):
    """A trial's per-query test ranks (the fields of ``test_ranks.npz``)."""

    i2t: np.ndarray
    t2i: np.ndarray
    fold_sizes: Sequence[int] | np.ndarray
    captions_per_image: int


def check_ranks(ranks: RankSource) -> tuple[np.ndarray, int]:
    """The fold sizes and captions per image of ``ranks``; ValueError for arrays that do not fit together."""
    folds = np.asarray(ranks.fold_sizes, dtype=np.int64).reshape(-1)
    cpi, n = int(ranks.captions_per_image), int(np.sum(folds))
    i2t, t2i = np.asarray(ranks.i2t), np.asarray(ranks.t2i)
    if cpi < 1 or folds.size == 0 or np.any(folds < 1):
        raise ValueError(f"ranks: {cpi} captions per image and folds {folds.tolist()}; need 1 or more of each")
    if i2t.shape != (n,) or t2i.shape != (cpi * n,):
        raise ValueError(
            f"ranks: i2t {i2t.shape} and t2i {t2i.shape} for folds of {folds.tolist()} images x {cpi} captions; "
            f"expected ({n},) and ({cpi * n},)"
        )
    return folds, cpi


def image_contributions(ranks: RankSource, metric: str = "rsum") -> np.ndarray:
    """Per test image (in the ranks' order), its contribution to ``metric`` (one of :data:`RANK_METRICS`): the
    metric is their sum (see the module doc)."""
    if metric not in RANK_METRICS:
        raise ValueError(f"metric {metric!r}: ranks give {', '.join(RANK_METRICS)}")
    folds, cpi = check_ranks(ranks)
    weight = np.repeat(100.0 / (len(folds) * folds), folds)  # per image: 100 / (F n) of its fold
    i2t = np.asarray(ranks.i2t)
    t2i = np.asarray(ranks.t2i).reshape(-1, cpi)
    total = np.zeros(len(weight))
    for k in KS:
        if metric in ("rsum", f"i2t_R{k}"):
            total += i2t < k
        if metric in ("rsum", f"t2i_R{k}"):
            total += np.count_nonzero(t2i < k, axis=1) / cpi
    return weight * total


def rank_metrics(ranks: RankSource) -> dict[str, float]:
    """Every metric of :data:`RANK_METRICS` from ``ranks``: the recall table's numbers (rsum, R@K)."""
    return {metric: float(image_contributions(ranks, metric).sum()) for metric in RANK_METRICS}


@dataclass(frozen=True)
class BootstrapInterval:
    """The paired bootstrap's result: ``value`` (the mean over the shared seeds of row minus reference on the whole
    test set), its percentile interval ``low`` to ``high``, its two-sided ``p``, and what it resampled."""

    value: float
    low: float
    high: float
    p: float
    seeds: int
    images: int
    replicates: int

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    def to_dict(self) -> dict:
        return asdict(self)


def _resampled_images(rng: np.random.Generator, folds: np.ndarray, count: int) -> np.ndarray:
    """``count`` draws of every fold's images with replacement: (count, N) how often each image was drawn."""
    parts = []
    for size in folds:
        drawn = rng.integers(0, size, size=(count, size))
        flat = (np.arange(count)[:, None] * size + drawn).ravel()
        parts.append(np.bincount(flat, minlength=count * size).reshape(count, size))
    return np.concatenate(parts, axis=1).astype(np.float64)


def paired_bootstrap(
    row: Mapping[int, RankSource],
    reference: Mapping[int, RankSource],
    metric: str = "rsum",
    replicates: int = REPLICATES,
    seed: int = BOOTSTRAP_SEED,
    confidence: float = CONFIDENCE,
) -> BootstrapInterval | None:
    """The paired bootstrap of ``metric(row) - metric(reference)`` over test images and the seeds both rows hold
    (``seed -> ranks`` each); None when they share no seed. ValueError when the rankings are not of one test set."""
    shared = sorted(set(row) & set(reference))
    if not shared:
        return None
    folds, cpi = check_ranks(row[shared[0]])
    for ranks in [*(row[s] for s in shared), *(reference[s] for s in shared)]:
        other, other_cpi = check_ranks(ranks)
        if other_cpi != cpi or not np.array_equal(other, folds):
            raise ValueError(
                f"ranks of folds {other.tolist()} x {other_cpi} captions beside {folds.tolist()} x {cpi}: "
                f"a paired bootstrap needs one test set"
            )
    differences = np.stack(
        [image_contributions(row[s], metric) - image_contributions(reference[s], metric) for s in shared], axis=1
    )  # (N, seeds)
    n_seeds = len(shared)
    rng = np.random.default_rng(seed)
    stats = np.empty(replicates)
    for start in range(0, replicates, CHUNK):
        count = min(CHUNK, replicates - start)
        per_seed = _resampled_images(rng, folds, count) @ differences  # (count, seeds)
        drawn = rng.multinomial(n_seeds, np.full(n_seeds, 1.0 / n_seeds), size=count)
        stats[start : start + count] = (drawn * per_seed).sum(axis=1) / n_seeds
    tail = (1 - confidence) / 2
    low, high = np.quantile(stats, [tail, 1 - tail])
    below, above = np.count_nonzero(stats <= 0), np.count_nonzero(stats >= 0)
    p = min(1.0, 2 * (min(below, above) + 1) / (replicates + 1))
    return BootstrapInterval(
        float(differences.sum(axis=0).mean()), float(low), float(high), float(p), n_seeds, int(folds.sum()), replicates
    )
