"""The chance level of a recall table: what a model that scores at random gets on the test protocol.

In a fold of ``n`` images with ``c`` captions each, under random scores, a caption's image lands in the top K with
probability ``K / n`` and at least one of an image's captions with ``1 - C(cn - c, K) / C(cn, K)``; R@K is the mean
over the queries, and a protocol averages its folds. The spread of a direction's recall sum follows from the
per-query variance of ``I_1 + I_5 + I_10`` (``E[I_1 I_5] = p_1``); the two directions' spreads are added (an upper
bound: their correlation is about 0.65). That 95% range of a random model's rsum (:attr:`ChanceLevel.rsum_band`) is
the one notion of chance: the plots shade it, the report prints it, and a row is *at chance* when its interval
(its mean, with one seed) reaches it. Every printed recall table has its chance level beside it
(:meth:`ChanceLevel.lines`), and MLflow keeps it with the table (:meth:`ChanceLevel.metrics`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from itrlab.eval import get_protocol
from itrlab.eval.names import DIRECTIONS

if TYPE_CHECKING:
    from itrlab.config.schema import ExperimentConfig
    from itrlab.data.shape import DataShape
    from itrlab.eval import RecallTable

KS = (1, 5, 10)
Z95 = 1.959963984540054  # the normal 97.5% quantile: a two-sided 95% range


def image_to_text_hit(n_images: int, captions_per_image: int, k: int) -> float:
    """P(one of an image's captions is in the top ``k``) under random scores."""
    total, own = n_images * captions_per_image, captions_per_image
    if k >= total - own + 1:
        return 1.0
    return 1.0 - math.comb(total - own, k) / math.comb(total, k)


def text_to_image_hit(n_images: int, k: int) -> float:
    """P(a caption's image is in the top ``k``) under random scores."""
    return min(1.0, k / n_images)


def _nested_variance(p: list[float]) -> float:
    """Var(I_1 + I_5 + I_10) for nested hit indicators with probabilities ``p`` (increasing)."""
    second = sum(p) + 2 * sum(p[i] for i in range(len(p)) for _ in range(i + 1, len(p)))
    return second - sum(p) ** 2


@dataclass(frozen=True)
class ChanceLevel:
    """Recalls (in %) of random scores on a protocol, and the 95% range of a random model's rsum."""

    recalls: dict[str, float]  # i2t_R1 ... t2i_R10, rsum
    rsum_sd: float
    description: str

    @property
    def rsum_band(self) -> tuple[float, float]:
        """A random model's 95% range of rsum: the one notion of chance, shaded in the plots, printed in
        the report's chance row and reached by every row marked "at chance"."""
        mean, half = self.recalls["rsum"], Z95 * self.rsum_sd
        return max(mean - half, 0.0), mean + half

    @property
    def rsum_high(self) -> float:
        """The upper end of :attr:`rsum_band`."""
        return self.rsum_band[1]

    def reaches(self, low: float) -> bool:
        """Whether a row whose rsum interval starts at ``low`` (its mean, with one seed) reaches the band:
        its numbers could be a random model's."""
        return low <= self.rsum_high

    def metrics(self) -> dict[str, float]:
        """The level as flat metrics, for MLflow beside the test table: ``chance_i2t_R1`` ... ``chance_rsum``
        (a random model's expected recalls and rsum) and ``chance_rsum_low``, ``chance_rsum_high`` (its 95%
        range)."""
        low, high = self.rsum_band
        return {
            **{f"chance_{name}": value for name, value in self.recalls.items()},
            "chance_rsum_low": low,
            "chance_rsum_high": high,
        }

    def lines(self) -> list[str]:
        """The level as console lines under a recall table (:meth:`itrlab.eval.RecallTable.format`), its
        R@1/5/10 in the table's columns."""
        rows = [
            f"  {direction + ' ' + words:<18}" + "".join(f"{self.recalls[f'{direction}_R{k}']:>8.2f}" for k in KS)
            for direction, words in DIRECTIONS.items()
        ]
        low, high = self.rsum_band
        return [
            f"Chance ({self.description})",
            *rows,
            f"  rsum {self.recalls['rsum']:.2f}, 95% range {low:.2f} to {high:.2f}",
        ]

    def markdown(self) -> str:
        """The level as Markdown, under a recall table's (:meth:`itrlab.eval.RecallTable.to_markdown`)."""
        low, high = self.rsum_band
        cells = {d: " | ".join(f"{self.recalls[f'{d}_R{k}']:.2f}" for k in KS) for d in DIRECTIONS}
        return "\n".join(
            [
                f"Chance: {self.description}",
                "",
                "| direction | R@1 | R@5 | R@10 |",
                "|---|---:|---:|---:|",
                *(f"| {d} ({words}) | {cells[d]} |" for d, words in DIRECTIONS.items()),
                "",
                f"rsum {self.recalls['rsum']:.2f}, 95% range {low:.2f} to {high:.2f}",
            ]
        )


def chance_level(test_images: int, captions_per_image: int, protocol: str) -> ChanceLevel:
    """The chance level of ``protocol`` on a test split of ``test_images`` images."""
    folds = get_protocol(protocol).folds(test_images)
    n = folds[0][1] - folds[0][0]  # equal folds
    i2t = [image_to_text_hit(n, captions_per_image, k) for k in KS]
    t2i = [text_to_image_hit(n, k) for k in KS]
    recalls = {**{f"i2t_R{k}": 100 * p for k, p in zip(KS, i2t)}, **{f"t2i_R{k}": 100 * p for k, p in zip(KS, t2i)}}
    recalls["rsum"] = sum(recalls.values())
    # the two directions rank the same matrix, correlated (about 0.65 in simulations): their spreads add,
    # an upper bound of the sum's that marks rows "at chance" rather too often than too rarely
    per_fold = math.sqrt(_nested_variance(i2t) / n) + math.sqrt(_nested_variance(t2i) / (n * captions_per_image))
    sd = 100 * per_fold / math.sqrt(len(folds))
    what = f"{len(folds)} folds of {n} images" if len(folds) > 1 else f"{n} images"
    return ChanceLevel(recalls, sd, f"random scores on {what} x {captions_per_image} captions")


def chance_of_table(table: RecallTable, captions_per_image: int) -> ChanceLevel | None:
    """The chance level of ``table``'s protocol on its split (its images, ``captions_per_image`` captions
    each); None where the protocol does not fit the split."""
    try:
        return chance_level(table.n_images, captions_per_image, table.protocol)
    except ValueError:
        return None


def config_data_shape(config: ExperimentConfig) -> DataShape | None:
    """The shape of ``config``'s data, read from its files (None when they cannot be read)."""
    from itrlab.data.shape import data_shape

    dataset = config.dataset
    try:
        return data_shape(
            dataset.root, (dataset.splits.train, dataset.splits.val, dataset.splits.test), dataset.captions_per_image
        )
    except Exception:  # noqa: BLE001 - the caller then says the shape is unknown
        return None


def chance_on_test(shape: DataShape | None, protocol: str) -> ChanceLevel | None:
    """The chance level of ``protocol`` on the test split of data of ``shape`` (None: unknown, or a protocol
    that does not fit the split)."""
    if shape is None:
        return None
    try:
        return chance_level(shape.test_images, shape.captions_per_image, protocol)
    except ValueError:
        return None
