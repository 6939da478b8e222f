"""Tests of DBL's boosting losses (itrlab.methods.dbl.boosting) against plain loops from the equations.

Equation numbers refer to Diao et al., "Deep Boosting Learning" (shared/papers/dbl.txt).
"""

from __future__ import annotations

import math

import pytest
import torch
from pydantic import ValidationError

from itrlab.errors import SettingError
from itrlab.losses import Similarities, positive_mask
from itrlab.methods.dbl import (
    COOPERATIVE_LOSSES,
    DBL_STRATEGIES,
    AbsoluteMaxLoss,
    AbsoluteSumLoss,
    BoostingCombinationLoss,
    RelativeMaxLoss,
    RelativeSumLoss,
    build_dbl_strategy,
    gamma_sa,
    gamma_sa_negative,
)

# --------------------------------------------------------------------------- inputs

ID_LAYOUTS = {
    "distinct": [0, 1, 2, 3, 4, 5, 6],
    "one_duplicate": [0, 1, 0, 2, 3, 4, 5],  # two captions of image 0
    "triple_and_pair": [3, 1, 3, 2, 1, 3, 4],
}


def _matrix(size: int, gen: torch.Generator) -> torch.Tensor:
    """Similarities in (-1, 1), many near the bounds (so the soft margins matter), positives high."""
    s = torch.tanh(1.5 * torch.randn(size, size, generator=gen, dtype=torch.float64))
    s.diagonal().copy_(torch.tanh(1.5 * torch.randn(size, generator=gen, dtype=torch.float64) + 1.5))
    return s


def make_pair(image_ids: list[int], seed: int) -> tuple[Similarities, Similarities]:
    """(target, anchor) similarities of one batch."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.tensor(image_ids, dtype=torch.long)
    return Similarities(_matrix(len(ids), gen), ids), Similarities(_matrix(len(ids), gen), ids)


# --------------------------------------------------------------------------- reference loops


def ref_gamma_sa(x, m, d):
    """Eq. 17 (and gamma_1^SA of eq. 19), literally."""
    return 2 * m / (1 + math.exp((2 / m) * (x - d))) - m


def ref_gamma2_sa(y, m, d):
    """gamma_2^SA of eq. 19, literally."""
    return 2 * m / (1 + math.exp((-2 / m) * (y + d))) - m


def _lists(target, anchor):
    return target.i2t.tolist(), anchor.i2t.tolist(), target.image_ids.tolist()


def _negatives(ids, n):
    return [j for j in range(len(ids)) if ids[j] != ids[n]]


def ref_rs(target, anchor, gamma=0.2, soft=False):
    """Eq. 7, summed over negatives and over the batch (eq. 6)."""
    T, A, ids = _lists(target, anchor)
    i2t = t2i = 0.0
    for n in range(len(ids)):
        for j in _negatives(ids, n):
            x = A[n][n] - A[n][j]  # anchor relative distance, negative caption j
            m = ref_gamma_sa(x, gamma, 2.0) if soft else gamma
            i2t += max(0.0, m + x - (T[n][n] - T[n][j]))
            x = A[n][n] - A[j][n]  # negative image j
            m = ref_gamma_sa(x, gamma, 2.0) if soft else gamma
            t2i += max(0.0, m + x - (T[n][n] - T[j][n]))
    return i2t, t2i


def ref_rm(target, anchor, gamma=0.2, soft=False, hardest="difference"):
    """Eq. 8 (soft: eq. 18); hardest negatives argmax (St - Sa) over the negatives."""
    T, A, ids = _lists(target, anchor)
    i2t = t2i = 0.0
    for n in range(len(ids)):
        negs = _negatives(ids, n)
        if not negs:
            continue

        def cap_arg(j, n=n):
            x = A[n][n] - A[n][j]
            return (ref_gamma_sa(x, gamma, 2.0) if soft else gamma) + x - (T[n][n] - T[n][j])

        def img_arg(j, n=n):
            x = A[n][n] - A[j][n]
            return (ref_gamma_sa(x, gamma, 2.0) if soft else gamma) + x - (T[n][n] - T[j][n])

        if hardest == "difference":
            c = max(negs, key=lambda j: T[n][j] - A[n][j])
            i = max(negs, key=lambda j: T[j][n] - A[j][n])
        else:
            c, i = max(negs, key=cap_arg), max(negs, key=img_arg)
        i2t += max(0.0, cap_arg(c))
        t2i += max(0.0, img_arg(i))
    return i2t, t2i


def _abs_margins(gamma, alpha, soft):
    g1, g2 = alpha * gamma, gamma - alpha * gamma
    m1 = (lambda y: ref_gamma_sa(y, g1, 1.0) if g1 > 0 else 0.0) if soft else (lambda y: g1)
    m2 = (lambda y: ref_gamma2_sa(y, g2, 1.0) if g2 > 0 else 0.0) if soft else (lambda y: g2)
    return m1, m2


def ref_as(target, anchor, gamma=0.2, alpha=0.5, soft=False):
    """Eq. 9: the positive hinge inside the sum over negatives; summed over the batch."""
    T, A, ids = _lists(target, anchor)
    m1, m2 = _abs_margins(gamma, alpha, soft)
    i2t = t2i = 0.0
    for n in range(len(ids)):
        for j in _negatives(ids, n):
            i2t += max(0.0, m1(A[n][n]) + A[n][n] - T[n][n]) + max(0.0, m2(A[n][j]) + T[n][j] - A[n][j])
            t2i += max(0.0, m1(A[n][n]) + A[n][n] - T[n][n]) + max(0.0, m2(A[j][n]) + T[j][n] - A[j][n])
    return i2t, t2i


def ref_am(target, anchor, gamma=0.2, alpha=0.5, soft=False, hardest="difference"):
    """Eq. 10 (soft: eq. 19-20) with the hardest negatives of eq. 8."""
    T, A, ids = _lists(target, anchor)
    m1, m2 = _abs_margins(gamma, alpha, soft)
    i2t = t2i = 0.0
    for n in range(len(ids)):
        negs = _negatives(ids, n)
        if not negs:
            continue
        if hardest == "difference":
            c = max(negs, key=lambda j: T[n][j] - A[n][j])
            i = max(negs, key=lambda j: T[j][n] - A[j][n])
        else:
            c = max(negs, key=lambda j: m2(A[n][j]) + T[n][j] - A[n][j])
            i = max(negs, key=lambda j: m2(A[j][n]) + T[j][n] - A[j][n])
        pos = max(0.0, m1(A[n][n]) + A[n][n] - T[n][n])
        i2t += pos + max(0.0, m2(A[n][c]) + T[n][c] - A[n][c])
        t2i += pos + max(0.0, m2(A[i][n]) + T[i][n] - A[i][n])
    return i2t, t2i


def ref_mix(rel, abs_):
    """Table IV H / I: the average of a relative and an absolute loss."""

    def reference(target, anchor, gamma=0.2, alpha=0.5, soft=False, **_):
        r_i2t, r_t2i = rel(target, anchor, gamma=gamma, soft=soft)
        a_i2t, a_t2i = abs_(target, anchor, gamma=gamma, alpha=alpha, soft=soft)
        return (r_i2t + a_i2t) / 2, (r_t2i + a_t2i) / 2

    return reference


CASES = [
    (RelativeSumLoss, {}, lambda t, a: ref_rs(t, a)),
    (RelativeSumLoss, {"gamma": 0.35}, lambda t, a: ref_rs(t, a, gamma=0.35)),
    (RelativeSumLoss, {"soft": True}, lambda t, a: ref_rs(t, a, soft=True)),
    (RelativeMaxLoss, {}, lambda t, a: ref_rm(t, a)),
    (RelativeMaxLoss, {"gamma": 0.1}, lambda t, a: ref_rm(t, a, gamma=0.1)),
    (RelativeMaxLoss, {"soft": True}, lambda t, a: ref_rm(t, a, soft=True)),
    (
        RelativeMaxLoss,
        {"soft": True, "hardest": "violation"},
        lambda t, a: ref_rm(t, a, soft=True, hardest="violation"),
    ),
    (AbsoluteSumLoss, {}, lambda t, a: ref_as(t, a)),
    (AbsoluteSumLoss, {"gamma": 0.3, "alpha": 0.3}, lambda t, a: ref_as(t, a, gamma=0.3, alpha=0.3)),
    (AbsoluteSumLoss, {"soft": True}, lambda t, a: ref_as(t, a, soft=True)),
    (AbsoluteMaxLoss, {}, lambda t, a: ref_am(t, a)),
    (AbsoluteMaxLoss, {"gamma": 0.3, "alpha": 0.7}, lambda t, a: ref_am(t, a, gamma=0.3, alpha=0.7)),
    (AbsoluteMaxLoss, {"alpha": 1.0, "soft": True}, lambda t, a: ref_am(t, a, alpha=1.0, soft=True)),
    (AbsoluteMaxLoss, {"soft": True}, lambda t, a: ref_am(t, a, soft=True)),
    (
        AbsoluteMaxLoss,
        {"soft": True, "hardest": "violation"},
        lambda t, a: ref_am(t, a, soft=True, hardest="violation"),
    ),
    (BoostingCombinationLoss, {"relative": "rs", "absolute": "as"}, ref_mix(ref_rs, ref_as)),
    (BoostingCombinationLoss, {}, ref_mix(ref_rm, ref_am)),
    (
        BoostingCombinationLoss,
        {"soft": True, "gamma": 0.3},
        lambda t, a: ref_mix(ref_rm, ref_am)(t, a, gamma=0.3, soft=True),
    ),
]
CASE_IDS = [f"{cls.name}-{'-'.join(f'{k}{v}' for k, v in p.items()) or 'default'}" for cls, p, _ in CASES]
ALL_CLASSES = [RelativeSumLoss, RelativeMaxLoss, AbsoluteSumLoss, AbsoluteMaxLoss, BoostingCombinationLoss]
VARIANTS = [(cls, {}) for cls in ALL_CLASSES] + [(cls, {"soft": True}) for cls in ALL_CLASSES]
VARIANT_IDS = [f"{cls.name}-{'soft' if p else 'fixed'}" for cls, p in VARIANTS]


def _approx(value):
    return pytest.approx(value, rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("layout", list(ID_LAYOUTS))
@pytest.mark.parametrize(("cls", "params", "reference"), CASES, ids=CASE_IDS)
def test_matches_reference_loop(cls, params, reference, layout):
    for seed in range(3):
        target, anchor = make_pair(ID_LAYOUTS[layout], seed)
        out = cls(**params)(target, anchor)
        ref_i2t, ref_t2i = reference(target, anchor)
        assert cls.reduction == "sum"
        assert out.loss.item() == _approx(ref_i2t + ref_t2i)
        assert out.parts["i2t"].item() == _approx(ref_i2t)
        assert out.parts["t2i"].item() == _approx(ref_t2i)
        assert out.loss.item() > 0  # not vacuous


@pytest.mark.parametrize(
    "cls", [RelativeSumLoss, RelativeMaxLoss, AbsoluteSumLoss, AbsoluteMaxLoss], ids=lambda c: c.name
)
def test_soft_margins_change_the_loss(cls):
    """The inputs reach the region where gamma^SA departs from gamma: the soft cases test something."""
    target, anchor = make_pair(ID_LAYOUTS["one_duplicate"], seed=0)
    assert abs(cls(soft=True)(target, anchor).loss.item() - cls()(target, anchor).loss.item()) > 1e-3


def test_violation_reading_differs_from_difference_reading():
    differs = []
    for seed in range(5):
        target, anchor = make_pair(ID_LAYOUTS["distinct"], seed)
        for cls in (RelativeMaxLoss, AbsoluteMaxLoss):
            a = cls(soft=True)(target, anchor).loss.item()
            b = cls(soft=True, hardest="violation")(target, anchor).loss.item()
            assert b >= a - 1e-12  # the violation reading takes the largest soft hinge
            differs.append(b - a > 1e-6)
            # with a fixed margin the two readings coincide (why the losses refuse hardest without soft)
            ref = ref_rm if cls is RelativeMaxLoss else ref_am
            assert sum(ref(target, anchor, hardest="violation")) == _approx(sum(ref(target, anchor)))
    assert any(differs)


@pytest.mark.parametrize("cls", [AbsoluteSumLoss, AbsoluteMaxLoss], ids=lambda c: c.name)
def test_absolute_parts_add_up(cls):
    target, anchor = make_pair(ID_LAYOUTS["triple_and_pair"], seed=4)
    out = cls(soft=True)(target, anchor)
    assert (out.parts["positive"] + out.parts["negative"]).item() == _approx(out.loss.item())
    assert (out.parts["i2t"] + out.parts["t2i"]).item() == _approx(out.loss.item())


def test_combination_parts():
    target, anchor = make_pair(ID_LAYOUTS["one_duplicate"], seed=2)
    out = BoostingCombinationLoss()(target, anchor)
    rm, am = RelativeMaxLoss()(target, anchor).loss, AbsoluteMaxLoss()(target, anchor).loss
    assert out.parts["relative"].item() == _approx(rm.item())
    assert out.parts["absolute"].item() == _approx(am.item())
    assert out.loss.item() == _approx((rm + am).item() / 2)
    assert (out.parts["i2t"] + out.parts["t2i"]).item() == _approx(out.loss.item())


def test_paper_inequalities():
    """RM <= RS and RS <= AS, RM <= AM (eq. 11-13) for fixed margins."""
    for seed in range(5):
        target, anchor = make_pair(ID_LAYOUTS["triple_and_pair"], seed)
        rs, rm = RelativeSumLoss()(target, anchor).loss, RelativeMaxLoss()(target, anchor).loss
        as_, am = AbsoluteSumLoss()(target, anchor).loss, AbsoluteMaxLoss()(target, anchor).loss
        assert rm <= rs + 1e-12 and rs <= as_ + 1e-12 and rm <= am + 1e-12


# --------------------------------------------------------------------------- Table IV


def test_strategy_table_covers_a_to_i():
    assert list(DBL_STRATEGIES) == list("ABCDEFGHI")
    assert DBL_STRATEGIES["A"].loss is None and build_dbl_strategy("A") is None
    expected = {
        "B": ("rs", {}),
        "C": ("as", {}),
        "D": ("rm", {"soft": True}),
        "E": ("am", {"soft": True}),
        "F": ("rm", {}),
        "G": ("am", {}),
        "H": ("dbl", {"relative": "rs", "absolute": "as"}),
        "I": ("dbl", {"relative": "rm", "absolute": "am"}),
    }
    assert {k: (v.loss, v.row) for k, v in DBL_STRATEGIES.items() if v.loss is not None} == expected
    for name, _ in expected.values():
        assert name in COOPERATIVE_LOSSES
    # a row takes the settings its loss uses: α only with an absolute loss, hardest only with soft margins
    settings = {letter: set(row.settings) for letter, row in DBL_STRATEGIES.items()}
    assert settings == {
        "A": set(),
        "B": {"gamma"},
        "C": {"gamma", "alpha"},
        "D": {"gamma", "hardest"},
        "E": {"gamma", "alpha", "hardest"},
        "F": {"gamma"},
        "G": {"gamma", "alpha"},
        "H": {"gamma", "alpha"},
        "I": {"gamma", "alpha"},
    }


STRATEGY_REFERENCES = {
    "B": lambda t, a, **p: ref_rs(t, a, gamma=p.get("gamma", 0.2)),
    "C": lambda t, a, **p: ref_as(t, a, **p),
    "D": lambda t, a, **p: ref_rm(t, a, gamma=p.get("gamma", 0.2), soft=True),
    "E": lambda t, a, **p: ref_am(t, a, soft=True, **p),
    "F": lambda t, a, **p: ref_rm(t, a, gamma=p.get("gamma", 0.2)),
    "G": lambda t, a, **p: ref_am(t, a, **p),
    "H": lambda t, a, **p: ref_mix(ref_rs, ref_as)(t, a, **p),
    "I": lambda t, a, **p: ref_mix(ref_rm, ref_am)(t, a, **p),
}


@pytest.mark.parametrize("params", [{}, {"gamma": 0.3, "alpha": 0.3}], ids=["defaults", "gamma0.3-alpha0.3"])
@pytest.mark.parametrize("letter", list(STRATEGY_REFERENCES))
def test_strategy_matches_reference(letter, params):
    params = {key: value for key, value in params.items() if key in DBL_STRATEGIES[letter].settings}
    loss = build_dbl_strategy(letter, **params)
    for layout in ("one_duplicate", "triple_and_pair"):
        target, anchor = make_pair(ID_LAYOUTS[layout], seed=7)
        ref_i2t, ref_t2i = STRATEGY_REFERENCES[letter](target, anchor, **params)
        out = loss(target, anchor)
        assert out.loss.item() == _approx(ref_i2t + ref_t2i) and out.loss.item() > 0


def test_strategy_errors():
    with pytest.raises(ValueError, match="unknown DBL strategy"):
        build_dbl_strategy("J")
    for letter, setting, value in [
        ("D", "soft", False),
        ("D", "soft", True),
        ("F", "tau", 0.1),
        ("F", "alpha", 0.9),
        ("B", "alpha", 0.5),
        ("A", "gamma", 0.2),
        ("I", "hardest", "violation"),
    ]:
        with pytest.raises(SettingError, match=f"strategy {letter} .* does not use {setting}") as caught:
            build_dbl_strategy(letter, **{setting: value})
        assert caught.value.setting == setting
    assert build_dbl_strategy("D").soft is True
    assert build_dbl_strategy("E", hardest="violation").hardest == "violation"
    assert build_dbl_strategy("G", alpha=0.9).alpha == 0.9


def test_hardest_changes_nothing_without_soft_margins():
    for cls in (RelativeMaxLoss, AbsoluteMaxLoss, BoostingCombinationLoss):
        with pytest.raises(SettingError) as caught:
            cls(hardest="violation")
        assert caught.value.setting == "hardest"
        assert cls(hardest="violation", soft=True).hardest == "violation"
    with pytest.raises(SettingError, match="Max forms"):
        BoostingCombinationLoss(relative="rs", absolute="as", soft=True, hardest="violation")


# --------------------------------------------------------------------------- gradients


@pytest.mark.parametrize(("cls", "params"), VARIANTS, ids=VARIANT_IDS)
def test_anchor_gets_no_gradient(cls, params):
    target, anchor = make_pair(ID_LAYOUTS["one_duplicate"], seed=1)
    t = target.i2t.clone().requires_grad_(True)
    a = anchor.i2t.clone().requires_grad_(True)
    out = cls(**params)(Similarities(t, target.image_ids), Similarities(a, anchor.image_ids))
    out.loss.backward()
    assert a.grad is None or torch.count_nonzero(a.grad) == 0
    assert t.grad is not None and torch.count_nonzero(t.grad) > 0
    assert all(not p.requires_grad for p in out.parts.values())


@pytest.mark.parametrize(("cls", "params"), VARIANTS, ids=VARIANT_IDS)
def test_gradcheck(cls, params):
    target, anchor = make_pair(ID_LAYOUTS["triple_and_pair"], seed=3)
    loss = cls(**params)

    def fn(s_t):
        return loss(Similarities(s_t, target.image_ids), anchor).loss

    assert torch.autograd.gradcheck(fn, (target.i2t.clone().requires_grad_(True),), eps=1e-6, atol=1e-7)


def _hard_case():
    """3 pairs; row 0: the target's most similar negative caption (1) is not argmax (St - Sa) (2)."""
    s_a = torch.full((3, 3), -0.5, dtype=torch.float64)
    s_t = torch.full((3, 3), -1.0, dtype=torch.float64)  # St - Sa = -0.5: hinges off by default
    s_a.fill_diagonal_(0.9)
    s_t.fill_diagonal_(0.9)
    s_t[0, 1], s_a[0, 1] = 0.4, 0.35  # St - Sa = 0.05: the target's own hardest caption of image 0
    s_t[0, 2], s_a[0, 2] = 0.1, -0.5  # St - Sa = 0.60: where the target most exceeds the anchor
    s_t[2, 1], s_a[2, 1] = 0.0, -0.5  # St - Sa = 0.50: caption 1's hardest image is 2, not 0
    ids = torch.arange(3)
    return Similarities(s_t, ids), Similarities(s_a, ids)


@pytest.mark.parametrize("cls", [RelativeMaxLoss, AbsoluteMaxLoss], ids=lambda c: c.name)
def test_max_forms_pick_argmax_of_target_minus_anchor(cls):
    target, anchor = _hard_case()
    assert target.i2t[0].masked_fill(torch.eye(3, dtype=torch.bool)[0], -9).argmax().item() == 1
    out = cls()(target, anchor)
    if cls is RelativeMaxLoss:
        # image 0: gamma + (0.9 - 0.9) + 0.60 (argmax St would give 0.25); image 2: 0.2 + 0.5.
        assert out.parts["i2t"].item() == pytest.approx(0.8 + 0.7)
    else:
        # three positive hinges gamma_1 = 0.1; negatives gamma_2 + 0.60 (image 0), + 0.50 (image 2).
        assert out.parts["i2t"].item() == pytest.approx(3 * 0.1 + 0.7 + 0.6)
    t = target.i2t.clone().requires_grad_(True)
    cls()(Similarities(t, target.image_ids), anchor).loss.backward()
    assert t.grad[0, 1].item() == 0.0  # no term picks the target's own hardest caption of image 0
    assert t.grad[0, 2].item() > 0  # image 0's and caption 2's hardest negative


@pytest.mark.parametrize(("cls", "params"), VARIANTS, ids=VARIANT_IDS)
def test_same_id_entries_are_never_negatives(cls, params):
    target, anchor = make_pair(ID_LAYOUTS["triple_and_pair"], seed=5)
    loss = cls(**params)
    before = loss(target, anchor).loss
    same_off_diag = positive_mask(target.image_ids) & ~torch.eye(7, dtype=torch.bool)
    assert same_off_diag.sum() > 0
    changed_t = Similarities(target.i2t.masked_fill(same_off_diag, 0.99), target.image_ids)
    changed_a = Similarities(anchor.i2t.masked_fill(same_off_diag, -0.99), anchor.image_ids)
    assert loss(changed_t, changed_a).loss.item() == pytest.approx(before.item(), rel=1e-12)
    other = ~positive_mask(target.image_ids)
    assert loss(Similarities(target.i2t.masked_fill(other, 0.99), target.image_ids), anchor).loss > before


@pytest.mark.parametrize(("cls", "params"), VARIANTS, ids=VARIANT_IDS)
def test_batch_of_one_image_gives_zero(cls, params):
    target, anchor = make_pair([2, 2, 2, 2], seed=1)
    t = target.i2t.clone().requires_grad_(True)
    out = cls(**params)(Similarities(t, target.image_ids), anchor)
    out.loss.backward()
    assert out.loss.item() == 0.0
    assert torch.isfinite(t.grad).all() and torch.count_nonzero(t.grad) == 0


def test_float32_is_finite():
    target, anchor = make_pair(ID_LAYOUTS["one_duplicate"], seed=2)
    t32, a32 = (Similarities(s.i2t.float(), s.image_ids) for s in (target, anchor))
    for cls, params in VARIANTS:
        out = cls(**params)(t32, a32)
        assert out.loss.dtype == torch.float32 and torch.isfinite(out.loss)


# --------------------------------------------------------------------------- soft margins


@pytest.mark.parametrize("m", [0.2, 0.1, 0.35])
def test_soft_margin_boundaries_and_slopes(m):
    h = 1e-6
    d_x, d_y = 2.0, 1.0

    def g(x, d=d_x):
        return gamma_sa(torch.tensor(x, dtype=torch.float64), m, d).item()

    def g2(y, d=d_y):
        return gamma_sa_negative(torch.tensor(y, dtype=torch.float64), m, d).item()

    # gamma^SA (eq. 17): 0 at d_x, slope -1 there (eq. 15-16: -gamma eps / 2 with eps = 2 / gamma).
    assert g(d_x) == pytest.approx(0.0, abs=1e-15)
    assert (g(d_x + h) - g(d_x - h)) / (2 * h) == pytest.approx(-1.0, abs=1e-6)
    assert g(-d_x) == pytest.approx(m, abs=1e-6)  # a fixed margin far from the extreme
    # gamma_1^SA (eq. 19): the same form with d_y = 1.
    assert g(d_y, d_y) == pytest.approx(0.0, abs=1e-15)
    assert (g(d_y + h, d_y) - g(d_y - h, d_y)) / (2 * h) == pytest.approx(-1.0, abs=1e-6)
    # gamma_2^SA (eq. 19): 0 at -d_y, slope +1 there (the TM y + d_y), ~m far above.
    assert g2(-d_y) == pytest.approx(0.0, abs=1e-15)
    assert (g2(-d_y + h) - g2(-d_y - h)) / (2 * h) == pytest.approx(1.0, abs=1e-6)
    assert g2(d_y) == pytest.approx(m, abs=1e-4)
    # autograd agrees at the boundary
    x = torch.tensor(d_x, dtype=torch.float64, requires_grad=True)
    gamma_sa(x, m, d_x).backward()
    assert x.grad.item() == pytest.approx(-1.0, abs=1e-12)
    # the tanh form equals the paper's exp form on the whole range
    for v in torch.linspace(-1.0, 1.0, 41, dtype=torch.float64).tolist():
        assert g(2 * v) == pytest.approx(ref_gamma_sa(2 * v, m, d_x), rel=1e-12, abs=1e-15)
        assert g(v, d_y) == pytest.approx(ref_gamma_sa(v, m, d_y), rel=1e-12, abs=1e-15)
        assert g2(v) == pytest.approx(ref_gamma2_sa(v, m, d_y), rel=1e-12, abs=1e-15)


def test_soft_margin_stays_below_the_theoretical_maximum():
    x = torch.linspace(-2.0, 2.0, 401, dtype=torch.float64)
    assert (gamma_sa(x, 0.2, 2.0) <= 2.0 - x + 1e-12).all()
    assert (gamma_sa_negative(x / 2, 0.1, 1.0) <= x / 2 + 1.0 + 1e-12).all()
    assert torch.count_nonzero(gamma_sa(x, 0.0, 2.0)) == 0  # a zero margin stays zero


# --------------------------------------------------------------------------- parameters and registry


def test_defaults():
    assert RelativeSumLoss().gamma == 0.2 and RelativeMaxLoss().gamma == 0.2
    for cls in (AbsoluteSumLoss, AbsoluteMaxLoss, BoostingCombinationLoss):
        loss = cls()
        assert (loss.gamma, loss.alpha) == (0.2, 0.5)
    am = AbsoluteMaxLoss()
    assert am.gamma_1 == pytest.approx(0.1) and am.gamma_2 == pytest.approx(0.1)
    assert AbsoluteSumLoss(gamma=0.4, alpha=0.25).gamma_1 == pytest.approx(0.1)
    assert AbsoluteSumLoss(gamma=0.4, alpha=0.25).gamma_2 == pytest.approx(0.3)
    assert all(cls().soft is False for cls in ALL_CLASSES)
    assert RelativeMaxLoss().hardest == AbsoluteMaxLoss().hardest == "difference"
    combo = BoostingCombinationLoss()
    assert (combo.relative, combo.absolute) == ("rm", "am")


def test_registry():
    assert {"rs", "rm", "as", "am", "dbl"} <= set(COOPERATIVE_LOSSES)
    assert COOPERATIVE_LOSSES["rs"] is RelativeSumLoss and COOPERATIVE_LOSSES["rm"] is RelativeMaxLoss
    assert COOPERATIVE_LOSSES["as"] is AbsoluteSumLoss and COOPERATIVE_LOSSES["am"] is AbsoluteMaxLoss
    assert COOPERATIVE_LOSSES["dbl"] is BoostingCombinationLoss
    assert COOPERATIVE_LOSSES.param_names("rs") == ("gamma", "soft")
    assert COOPERATIVE_LOSSES.param_names("rm") == ("gamma", "soft", "hardest")
    assert COOPERATIVE_LOSSES.param_names("as") == ("gamma", "alpha", "soft")
    assert COOPERATIVE_LOSSES.param_names("am") == ("gamma", "alpha", "soft", "hardest")
    assert COOPERATIVE_LOSSES.param_names("dbl") == ("relative", "absolute", "gamma", "alpha", "soft", "hardest")
    loss = COOPERATIVE_LOSSES.build("am", alpha=0.3, soft=True)
    assert isinstance(loss, AbsoluteMaxLoss) and loss.alpha == 0.3 and loss.soft and loss.gamma == 0.2
    with pytest.raises(ValidationError, match="alpha") as caught:
        COOPERATIVE_LOSSES.build("rm", alpha=0.5)
    assert caught.value.errors()[0]["type"] == "extra_forbidden" and caught.value.errors()[0]["loc"] == ("alpha",)


@pytest.mark.parametrize(
    ("cls", "params"),
    [
        (RelativeSumLoss, {"gamma": -0.1}),
        (RelativeMaxLoss, {"gamma": float("nan")}),
        (RelativeMaxLoss, {"gamma": "abc"}),
        (AbsoluteSumLoss, {"gamma": -1e-9}),
        (AbsoluteSumLoss, {"alpha": -0.1}),
        (AbsoluteMaxLoss, {"alpha": 1.5}),
        (AbsoluteMaxLoss, {"alpha": float("inf")}),
        (AbsoluteMaxLoss, {"soft": "yes"}),
        (RelativeMaxLoss, {"hardest": "target"}),
        (BoostingCombinationLoss, {"relative": "am"}),
        (BoostingCombinationLoss, {"absolute": "rs"}),
        (BoostingCombinationLoss, {"alpha": 2.0}),
        (BoostingCombinationLoss, {"gamma": -0.2}),
    ],
)
def test_bad_params_raise_value_error(cls, params):
    with pytest.raises(ValueError):
        cls(**params)


def test_boundary_params_are_allowed():
    target, anchor = make_pair(ID_LAYOUTS["distinct"], seed=0)
    for alpha in (0.0, 1.0):
        for soft in (False, True):
            out = AbsoluteMaxLoss(alpha=alpha, soft=soft)(target, anchor)
            assert torch.isfinite(out.loss)
            assert out.loss.item() == _approx(sum(ref_am(target, anchor, alpha=alpha, soft=soft)))
    assert RelativeSumLoss(gamma=0).gamma == 0.0


def test_mismatched_batches_are_rejected():
    target, anchor = make_pair(ID_LAYOUTS["distinct"], seed=0)
    with pytest.raises(ValueError, match="same batch"):
        RelativeMaxLoss()(target, Similarities(anchor.i2t, torch.arange(7) + 1))
