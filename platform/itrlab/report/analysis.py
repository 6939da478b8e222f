"""One analysis for every comparison of two rows, fixed before the data, and the verdict that follows from it.

A comparison is a row against its reference (a sweep's baseline, a ``table.compare`` pair, a paper's claim) in one
metric, over the seeds both rows finished. :func:`compare` computes the paired interval over seeds and the paired
t-test's p (:func:`paired_t_p`); the paired bootstrap over test images and seeds (:mod:`itrlab.report.bootstrap`)
when both rows have their test ranks; and the minimum detectable effect (:func:`minimum_detectable_effect`: 80% power
at alpha = 0.05). A verdict with a direction needs both the interval and the t-test: with three to five seeds the
bootstrap's spread over seeds is narrower than Student's t makes it, and the t-test is blind to the test sample. The
t-test's p is the one Holm's adjustment (:func:`holm`) takes over the family the caller judges together.

:func:`judge` gives one of :data:`WORDS`: **inconclusive** when a row is still learning or failed, a reference failed
its own claim, or fewer than two seeds are shared; otherwise the deciding interval (the bootstrap's when every shared
seed has ranks, else the paired one) decides: **reproduced** or **contradicted** when it excludes 0 on the expected
or the other side and the Holm-adjusted p is below 0.05, **no effect detected** otherwise (with the MDE, and whether
the paper's own effect lies outside the interval). The rule and its thresholds are fixed here, before any data.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scipy.optimize import brentq
from scipy.stats import nct
from scipy.stats import t as student_t

from itrlab.report.bootstrap import RANK_METRICS, BootstrapInterval, RankSource, paired_bootstrap
from itrlab.report.stats import Interval, paired_interval

ALPHA = 0.05
POWER = 0.80
REPRODUCED, CONTRADICTED, NO_EFFECT, INCONCLUSIVE = "reproduced", "contradicted", "no effect detected", "inconclusive"
WORDS = (REPRODUCED, CONTRADICTED, NO_EFFECT, INCONCLUSIVE)
SEEDS_AND_IMAGES, SEEDS_ONLY = "seeds + test images", "seeds"


def _shared_differences(values: Mapping[int, float], baseline: Mapping[int, float]) -> list[float]:
    return [values[seed] - baseline[seed] for seed in sorted(set(values) & set(baseline))]


def paired_t_p(values: Mapping[int, float], baseline: Mapping[int, float]) -> float | None:
    """The two-sided p-value of the paired t-test of ``values[s] - baseline[s]`` over the seeds both hold (n - 1
    degrees of freedom); None with fewer than two shared seeds. Differences with no spread give 1 when they
    are all 0 and 0 otherwise (the t statistic is then 0 or infinite)."""
    differences = _shared_differences(values, baseline)
    if len(differences) < 2:
        return None
    mean, sd = statistics.fmean(differences), statistics.stdev(differences)
    if sd == 0:
        return 1.0 if mean == 0 else 0.0
    t = mean / (sd / math.sqrt(len(differences)))
    return float(2 * student_t.sf(abs(t), len(differences) - 1))


def paired_power(effect: float, seeds: int, sd: float, alpha: float = ALPHA) -> float:
    """The power of a two-sided paired t-test at ``alpha`` over ``seeds`` differences of standard deviation
    ``sd`` when the true mean difference is ``effect``: P(|T| > t crit) for T noncentral t with ``seeds - 1``
    degrees of freedom and noncentrality ``effect / (sd / sqrt(seeds))``."""
    df = seeds - 1
    critical = student_t.ppf(1 - alpha / 2, df)
    shift = abs(effect) / (sd / math.sqrt(seeds))
    opposite = nct.cdf(-critical, df, shift)  # the tail against the effect's sign
    # scipy's nct gives NaN for that tail once the noncentrality passes about 7.5 (at any df), where it is far
    # below 1e-8: it counts 0 (two seeds' MDE lies there: its bracket would end on NaN)
    return float(nct.sf(critical, df, shift) + (0.0 if math.isnan(opposite) else opposite))


def minimum_detectable_effect(seeds: int, sd: float, alpha: float = ALPHA, power: float = POWER) -> float | None:
    """The smallest true mean difference that a two-sided paired t-test at ``alpha`` over ``seeds`` differences
    with standard deviation ``sd`` detects with probability ``power`` (:func:`paired_power`, solved by Brent's
    method); None with fewer than two seeds or an unknown spread, 0 for differences with no spread."""
    if seeds < 2 or not math.isfinite(sd) or sd < 0:
        return None
    if sd == 0:
        return 0.0
    high = sd
    while paired_power(high, seeds, sd, alpha) < power:  # power rises with the effect: bracket the root
        high *= 2
    return float(brentq(lambda effect: paired_power(effect, seeds, sd, alpha) - power, 0.0, high, xtol=1e-9))


def holm(p_values: Mapping[str, float]) -> dict[str, float]:
    """Holm's step-down adjusted p-values of a family (id -> p): the i-th smallest p times ``m - i + 1``, made
    monotone (never below an adjusted p ranked before it) and capped at 1. Ties keep the family's order."""
    order = sorted(p_values, key=lambda key: p_values[key])
    m, running, adjusted = len(order), 0.0, {}
    for i, key in enumerate(order):
        running = max(running, min(1.0, (m - i) * p_values[key]))
        adjusted[key] = running
    return {key: adjusted[key] for key in p_values}


def smallest_mdes(values: Mapping[str, Mapping[int, float]], pairs: Sequence[tuple[str, str]]) -> dict[str, float]:
    """Row -> the smallest minimum detectable effect of the ``pairs`` (row, reference) it is in, from the rows'
    per-seed ``values``: what the table must resolve about it (a row in no pair with an MDE is absent)."""
    found: dict[str, float] = {}
    for row, reference in pairs:
        differences = _shared_differences(values.get(row, {}), values.get(reference, {}))
        if len(differences) > 1:
            mde = minimum_detectable_effect(len(differences), statistics.stdev(differences))
            for name in (row, reference):
                found[name] = min(found.get(name, math.inf), mde)
    return found


@dataclass(frozen=True)
class ComparisonStats:
    """The numbers of one comparison over the ``seeds`` both rows finished; ``paired`` is None with fewer than two,
    ``bootstrap`` None when some trial lacks its ranks."""

    row: str
    reference: str
    metric: str
    seeds: int
    paired: Interval | None
    p: float | None
    bootstrap: BootstrapInterval | None
    sd: float | None
    mde: float | None

    @property
    def difference(self) -> float | None:
        """The mean over the shared seeds of row minus reference (None: no shared seed)."""
        return self.paired.value if self.paired is not None else None


def compare(
    values: Mapping[int, float],
    baseline: Mapping[int, float],
    row_ranks: Mapping[int, RankSource] | None = None,
    base_ranks: Mapping[int, RankSource] | None = None,
    metric: str = "rsum",
    row: str = "",
    reference: str = "",
) -> ComparisonStats:
    """The numbers of ``row`` (per-seed test ``values`` of ``metric``) against ``reference`` (``baseline``):
    paired over the shared seeds and, when both rows hold ranks for every one of those seeds and ranks give
    the metric (:data:`~itrlab.report.bootstrap.RANK_METRICS`), the seeds + test images bootstrap of it."""
    differences = _shared_differences(values, baseline)
    paired = paired_interval(dict(values), dict(baseline))
    sd = statistics.stdev(differences) if len(differences) > 1 else None
    shared = set(values) & set(baseline)
    bootstrap = None
    ranked = row_ranks is not None and base_ranks is not None and shared <= set(row_ranks) & set(base_ranks)
    if shared and ranked and metric in RANK_METRICS:
        bootstrap = paired_bootstrap({s: row_ranks[s] for s in shared}, {s: base_ranks[s] for s in shared}, metric)
    mde = minimum_detectable_effect(len(differences), sd) if sd is not None else None
    return ComparisonStats(
        row, reference, metric, len(differences), paired, paired_t_p(values, baseline), bootstrap, sd, mde
    )


@dataclass(frozen=True)
class Verdict:
    """A comparison's verdict. ``direction``: +1 when the row is expected above its reference, -1 below; ``interval``:
    the deciding one (None when inconclusive before any); ``paper_outside``: whether the paper's own effect lies
    outside it (None: no paper effect, or no interval)."""

    word: str
    reason: str
    stats: ComparisonStats
    direction: int
    holm_p: float | None
    interval: tuple[float, float] | None
    interval_kind: str
    paper_effect: float | None = None
    paper_outside: bool | None = None

    def to_dict(self) -> dict:
        s = self.stats
        return {
            "row": s.row,
            "reference": s.reference,
            "metric": s.metric,
            "word": self.word,
            "reason": self.reason,
            "direction": self.direction,
            "seeds": s.seeds,
            "difference": s.difference,
            "paired_ci95": s.paired.half_width if s.paired is not None else None,
            "p": s.p,
            "holm_p": self.holm_p,
            "bootstrap": s.bootstrap.to_dict() if s.bootstrap is not None else None,
            "mde": s.mde,
            "interval": list(self.interval) if self.interval is not None else None,
            "interval_kind": self.interval_kind,
            "paper_effect": self.paper_effect,
            "paper_outside": self.paper_outside,
        }


def judge(
    stats: ComparisonStats,
    direction: int,
    holm_p: float | None,
    paper_effect: float | None = None,
    blockers: Sequence[str] = (),
    notes: Sequence[str] = (),
    alpha: float = ALPHA,
) -> Verdict:
    """The verdict on ``stats`` (the rule of the module doc). ``holm_p``: the Holm-adjusted p within its family (None:
    a family of one, its own p); ``blockers``: phrases that make it inconclusive (``"F still learning (...)"``);
    ``notes``: phrases added to the reason whatever the word."""
    if direction not in (1, -1):
        raise ValueError(f"direction {direction!r}: +1 (row above its reference) or -1 (below)")
    adjusted = holm_p if holm_p is not None else stats.p
    bootstrap = stats.bootstrap
    kind = SEEDS_AND_IMAGES if bootstrap is not None else SEEDS_ONLY
    interval = (
        (bootstrap.low, bootstrap.high)
        if bootstrap is not None
        else (stats.paired.low, stats.paired.high)
        if stats.paired is not None and stats.paired.half_width is not None
        else None
    )

    def verdict(word: str, reason: str, shown: tuple[float, float] | None) -> Verdict:
        outside = None
        if paper_effect is not None and shown is not None:
            outside = not shown[0] <= paper_effect <= shown[1]
        text = "; ".join([reason, *notes])
        return Verdict(word, text, stats, direction, holm_p, shown, kind, paper_effect, outside)

    if blockers:
        return verdict(INCONCLUSIVE, "; ".join(blockers), interval)
    if interval is None or adjusted is None:
        return verdict(
            INCONCLUSIVE, f"{stats.seeds} shared seed{'s' if stats.seeds != 1 else ''}: no paired test", None
        )
    side = 1 if interval[0] > 0 else -1 if interval[1] < 0 else 0
    where = f"the {kind} interval [{interval[0]:+.1f}, {interval[1]:+.1f}]"
    if side and adjusted < alpha:
        word = REPRODUCED if side == direction else CONTRADICTED
        way = "the expected direction" if side == direction else "the other direction"
        return verdict(word, f"{where} excludes 0 in {way}, Holm p {adjusted:.2g} < {alpha:g}", interval)
    why = f"{where} holds 0" if not side else f"{where} excludes 0 but Holm p {adjusted:.2g} >= {alpha:g}"
    if stats.mde is not None:
        why += f"; smallest effect detectable at 80% power: {stats.mde:.1f}"
    if paper_effect is not None:
        inside = interval[0] <= paper_effect <= interval[1]
        why += f"; the paper's effect {paper_effect:+.1f} lies {'inside' if inside else 'outside'} the interval"
    return verdict(NO_EFFECT, why, interval)
