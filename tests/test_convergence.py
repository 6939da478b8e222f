"""The convergence rule (itrlab.report.convergence): still learning by each seed's best-so-far gain over the last
fifth against a tolerance; a schedule not tuned for a row when its best epoch lies well before its first decay
or it overfitted before it."""

from __future__ import annotations

import math

import pytest

from itrlab.report.convergence import (
    GAIN_FLOOR,
    chosen_decays,
    convergence,
    decay_choices,
    decay_epochs,
    row_convergence,
    tolerance,
)


def curve(values, start=1):
    return list(enumerate(values, start=start))


def test_seeds_that_each_still_rise_past_the_tolerance_are_still_learning_though_their_levels_differ_more():
    # three seeds 2.4 apart in level, each rising by 2 over the last fifth (epochs 8 -> 10): the rise is the
    # seeds' own, their spread of levels (2.4) does not hide it
    base = [200, 230, 250, 260, 265, 268, 270, 271, 272, 273]
    seeds = [curve([v + offset for v in base]) for offset in (0.0, 2.4, 4.8)]
    found = convergence(seeds, tol=1.0)
    assert (found.seeds, found.epochs, found.since) == (3, 10, 8)
    assert found.gain == pytest.approx(2.0)
    assert found.learning == (
        "best validation rsum still rising: +2.0 from epoch 8 to 10 (mean over 3 seeds), more than the tolerance 1.0"
    )
    levels = [s[-1][1] for s in seeds]
    assert max(levels) - min(levels) > found.gain  # the levels differ by more than the rise
    # the same seeds held to a tolerance of 2.5 (half a minimum detectable effect of 5) are not
    assert convergence(seeds, tol=tolerance(5.0)).learning == ""


def test_a_flat_curve_whose_last_epoch_is_its_argmax_by_a_hair_is_not_still_learning():
    flat = curve([250.0, 280.0, 290.0, 291.0, 291.2, 291.1, 291.0, 291.1, 291.13, 291.2 + 0.07])
    found = convergence([flat])
    assert found.best_epoch == 10 and found.epochs == 10  # its argmax is its last epoch
    assert found.gain == pytest.approx(0.07) and found.learning == ""


def test_a_best_epoch_well_before_the_first_decay_is_a_schedule_not_tuned_for_the_row():
    # peaks at epoch 3 of 30, the rate decays after epoch 15, the curve drifts down meanwhile
    values = [260.0, 275.0, 280.0] + [279.0 - 0.1 * i for i in range(27)]
    found = convergence([curve(values), curve([v + 1 for v in values])], decay_epochs=(15, 25))
    assert found.best_epoch == 3 and found.decay == 15 and found.learning == ""
    assert found.schedule == "best epoch 3, 12 epochs before the first decay (after epoch 15)"
    # a decay after epoch 5 is no mark: the best epoch is not well before it, and by then the curve lay 1.1
    # below its best, within a tolerance of 2
    assert convergence([curve(values)], tol=2.0, decay_epochs=(5,)).schedule == ""
    # a row that peaked at 6, fell by 3 by its decay after epoch 10: it overfitted before the decay
    late = [250, 260, 270, 275, 278, 280, 279, 278, 277.5, 277.0, 279, 279, 279, 279, 279]
    found = convergence([curve(late)], decay_epochs=(10,))
    assert found.schedule == (
        "overfitted before the first decay (after epoch 10): validation rsum 3.0 below its best by then"
    )
    assert convergence([curve(late)], tol=5.0, decay_epochs=(10,)).schedule == ""  # within a tolerance of 5
    # no decay, or one the training never reached: nothing to judge
    assert (
        convergence([curve(values)]).schedule == ""
        and convergence([curve(values[:10])], decay_epochs=(15,)).decay is None
    )


def test_one_epoch_is_no_curve_and_rows_without_history_are_not_judged():
    assert convergence([curve([120.0])]).learning == "1 epoch trained: no curve to judge"
    assert convergence([]) is None and convergence([[(1, math.nan)]]) is None
    rows = row_convergence({"A": [curve([1.0, 2.0, 2.0, 2.0, 2.0])], "B": []}, {"A": 0.5})
    assert set(rows) == {"A"} and rows["A"].tolerance == 0.5
    assert row_convergence({"A": [curve([1.0, 2.0])]})["A"].tolerance == GAIN_FLOOR == tolerance(None) == tolerance(0.0)


def test_decay_epochs_are_read_from_a_trials_flattened_config():
    assert decay_epochs({"train.lr_decay_epochs": "[15, 25]"}) == (15, 25)
    assert decay_epochs({"train.lr_decay_epochs": "[]"}) == () == decay_epochs({})
    assert decay_epochs({"train.lr_decay_epochs": "fifteen"}) == () == decay_epochs({"train.lr_decay_epochs": "[true]"})


def test_a_decay_chosen_on_validation_is_read_from_the_trials_metric_and_its_choices_from_its_config():
    params = {"train.lr_decay_epochs": "[]", "train.lr_decay_choices": "[3, 9, 15]"}
    assert decay_epochs(params, {"lr_decay_chosen": 9.0}) == (9,) and decay_choices(params) == (3, 9, 15)
    assert decay_epochs(params, {"lr_decay_chosen": math.nan}) == () == decay_epochs(params, {"rsum": 1.0})
    assert decay_choices({"train.lr_decay_choices": "None"}) == () == decay_choices({})
    assert chosen_decays([0, 1, 2], [(9,), (3,), (9,)]) == "after 3 (seed 1), after 9 (seeds 0, 2)"


def test_each_seed_is_judged_at_the_decay_it_chose():
    """BTR's seeds peak at epoch 3 whatever their decay: the two that chose 15 peak 12 epochs before it, a
    schedule not tuned for them; seeds that peak just after the decay each chose are not marked."""
    early = [260.0, 275.0, 280.0] + [279.0 - 0.1 * i for i in range(27)]
    chose = [(15,), (3,), (15,)]
    found = convergence([curve(early)] * 3, seed_decays=chose, chosen=chosen_decays([0, 1, 2], chose))
    assert found.decay == 15 and found.chosen == "after 3 (seed 1), after 15 (seeds 0, 2)"
    assert found.schedule == (
        "best epochs 3, 3, 3 against first decays after 15, 3, 15: at or before half the decay and 3 or more "
        "epochs before it in 2 of 3 seeds"
    )
    assert (
        found.to_dict()["decay_chosen"] == found.chosen and "decay_chosen" not in convergence([curve(early)]).to_dict()
    )

    def peaks_after(decay: int) -> list[tuple[int, float]]:
        return curve([200.0 + min(epoch, decay + 1) for epoch in range(1, 31)])

    found = convergence([peaks_after(3), peaks_after(9), peaks_after(15)], seed_decays=[(3,), (9,), (15,)])
    assert found.schedule == "" and found.decay == 9
    # the same seeds all held to one decay after 15 (the single schedule): the one that peaks at 4 is not the median
    assert convergence([peaks_after(3), peaks_after(9), peaks_after(15)], decay_epochs=(15,)).schedule == ""
    with pytest.raises(ValueError, match="2 seeds' decays for 3 curves"):
        convergence([peaks_after(3)] * 3, seed_decays=[(3,), (9,)])
