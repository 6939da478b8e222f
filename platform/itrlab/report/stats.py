"""Intervals over seeds for the sweep's pivot: a mean with its Student-t confidence interval, and the
difference of two rows' means with Welch's interval, so that "F beats A" comes with a margin; where two
rows share their seeds, also the paired difference: the Student-t interval of the per-seed differences.

Pairing is sound because a seed fixes a run's data order and the initialisation of the parts two
configs share (tests/test_train.py: two configs that differ only in the loss see the same first batch
and start from the same image-encoder weights), so the seed's share of the noise cancels in the
difference. The paired interval counts only the seeds both rows finished.

With one seed there is no interval (``half_width`` is None and the tables say "1 seed"), never
``± 0.00``.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from scipy.stats import t as student_t
from scipy.stats import ttest_ind

CONFIDENCE = 0.95


def finite(value) -> bool:
    """Whether ``value`` is a real finite number (not a bool): a cell with a value, not a missing one."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class Interval:
    """``value ± half_width`` at ``confidence``, from ``n`` seeds (``half_width`` None: one seed)."""

    value: float
    half_width: float | None
    n: int

    @property
    def low(self) -> float | None:
        return None if self.half_width is None else self.value - self.half_width

    @property
    def high(self) -> float | None:
        return None if self.half_width is None else self.value + self.half_width

    def excludes_zero(self) -> bool:
        """Whether the interval lies wholly on one side of 0 (a difference "with a margin")."""
        return self.half_width is not None and (self.low > 0 or self.high < 0)


def mean_interval(values: list[float], confidence: float = CONFIDENCE) -> Interval:
    """The mean of ``values`` and the half-width of its Student-t interval (n - 1 degrees of freedom)."""
    n = len(values)
    if n == 0:
        return Interval(math.nan, None, 0)
    mean = statistics.fmean(values)
    if n == 1:
        return Interval(mean, None, 1)
    half = student_t.ppf(0.5 + confidence / 2, n - 1) * statistics.stdev(values) / math.sqrt(n)
    return Interval(mean, float(half), n)


def difference_interval(values: list[float], baseline: list[float], confidence: float = CONFIDENCE) -> Interval:
    """mean(values) - mean(baseline) with Welch's interval (unequal variances, Welch-Satterthwaite
    degrees of freedom; scipy's ``ttest_ind``); no interval unless both sides have two seeds or more. ``n`` is
    the smaller count."""
    n, m = len(values), len(baseline)
    if n == 0 or m == 0:
        return Interval(math.nan, None, 0)
    diff = statistics.fmean(values) - statistics.fmean(baseline)
    if n < 2 or m < 2:
        return Interval(diff, None, min(n, m))
    if statistics.variance(values) == 0 and statistics.variance(baseline) == 0:
        return Interval(diff, 0.0, min(n, m))
    interval = ttest_ind(values, baseline, equal_var=False).confidence_interval(confidence)
    return Interval(diff, float(interval.high - interval.low) / 2, min(n, m))


PAIRED_SEEDS = 2  # the seeds two rows must share for a paired interval (one difference has no spread)


def paired_interval(
    values: dict[int, float], baseline: dict[int, float], confidence: float = CONFIDENCE
) -> Interval | None:
    """The mean of ``values[s] - baseline[s]`` over the seeds ``s`` both hold, with the Student-t interval
    of those differences (n - 1 degrees of freedom); None unless they share :data:`PAIRED_SEEDS` seeds."""
    shared = sorted(set(values) & set(baseline))
    if len(shared) < PAIRED_SEEDS:
        return None
    return mean_interval([values[seed] - baseline[seed] for seed in shared], confidence)


@dataclass(frozen=True)
class Comparison:
    """``row`` minus ``reference`` in ``column``, with Welch's 95% interval over their seeds and, where
    they share two seeds or more, the paired interval over those (a pair of the sweep's ``table.compare``)."""

    row: str
    reference: str
    column: str
    difference: Interval
    paired: Interval | None = None
    step: bool = False  # a pair of ``table.steps``: the row adds one component to its reference

    def to_dict(self) -> dict:
        paired = self.paired
        return {
            "row": self.row,
            "reference": self.reference,
            "column": self.column,
            "difference": self.difference.value,
            "ci95": self.difference.half_width,
            "seeds": self.difference.n,
            "paired": paired.value if paired else None,
            "paired_ci95": paired.half_width if paired else None,
            "paired_seeds": paired.n if paired else None,
            "step": self.step,
        }
