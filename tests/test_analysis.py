"""The analysis fixed before the data (itrlab.report.analysis, itrlab.report.bootstrap): metrics from per-query
ranks, the paired bootstrap over test images and seeds, the paired t-test, the minimum detectable effect, Holm's
adjustment and the verdict."""

from __future__ import annotations

import math
import time
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import integrate, stats

from itrlab.eval.ranking import Ranks
from itrlab.eval.recall import table_from_folds
from itrlab.report.analysis import (
    CONTRADICTED,
    INCONCLUSIVE,
    NO_EFFECT,
    REPRODUCED,
    SEEDS_AND_IMAGES,
    SEEDS_ONLY,
    compare,
    holm,
    judge,
    minimum_detectable_effect,
    paired_power,
    paired_t_p,
    smallest_mdes,
)
from itrlab.report.bootstrap import RANK_METRICS, image_contributions, paired_bootstrap, rank_metrics


def ranks(i2t, t2i, folds, cpi=5):
    """A trial's test ranks as ``test_ranks.npz`` holds them."""
    return SimpleNamespace(
        i2t=np.asarray(i2t), t2i=np.asarray(t2i), fold_sizes=np.asarray(folds), captions_per_image=cpi
    )


def random_ranks(rng, folds, cpi=5, top=30):
    i2t = np.concatenate([rng.integers(0, min(top, cpi * (n - 1) + 1), n) for n in folds])
    t2i = np.concatenate([rng.integers(0, min(top, n), cpi * n) for n in folds])
    return ranks(i2t, t2i, folds, cpi)


@pytest.mark.parametrize("folds", [(1000,), (200, 200, 200, 200, 200), (7,)])
def test_metrics_from_ranks_are_the_recall_tables(folds):
    rng = np.random.default_rng(len(folds))
    found = random_ranks(rng, folds)
    per_fold, start = [], 0
    for n in folds:
        i2t, t2i = found.i2t[start : start + n], found.t2i[5 * start : 5 * (start + n)]
        per_fold.append(Ranks(i2t.astype(np.int64), t2i.astype(np.int64), 0.0, 0.0, 5))
        start += n
    table = table_from_folds(per_fold, "5fold", sum(folds)).metrics()
    assert rank_metrics(found) == pytest.approx({metric: table[metric] for metric in RANK_METRICS}, abs=1e-9)
    with pytest.raises(ValueError, match="ranks give"):
        image_contributions(found, "md")
    with pytest.raises(ValueError, match="expected"):
        rank_metrics(ranks(found.i2t[:-1], found.t2i, folds))


def test_identical_rows_give_a_zero_interval_and_p_one():
    rng = np.random.default_rng(0)
    same = {seed: random_ranks(rng, (100,)) for seed in range(3)}
    found = paired_bootstrap(same, same)
    assert (found.value, found.low, found.high, found.p) == (0.0, 0.0, 0.0, 1.0)
    assert (found.seeds, found.images, found.replicates) == (3, 100, 2000)


def test_the_bootstrap_covers_the_seeds_when_the_test_images_add_no_noise():
    """Seed 0: the two rows rank alike; seed 1: the row puts every image's caption first, the reference none. The
    difference of i2t R@1 is then the same on any resample of images (0 and 100), and resampling the two seeds
    gives means 0, 50, 100 with probabilities 1/4, 1/2, 1/4: the interval is [0, 100], p about 2 x 1/4."""
    n, cpi = 200, 5
    misses = ranks(np.full(n, 3), np.full(cpi * n, 3), (n,))
    hits = ranks(np.zeros(n, int), np.full(cpi * n, 3), (n,))
    found = paired_bootstrap({0: misses, 1: hits}, {0: misses, 1: misses}, "i2t_R1")
    assert found.value == pytest.approx(50.0)
    assert (found.low, found.high) == (pytest.approx(0.0), pytest.approx(100.0))
    assert found.p == pytest.approx(0.5, abs=0.05)


def test_the_bootstrap_covers_the_test_images_when_the_seeds_agree():
    """Both seeds alike; the row finds the right caption first for 10% of 1,000 images where the reference does
    not. The difference of i2t R@1 is 100 x the share of those images in a resample: 10 with standard error
    100 sqrt(0.1 x 0.9 / 1000) = 0.949, so the 95% interval is 10 -+ 1.86."""
    n = 1000
    base = np.full(n, 4)
    better = base.copy()
    better[::10] = 0
    t2i = np.full(5 * n, 4)
    row = {s: ranks(better, t2i, (n,)) for s in (0, 1)}
    reference = {s: ranks(base, t2i, (n,)) for s in (0, 1)}
    found = paired_bootstrap(row, reference, "i2t_R1")
    half = 1.959964 * 100 * math.sqrt(0.1 * 0.9 / n)
    assert found.value == pytest.approx(10.0)
    assert found.low == pytest.approx(10 - half, abs=0.3) and found.high == pytest.approx(10 + half, abs=0.3)
    assert found.p == pytest.approx(2 / 2001)  # no replicate at or below 0: the add-one rule's smallest p
    # resampling happens within folds: two folds of 500 average their recalls
    folded = paired_bootstrap(
        {0: ranks(better, t2i, (500, 500))}, {0: ranks(base, t2i, (500, 500))}, "i2t_R1", replicates=500
    )
    assert folded.value == pytest.approx(10.0) and folded.low < 10 < folded.high


def test_the_bootstrap_is_fast_seeded_and_refuses_two_test_sets():
    rng = np.random.default_rng(1)
    row = {s: random_ranks(rng, (1000,)) for s in range(5)}
    reference = {s: random_ranks(rng, (1000,)) for s in range(5)}
    start = time.perf_counter()
    first = paired_bootstrap(row, reference)
    assert time.perf_counter() - start < 2.0  # 1K test images, 5 seeds, 2,000 replicates
    assert paired_bootstrap(row, reference) == first  # a fixed generator: the same interval every time
    assert first.value == pytest.approx(
        np.mean([rank_metrics(row[s])["rsum"] - rank_metrics(reference[s])["rsum"] for s in range(5)])
    )
    assert paired_bootstrap(row, {9: reference[0]}) is None  # no shared seed
    with pytest.raises(ValueError, match="one test set"):
        paired_bootstrap(row, {0: random_ranks(rng, (500, 500))})


def test_the_paired_t_p_is_scipys():
    values, baseline = {0: 290.1, 1: 288.0, 2: 293.5, 3: 291.0}, {0: 285.0, 1: 287.5, 2: 286.0, 3: 290.2, 7: 1.0}
    shared = [0, 1, 2, 3]
    expected = stats.ttest_rel([values[s] for s in shared], [baseline[s] for s in shared]).pvalue
    assert paired_t_p(values, baseline) == pytest.approx(expected)
    assert paired_t_p({0: 1.0}, {0: 2.0}) is None
    assert paired_t_p({0: 1.0, 1: 2.0}, {0: 1.0, 1: 2.0}) == 1.0  # no difference at all
    assert paired_t_p({0: 2.0, 1: 3.0}, {0: 1.0, 1: 2.0}) == 0.0  # the same difference every seed


def _power_by_integration(effect, n, sd, alpha=0.05):
    """The paired t-test's power without the noncentral t: T = (Z + shift) / sqrt(V / df), V chi-square with df
    degrees of freedom; P(|T| > c) integrated over V."""
    df, shift = n - 1, effect / (sd / math.sqrt(n))
    c = stats.t.ppf(1 - alpha / 2, df)

    def rejects(v):
        scale = c * math.sqrt(v / df)
        return (stats.norm.sf(scale - shift) + stats.norm.cdf(-scale - shift)) * stats.chi2.pdf(v, df)

    return integrate.quad(rejects, 0, np.inf)[0]


def test_the_minimum_detectable_effect_has_80_percent_power():
    # G*Power's paired t-test: effect size dz = 1 with 10 pairs has power 0.8031; dz = 0.5 needs 34 pairs (0.8078)
    assert paired_power(1.0, 10, 1.0) == pytest.approx(0.8031, abs=1e-4)
    assert paired_power(2.5, 34, 5.0) == pytest.approx(0.8078, abs=1e-4)
    for seeds, sd in ((2, 16.97), (3, 5.1), (5, 4.0), (10, 1.0)):
        mde = minimum_detectable_effect(seeds, sd)
        assert _power_by_integration(mde, seeds, sd) == pytest.approx(0.80, abs=1e-5)
    # far from 0 the tail against the effect underflows (scipy's nct gives NaN there): the power stays a number
    for seeds in (2, 3, 5):
        for shift in (5.0, 8.0, 20.0, 100.0):
            power = paired_power(shift / math.sqrt(seeds), seeds, 1.0)
            assert power == pytest.approx(_power_by_integration(shift / math.sqrt(seeds), seeds, 1.0), abs=1e-6)
    assert minimum_detectable_effect(10, 1.0) < 1.0  # dz = 1 has a little more than 80%
    # AsCL > w/o P&N, -4.5 +- 7.5 over 3 seeds (sd 3.02): a paired test detects about 10 rsum 80% of the time
    sd = 7.5 * math.sqrt(3) / stats.t.ppf(0.975, 2)
    assert minimum_detectable_effect(3, sd) == pytest.approx(9.85, abs=0.01)
    assert minimum_detectable_effect(1, 2.0) is None and minimum_detectable_effect(4, 0.0) == 0.0


def test_holm_against_a_hand_worked_family():
    # sorted: d 0.005 x 4 = 0.02; a 0.01 x 3 = 0.03; c 0.03 x 2 = 0.06; b 0.04 x 1 = 0.04, raised to 0.06
    assert holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005}) == pytest.approx(
        {"a": 0.03, "b": 0.06, "c": 0.06, "d": 0.02}
    )
    assert holm({"x": 0.6, "y": 0.7}) == {"x": 1.0, "y": 1.0}  # capped at 1
    assert holm({"only": 0.04}) == {"only": 0.04} and holm({}) == {}


def _stats(row, reference, n=1000, hits=100, metric_name="i2t_R1"):
    """Per-seed values and ranks of two rows: the row finds the first caption of ``hits`` more images."""
    base = np.full(n, 4)
    better = base.copy()
    better[:hits] = 0
    t2i = np.full(5 * n, 4)
    seeds = list(row)
    return compare(
        row,
        reference,
        {s: ranks(better, t2i, (n,)) for s in seeds},
        {s: ranks(base, t2i, (n,)) for s in seeds},
        metric_name,
        "F",
        "A",
    )


def test_the_verdict_follows_from_the_interval_and_the_holm_p():
    row, reference = {0: 30.0, 1: 31.0, 2: 29.5}, {0: 20.0, 1: 20.5, 2: 19.0}
    found = _stats(row, reference)
    assert found.seeds == 3 and found.bootstrap is not None and found.mde is not None
    up = judge(found, +1, holm_p=0.01)
    assert up.word == REPRODUCED and up.interval_kind == SEEDS_AND_IMAGES
    assert up.interval == (found.bootstrap.low, found.bootstrap.high) and up.interval[0] > 0
    assert up.reason.startswith("the seeds + test images interval [+") and "in the expected direction" in up.reason
    assert judge(found, -1, holm_p=0.01).word == CONTRADICTED
    weak = judge(found, +1, holm_p=0.2, paper_effect=3.0)  # the interval excludes 0, the adjusted p does not
    assert weak.word == NO_EFFECT and "excludes 0 but Holm p 0.2 >= 0.05" in weak.reason
    assert weak.paper_outside is True and "the paper's effect +3.0 lies outside the interval" in weak.reason
    blocked = judge(found, +1, holm_p=0.01, blockers=["F still learning (...)"], notes=["schedule not tuned for A"])
    assert (blocked.word, blocked.reason) == (INCONCLUSIVE, "F still learning (...); schedule not tuned for A")
    # without ranks the paired interval over seeds decides, and says so
    seeds_only = compare(row, reference, metric="i2t_R1")
    found_words = judge(seeds_only, +1, None)
    assert found_words.interval_kind == SEEDS_ONLY and found_words.holm_p is None and found_words.word == REPRODUCED
    assert _stats(row, reference, metric_name="md").bootstrap is None  # ranks give no MD: seeds decide
    lone = judge(compare({0: 1.0}, {0: 0.0}), +1, None)
    assert lone.word == INCONCLUSIVE and lone.reason == "1 shared seed: no paired test" and lone.interval is None
    with pytest.raises(ValueError, match="direction"):
        judge(found, 0, 0.01)


def test_a_difference_that_holds_zero_is_no_effect_detected_with_its_mde():
    row, reference = {0: 30.0, 1: 25.0, 2: 33.0}, {0: 29.0, 1: 28.0, 2: 30.0}
    found = compare(row, reference)
    verdict = judge(found, +1, found.p, paper_effect=15.0)
    assert verdict.word == NO_EFFECT and verdict.interval[0] < 0 < verdict.interval[1]
    assert f"smallest effect detectable at 80% power: {found.mde:.1f}" in verdict.reason
    assert verdict.paper_outside is True
    assert verdict.to_dict()["word"] == NO_EFFECT and verdict.to_dict()["mde"] == found.mde
    assert smallest_mdes({"F": row, "A": reference, "B": {0: 1.0}}, [("F", "A"), ("B", "A")]) == {
        "F": found.mde,
        "A": found.mde,
    }
