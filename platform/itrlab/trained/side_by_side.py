"""Two models side by side (``itrlab gallery A --against B``): the queries of one split where one model ranks the true
match in its top k and the other does not, both ways, with their counts.

Both models rank every query of the split with the functions of their test tables, into the ranks the recall table
counts (:func:`itrlab.eval.ranking.compute_ranks`). Per direction, :func:`contrast` splits the queries into those
only A finds within its top ``k``, only B, both and neither: R@k of A minus R@k of B is (A only - B only) /
queries, in percent. The page shows ``n`` sampled queries of each one-sided set with both models' top lists, the
true match framed. The two must be two models (different weights) trained on one data set and split (its name,
splits, training captions and feature layout): models that saw different data compare nothing of the models. The
template autoescapes (:mod:`itrlab.report.pages`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from itrlab.errors import UserInputError
from itrlab.eval.ranking import compute_ranks
from itrlab.trained.evaluation import EvalData
from itrlab.trained.gallery import TOP, render_with_photos, require_photos, sample
from itrlab.trained.model import TrainedModel
from itrlab.trained.photos import SplitImages
from itrlab.trained.retrieval import Hit, Ranking, captions_for_image, images_for_caption

MAX_K = 10  # the recall table's R@1, R@5 and R@10, and between
DIRECTIONS = ("image to text", "text to image")


@dataclass(frozen=True)
class Contrast:
    """The queries of one direction split by whether each model ranks its true match within its top ``k``:
    ``a_only`` and ``b_only`` (query indices, ascending), and how many both and neither find."""

    direction: str
    k: int
    a_only: tuple[int, ...]
    b_only: tuple[int, ...]
    both: int
    neither: int

    @property
    def queries(self) -> int:
        return len(self.a_only) + len(self.b_only) + self.both + self.neither


def contrast(ranks_a: np.ndarray, ranks_b: np.ndarray, k: int, direction: str) -> Contrast:
    """The :class:`Contrast` of two models' 0-based ranks of the true match of the same queries at ``k``."""
    ranks_a, ranks_b = np.asarray(ranks_a), np.asarray(ranks_b)
    if ranks_a.shape != ranks_b.shape or ranks_a.ndim != 1:
        raise ValueError(f"{direction}: ranks of {ranks_a.shape} and {ranks_b.shape} queries; one query each")
    hit_a, hit_b = ranks_a < k, ranks_b < k
    return Contrast(
        direction,
        k,
        tuple(np.flatnonzero(hit_a & ~hit_b).tolist()),
        tuple(np.flatnonzero(hit_b & ~hit_a).tolist()),
        int((hit_a & hit_b).sum()),
        int((~hit_a & ~hit_b).sum()),
    )


def check_options(k: int, n: int) -> None:
    """UserInputError (one line) for a ``k`` or an ``n`` the page cannot show."""
    if not 1 <= k <= MAX_K:
        raise UserInputError(f"--k {k}: a side-by-side gallery compares the top 1 to {MAX_K} (R@1 ... R@10)")
    if not 1 <= n <= 100:
        raise UserInputError(f"-n {n}: a side-by-side gallery shows 1 to 100 queries of each one-sided set")


def _trained_on(model: TrainedModel) -> tuple:
    """What a model trained on, as the check compares it: data set, train and test splits, training captions,
    feature layout."""
    splits = model.config.dataset.splits
    return (model.info.dataset, splits.train, splits.test, model.info.n_train_captions, model.info.layout())


def check_pair(a: TrainedModel, b: TrainedModel) -> None:
    """UserInputError (one line, before anything is scored) unless ``a`` and ``b`` are two models (different
    weights) trained on one data set and split."""
    if a.weights_sha256 == b.weights_sha256:
        raise UserInputError(
            f"gallery --against: {a.source} and {b.source} are one model (the same weights, sha256 "
            f"{a.weights_sha256[:12]}); compare two different models"
        )
    if _trained_on(a) != _trained_on(b):

        def said(model: TrainedModel) -> str:
            name, train, test, captions, layout = _trained_on(model)
            return f"{name} (train split {train!r}, {captions:,} captions, {layout}; test split {test!r})"

        raise UserInputError(
            f"gallery --against: {a.source} trained on {said(a)}, {b.source} on {said(b)}; a side-by-side gallery "
            f"compares models trained on one data set and split"
        )


@dataclass(frozen=True)
class Shown:
    """A shown query: the caption (text to image) or the image (image to text, as a hit), each model's top hits,
    and the 1-based rank of the true match for each."""

    caption: str | None
    image: Hit | None
    a: Ranking
    b: Ranking
    rank_a: int
    rank_b: int


@dataclass(frozen=True)
class SideBySide:
    """The page's content: who A and B are, the data, and per direction its contrast and the shown queries of
    each one-sided set."""

    title: str
    about: list[str]
    contrasts: list[Contrast]
    shown: dict[tuple[str, str], list[Shown]]  # (direction, "a" | "b"): the queries only that model finds


def build_side_by_side(
    a: TrainedModel, b: TrainedModel, data: EvalData, images: SplitImages, k: int = 1, n: int = 8, seed: int = 0
) -> SideBySide:
    """Both directions' contrasts of ``a`` and ``b`` on ``data``'s split at ``k``, and ``n`` sampled queries of each
    one-sided set with both models' top lists."""
    check_options(k, n)
    check_pair(a, b)
    require_photos(images, a, data)
    split = data.split
    scores = [model.score_fn(split) for model in (a, b)]  # each model encodes the split once
    ranks = [
        compute_ranks(score, split.n_images, split.captions_per_image, model.config.eval.image_chunk)
        for model, score in zip((a, b), scores)
    ]
    shown_top = max(k, TOP)
    contrasts = [
        contrast(ranks[0].i2t, ranks[1].i2t, k, DIRECTIONS[0]),
        contrast(ranks[0].t2i, ranks[1].t2i, k, DIRECTIONS[1]),
    ]
    shown: dict[tuple[str, str], list[Shown]] = {}
    for found, which in ((c, side) for c in contrasts for side in ("a", "b")):
        queries = found.a_only if which == "a" else found.b_only
        picked = [queries[i] for i in sample(len(queries), n, seed)]
        if found.direction == DIRECTIONS[0]:
            shown[(found.direction, which)] = [
                Shown(
                    None,
                    Hit(0, 0.0, images.ids[row], images.photo(row), True),
                    *(captions_for_image(score, split, images, row, shown_top) for score in scores),
                    int(ranks[0].i2t[row]) + 1,
                    int(ranks[1].i2t[row]) + 1,
                )
                for row in picked
            ]
        else:
            shown[(found.direction, which)] = [
                Shown(
                    split.captions[j],
                    None,
                    *(images_for_caption(score, split, images, j, shown_top) for score in scores),
                    int(ranks[0].t2i[j]) + 1,
                    int(ranks[1].t2i[j]) + 1,
                )
                for j in picked
            ]
    about = [
        f"A: {a.source} ({a.info.method}, trained on {a.info.dataset})",
        f"B: {b.source} ({b.info.method}, trained on {b.info.dataset})",
        f"data {data.dataset}, split {split.split}: {split.n_images:,} images, {split.n_captions:,} captions, every "
        f"one a query; ranks as the recall table counts them (ties count against the model)",
        f"up to {n} queries of each one-sided set sampled with seed {seed}; each model's top {shown_top} shown",
    ]
    title = f"{a.info.method} (A) against {b.info.method} (B), top {k}: {data.dataset} {split.split}"
    return SideBySide(title, about, contrasts, shown)


def render_side_by_side(page: SideBySide) -> str:
    """The comparison as one self-contained HTML page (``templates/side_by_side.html.j2``; thumbnails embedded, as
    the gallery's)."""
    return render_with_photos(
        "side_by_side.html.j2", title=page.title, about=page.about, contrasts=page.contrasts, shown=page.shown
    )
