"""Retrieval you can look at: a typed caption's top-k images and an image's top-k captions (``itrlab retrieve``), and
the ranked lists of a split's own captions and images (:mod:`itrlab.trained.gallery`).

A typed caption is scored against every image by :meth:`~itrlab.trained.model.TrainedModel.score`, a block of
images at a time. A split's own queries are scored by the function the run's test table was computed with
(:meth:`~itrlab.trained.model.TrainedModel.score_fn`), so that the lists are the rankings behind that table. Ground
truth comes from the split's layout (caption ``j`` describes image ``j // captions_per_image``), never from the
scores.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from itrlab.data import PrecompSplit
from itrlab.errors import UserInputError
from itrlab.eval import ScoreFn
from itrlab.trained.model import TrainedModel
from itrlab.trained.photos import SplitImages

MAX_K = 1000


@dataclass(frozen=True)
class Hit:
    """One retrieved item: an image (``caption`` None) or a caption, its rank (from 1) and score, and whether it
    is the query's ground truth."""

    rank: int
    score: float
    image_id: int
    photo: Path | None
    truth: bool
    caption: str | None = None
    caption_index: int | None = None


@dataclass(frozen=True)
class Ranking:
    """A query's top-k hits and where its first ground-truth item ranks (None: the query has none, a typed
    caption)."""

    hits: list[Hit]
    truth_rank: int | None


def check_k(k: int, limit: int) -> int:
    """``k`` when it is 1 to ``limit`` (the items there are) or MAX_K, else UserInputError."""
    if not 1 <= k <= MAX_K:
        raise UserInputError(f"-k {k}: the number of results to show is 1 to {MAX_K}")
    return min(k, limit)


def check_caption(caption: str) -> str:
    if not caption.strip():
        raise UserInputError(
            '--caption: an empty caption; give the text to search images for, e.g. --caption "a dog runs on the beach"'
        )
    return caption


def _ranking(scores: torch.Tensor, k: int, make_hit, truth: set[int]) -> Ranking:
    order = torch.argsort(scores.float(), descending=True, stable=True)
    position = {int(item): rank for rank, item in enumerate(order.tolist(), 1) if int(item) in truth}
    hits = [make_hit(rank, int(item), float(scores[item])) for rank, item in enumerate(order[:k].tolist(), 1)]
    return Ranking(hits, min(position.values()) if position else None)


def image_hits(scores: torch.Tensor, images: SplitImages, k: int, truth: set[int] = frozenset()) -> Ranking:
    """The top ``k`` of ``scores`` (one per image row) as image hits; ``truth``: the ground-truth rows."""
    return _ranking(
        scores,
        k,
        lambda rank, row, score: Hit(rank, score, images.ids[row], images.photo(row), row in truth),
        set(truth),
    )


def caption_hits(scores: torch.Tensor, split: PrecompSplit, images: SplitImages, k: int, truth_row: int) -> Ranking:
    """The top ``k`` of ``scores`` (one per caption of ``split``) as caption hits, the image row ``truth_row``'s
    own captions marked."""
    cpi = split.captions_per_image
    own = set(range(truth_row * cpi, (truth_row + 1) * cpi))

    def hit(rank: int, j: int, score: float) -> Hit:
        row = split.image_of(j)
        return Hit(rank, score, images.ids[row], images.photo(row), j in own, split.captions[j], j)

    return _ranking(scores, k, hit, own)


def images_for_text(model: TrainedModel, split: PrecompSplit, images: SplitImages, caption: str, k: int) -> Ranking:
    """The top ``k`` images of ``split`` for a typed ``caption``, scored a block of images at a time."""
    check_caption(caption)
    k = check_k(k, split.n_images)
    block = max(1, model.batch_size)
    scores = torch.cat(
        [
            model.score(split.features[start : start + block], [caption])[:, 0].float()
            for start in range(0, split.n_images, block)
        ]
    )
    return image_hits(scores, images, k)


def images_for_caption(score: ScoreFn, split: PrecompSplit, images: SplitImages, j: int, k: int) -> Ranking:
    """The top ``k`` images for the split's own caption ``j`` (``score``: the model's score function of
    ``split``), its image marked."""
    return image_hits(score(slice(0, split.n_images), slice(j, j + 1))[:, 0], images, k, {split.image_of(j)})


def captions_for_image(score: ScoreFn, split: PrecompSplit, images: SplitImages, row: int, k: int) -> Ranking:
    """The top ``k`` captions of the split for its image ``row``, the image's own captions marked."""
    return caption_hits(score(slice(row, row + 1), slice(0, split.n_captions))[0], split, images, k, row)


def format_images(ranking: Ranking, query: str) -> str:
    """A ranking of images as the console shows it: rank, score, image id, photo."""
    lines = [f"top {len(ranking.hits)} images for {query}:"]
    lines += [
        f"{hit.rank:>4}  {hit.score:8.4f}  image {hit.image_id}"
        + (f"  {hit.photo}" if hit.photo else "")
        + ("  (ground truth)" if hit.truth else "")
        for hit in ranking.hits
    ]
    return "\n".join(lines)


def format_captions(ranking: Ranking, query: str) -> str:
    """A ranking of captions as the console shows it: rank, score, ``*`` for the image's own, the caption and
    the image it describes."""
    lines = [f"top {len(ranking.hits)} captions for {query} (* its own caption):"]
    lines += [
        f"{hit.rank:>4}  {hit.score:8.4f} {'*' if hit.truth else ' '} {hit.caption!r}  (image {hit.image_id})"
        for hit in ranking.hits
    ]
    if ranking.truth_rank is not None and ranking.truth_rank > len(ranking.hits):
        lines.append(f"its first own caption ranks {ranking.truth_rank}")
    return "\n".join(lines)
