"""Recall tables: R@1/5/10 both ways, rsum, median/mean rank and DBL's MD, per protocol.

Definitions (SCAN's ``evaluation.py``; 0-based ranks with the tie rule of :mod:`itrlab.eval.ranking`):

* ``R@K`` = 100 * (fraction of queries whose rank < K), for image->text (``i2t``, one query per image) and
  text->image (``t2i``, one query per caption); ``rsum`` = the six summed.
* ``medr`` = floor(median(rank)) + 1 and ``meanr`` = mean(rank) + 1.
* ``md`` (DBL's "mean distance between positive and negative candidates") = the mean similarity of the positive
  (image, own caption) pairs minus that of all negative pairs of the evaluated matrix (the fold).

A multi-fold protocol reports the mean over folds of every metric, rsum, medr, meanr and md included.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace

import numpy as np
from torch import Tensor

from itrlab.eval.names import DIRECTIONS, METRIC_NAMES
from itrlab.eval.protocols import get_protocol
from itrlab.eval.ranking import DEFAULT_IMAGE_CHUNK, Ranks, ScoreFn, compute_ranks, dense_score_fn


@dataclass(frozen=True)
class RecallTable:
    """The recall table of one split under one protocol (the mean over its folds)."""

    protocol: str
    n_images: int
    n_folds: int
    i2t_r1: float
    i2t_r5: float
    i2t_r10: float
    t2i_r1: float
    t2i_r5: float
    t2i_r10: float
    rsum: float
    i2t_medr: float
    i2t_meanr: float
    t2i_medr: float
    t2i_meanr: float
    md: float

    def metrics(self, prefix: str = "") -> dict[str, float]:
        """Flat metrics with MLflow-safe names (``i2t_R1`` ... ``md``), each ``prefix``-ed."""
        return {prefix + name: float(getattr(self, field)) for field, name in METRIC_NAMES.items()}

    def to_dict(self) -> dict:
        """JSON-ready dict of every field (protocol and n_images included)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> RecallTable:
        """Inverse of :meth:`to_dict` (extra keys are ignored; missing ones raise ValueError)."""
        missing = [f.name for f in fields(cls) if f.name not in data]
        if missing:
            raise ValueError(f"recall table dict lacks {', '.join(missing)}")
        values = {f.name: data[f.name] for f in fields(cls)}
        values["protocol"] = str(values["protocol"])
        for name in ("n_images", "n_folds"):
            values[name] = int(values[name])
        for name in METRIC_NAMES:
            values[name] = float(values[name])
        return cls(**values)

    def _direction_rows(self) -> list[tuple[str, float, float, float, float, float]]:
        return [
            (
                d,
                getattr(self, f"{d}_r1"),
                getattr(self, f"{d}_r5"),
                getattr(self, f"{d}_r10"),
                getattr(self, f"{d}_medr"),
                getattr(self, f"{d}_meanr"),
            )
            for d in DIRECTIONS
        ]

    def columns(self) -> dict[str, list]:
        """One row per direction, as columns (for ``mlflow.log_table``)."""
        rows = self._direction_rows()
        table: dict[str, list] = {"direction": [row[0] for row in rows]}
        for index, name in enumerate(("R1", "R5", "R10", "medr", "meanr"), start=1):
            table[name] = [float(row[index]) for row in rows]
        table["rsum"] = [self.rsum] * len(rows)
        table["md"] = [self.md] * len(rows)
        table["protocol"] = [self.protocol] * len(rows)
        return table

    def _summary(self) -> str:
        folds = f"mean over {self.n_folds} folds" if self.n_folds > 1 else "1 fold"
        return f"protocol {self.protocol}: {self.n_images} images, {folds}"

    def to_markdown(self) -> str:
        lines = [
            f"Recall, {self._summary()}",
            "",
            "| direction | R@1 | R@5 | R@10 | medr | meanr |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for d, r1, r5, r10, medr, meanr in self._direction_rows():
            lines.append(f"| {d} ({DIRECTIONS[d]}) | {r1:.2f} | {r5:.2f} | {r10:.2f} | {medr:g} | {meanr:.2f} |")
        lines += ["", f"rsum **{self.rsum:.2f}**, MD {self.md:.4f}"]
        return "\n".join(lines)

    def format(self) -> str:
        """A console table naming the protocol."""
        lines = [
            f"Recall ({self._summary()})",
            f"  {'direction':<18}{'R@1':>8}{'R@5':>8}{'R@10':>8}{'medr':>8}{'meanr':>9}",
        ]
        for d, r1, r5, r10, medr, meanr in self._direction_rows():
            lines.append(f"  {d + ' ' + DIRECTIONS[d]:<18}{r1:>8.2f}{r5:>8.2f}{r10:>8.2f}{medr:>8g}{meanr:>9.2f}")
        lines.append(f"  rsum {self.rsum:.2f}   MD {self.md:.4f}")
        return "\n".join(lines)


def _rank_metrics(ranks: np.ndarray) -> tuple[float, float, float, float, float]:
    """(R@1, R@5, R@10, medr, meanr) of 0-based ranks."""
    n = len(ranks)
    r1, r5, r10 = (100.0 * np.count_nonzero(ranks < k) / n for k in (1, 5, 10))
    return r1, r5, r10, float(np.floor(np.median(ranks)) + 1), float(ranks.mean() + 1)


def table_from_ranks(ranks: Ranks, protocol: str = "all") -> RecallTable:
    """The one-fold table of one matrix's ranks."""
    i2t = _rank_metrics(ranks.i2t)
    t2i = _rank_metrics(ranks.t2i)
    rsum = sum(i2t[:3]) + sum(t2i[:3])
    return RecallTable(protocol, ranks.n_images, 1, *i2t[:3], *t2i[:3], rsum, i2t[3], i2t[4], t2i[3], t2i[4], ranks.md)


def table_from_folds(fold_ranks: Sequence[Ranks], protocol: str, n_images: int) -> RecallTable:
    """The protocol's table: every metric (rsum, medr, meanr, md too) averaged over folds."""
    tables = [table_from_ranks(ranks, protocol) for ranks in fold_ranks]
    if len(tables) == 1:
        return replace(tables[0], n_images=n_images)
    means = {name: float(np.mean([getattr(t, name) for t in tables])) for name in METRIC_NAMES}
    return RecallTable(protocol=protocol, n_images=n_images, n_folds=len(tables), **means)


def _fold_score_fn(score_fn: ScoreFn, first_image: int, captions_per_image: int) -> ScoreFn:
    """``score_fn`` seen from a fold that starts at image ``first_image``."""
    if first_image == 0:
        return score_fn
    first_caption = captions_per_image * first_image

    def score(image_slice: slice, caption_slice: slice) -> Tensor:
        return score_fn(
            slice(image_slice.start + first_image, image_slice.stop + first_image),
            slice(caption_slice.start + first_caption, caption_slice.stop + first_caption),
        )

    return score


def evaluate(
    score_fn: ScoreFn,
    n_images: int,
    protocol: str = "all",
    captions_per_image: int = 5,
    image_chunk: int = DEFAULT_IMAGE_CHUNK,
) -> RecallTable:
    """The recall table of a split of ``n_images`` images under ``protocol``, each fold ranked in one block-wise pass of
    ``score_fn`` (global indices). :class:`~itrlab.eval.protocols.ProtocolError` for an unknown protocol or a split size
    it does not allow."""
    fold_ranks = rank_folds(score_fn, n_images, protocol, captions_per_image, image_chunk)
    return table_from_folds(fold_ranks, get_protocol(protocol).name, n_images)


def rank_folds(
    score_fn: ScoreFn,
    n_images: int,
    protocol: str = "all",
    captions_per_image: int = 5,
    image_chunk: int = DEFAULT_IMAGE_CHUNK,
) -> list[Ranks]:
    """The :class:`~itrlab.eval.ranking.Ranks` of each fold of ``protocol`` (what :func:`evaluate` tabulates)."""
    folds = get_protocol(protocol).folds(n_images)
    return [
        compute_ranks(
            _fold_score_fn(score_fn, start, captions_per_image), stop - start, captions_per_image, image_chunk
        )
        for start, stop in folds
    ]


def check_embedding_shapes(image_emb, caption_emb, captions_per_image: int) -> int:
    """``N`` for (N, d) images and (cpi * N, d) captions; ValueError otherwise."""
    image_shape, caption_shape = tuple(image_emb.shape), tuple(caption_emb.shape)
    if (
        len(image_shape) != 2
        or len(caption_shape) != 2
        or image_shape[1] != caption_shape[1]
        or caption_shape[0] != captions_per_image * image_shape[0]
    ):
        raise ValueError(
            f"expected images (N, d) and captions ({captions_per_image}*N, d), got {image_shape} and {caption_shape}"
        )
    return image_shape[0]


def evaluate_embeddings(
    image_emb: Tensor | np.ndarray,
    caption_emb: Tensor | np.ndarray,
    protocol: str = "all",
    captions_per_image: int = 5,
    image_chunk: int = DEFAULT_IMAGE_CHUNK,
) -> RecallTable:
    """:func:`evaluate` with dot-product scores of (N, d) images and (cpi * N, d) captions."""
    n_images = check_embedding_shapes(image_emb, caption_emb, captions_per_image)
    return evaluate(dense_score_fn(image_emb, caption_emb), n_images, protocol, captions_per_image, image_chunk)
