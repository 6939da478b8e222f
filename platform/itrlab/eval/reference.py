"""The per-query baseline: SCAN's ``i2t``/``t2i`` loops in numpy, and exact test embeddings.

:func:`reference_ranks` is SCAN's ``evaluation.py`` (one matrix-vector product and one ``argsort`` per query) with
the tie rule of :mod:`itrlab.eval.ranking`: a positive is moved below every candidate holding its score. It is slow
on purpose: :func:`~itrlab.eval.ranking.compute_ranks` is checked and timed against it (tests, ``benchmarks/eval.py``).
:func:`random_embeddings` makes seeded embeddings whose every dot product is exact in float32, so that the two
implementations (different BLAS calls and summation orders) must agree to the last bit, ties included.
"""

from __future__ import annotations

import numpy as np

from itrlab.eval.protocols import get_protocol
from itrlab.eval.ranking import Ranks
from itrlab.eval.recall import RecallTable, check_embedding_shapes, table_from_folds


def _negatives_at_or_above(sorted_scores: np.ndarray, position: int, positives_at_or_above: int) -> int:
    """Tie rule: the positive at ``position`` goes below every candidate with its score; its
    rank counts the candidates up to there, less the positives among them."""
    score = sorted_scores[position]
    while position + 1 < len(sorted_scores) and sorted_scores[position + 1] == score:
        position += 1
    return position + 1 - positives_at_or_above


def reference_ranks(image_emb: np.ndarray, caption_emb: np.ndarray, captions_per_image: int = 5) -> Ranks:
    """SCAN-style per-query ranks of (N, d) images and (cpi * N, d) captions (float32)."""
    cpi = captions_per_image
    n_images = check_embedding_shapes(image_emb, caption_emb, cpi)
    ims = np.asarray(image_emb, dtype=np.float32)
    caps = np.asarray(caption_emb, dtype=np.float32)
    i2t = np.zeros(n_images, dtype=np.int64)
    t2i = np.zeros(cpi * n_images, dtype=np.int64)
    positive_sum = total_sum = 0.0

    for index in range(n_images):  # SCAN's i2t
        d = np.dot(ims[index], caps.T).flatten()
        inds = np.argsort(d)[::-1]
        sorted_d = d[inds]
        own = d[cpi * index : cpi * index + cpi]
        best = int(min(np.where(inds == i)[0][0] for i in range(cpi * index, cpi * index + cpi)))
        i2t[index] = _negatives_at_or_above(sorted_d, best, int(np.count_nonzero(own >= sorted_d[best])))
        positive_sum += float(d[cpi * index : cpi * index + cpi].sum(dtype=np.float64))
        total_sum += float(d.sum(dtype=np.float64))

    for index in range(n_images):  # SCAN's t2i
        queries = caps[cpi * index : cpi * index + cpi]
        d = np.dot(queries, ims.T)
        for i in range(cpi):
            inds = np.argsort(d[i])[::-1]
            sorted_d = d[i][inds]
            t2i[cpi * index + i] = _negatives_at_or_above(sorted_d, int(np.where(inds == index)[0][0]), 1)

    return Ranks(i2t, t2i, positive_sum, total_sum - positive_sum, cpi)


def reference_evaluate(
    image_emb: np.ndarray, caption_emb: np.ndarray, protocol: str = "all", captions_per_image: int = 5
) -> RecallTable:
    """The recall table of the per-query baseline, folds as SCAN's ``evalrank`` cuts them."""
    fold_ranks = reference_rank_folds(image_emb, caption_emb, protocol, captions_per_image)
    return table_from_folds(fold_ranks, get_protocol(protocol).name, len(image_emb))


def reference_rank_folds(
    image_emb: np.ndarray, caption_emb: np.ndarray, protocol: str = "all", captions_per_image: int = 5
) -> list[Ranks]:
    """The per-query baseline's ranks of each fold of ``protocol``."""
    cpi = captions_per_image
    n_images = check_embedding_shapes(image_emb, caption_emb, cpi)
    return [
        reference_ranks(image_emb[start:stop], caption_emb[cpi * start : cpi * stop], cpi)
        for start, stop in get_protocol(protocol).folds(n_images)
    ]


def random_embeddings(
    n_images: int, dim: int, captions_per_image: int = 5, seed: int = 0, grid_bits: int = 10
) -> tuple[np.ndarray, np.ndarray]:
    """Seeded float32 embeddings: (N, dim) images and (cpi * N, dim) captions.

    Gaussian rows, L2-normalised, rounded to multiples of ``2**-grid_bits`` (norms within about 1e-3 of 1 at dim 1024).
    Every product is then a multiple of ``2**-(2 * grid_bits)`` and every partial sum of a dot product an integer below
    ``2**(2 * grid_bits)`` in those units: exact in float32 (``grid_bits`` <= 11) in any order, and the float64 sums
    behind MD too.
    """
    if not 1 <= grid_bits <= 11:
        raise ValueError(f"grid_bits must be in [1, 11] for exact float32 dot products, got {grid_bits}")
    rng = np.random.default_rng(seed)
    scale = float(2**grid_bits)

    def unit_rows(n: int) -> np.ndarray:
        rows = rng.standard_normal((n, dim), dtype=np.float32)
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        return (np.rint(rows * scale) / scale).astype(np.float32)

    images, captions = unit_rows(n_images), unit_rows(captions_per_image * n_images)
    norms = [float(np.linalg.norm(x * scale, axis=1).max(initial=0.0)) for x in (images, captions)]
    if norms[0] * norms[1] >= 2.0**24:  # Cauchy-Schwarz bound on every partial sum, in grid units
        raise ValueError(f"grid_bits={grid_bits} is too fine for exact float32 dot products at dim {dim}")
    return images, captions
