"""Tests of the DBL baselines (DR, RKD, DML, DINO, DINO*, CMPM, MPL) against plain loops."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from conftest import refused_setting
from itrlab.losses import (
    LOSSES,
    Similarities,
    SumOfHingesLoss,
    build_loss,
    loss_param_names,
    negative_mask,
    positive_mask,
)
from itrlab.methods.dbl import (
    COOPERATIVE_LOSSES,
    CMPMLoss,
    DinoLoss,
    DinoStarLoss,
    MaxPolynomialLoss,
    MutualLearningLoss,
    RelationalDistanceLoss,
    SoftDarkRankLoss,
)
from itrlab.methods.dbl.distillation import plackett_luce_log_prob

# --------------------------------------------------------------------------- inputs

ID_LAYOUTS = {
    "distinct": [0, 1, 2, 3, 4, 5, 6],
    "one_duplicate": [0, 1, 0, 2, 3, 4, 5],
    "triple_and_pair": [3, 1, 3, 2, 1, 3, 4],
}
REL = 1e-10


def make_sims(image_ids: list[int], seed: int, dim: int = 5, dtype=torch.float64) -> Similarities:
    """Consistent i2t/i2i/t2t from random unit embeddings; same-id pairs share one image."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.tensor(image_ids, dtype=torch.long)
    per_image = torch.nn.functional.normalize(torch.randn(int(ids.max()) + 1, dim, generator=gen, dtype=dtype), dim=1)
    images = per_image[ids]
    captions = torch.nn.functional.normalize(torch.randn(len(image_ids), dim, generator=gen, dtype=dtype), dim=1)
    return Similarities(i2t=images @ captions.T, image_ids=ids, i2i=images @ images.T, t2t=captions @ captions.T)


def branches(layout: str, seed: int) -> tuple[Similarities, Similarities]:
    """(target, anchor): two branches' similarities of one batch."""
    return make_sims(ID_LAYOUTS[layout], seed), make_sims(ID_LAYOUTS[layout], seed + 1000)


def noisy(sims: Similarities, seed: int, scale: float = 1e-2) -> Similarities:
    """The same similarities plus small independent noise (no exact ties), requiring grad."""
    gen = torch.Generator().manual_seed(seed)

    def jitter(t):
        return (t + scale * torch.randn(t.shape, generator=gen, dtype=t.dtype)).requires_grad_(True)

    return Similarities(jitter(sims.i2t), sims.image_ids, jitter(sims.i2i), jitter(sims.t2t))


def rows(matrix: list[list[float]], direction: str) -> list[list[float]]:
    """Query rows of one direction: rows of i2t (image queries) or its columns (caption queries)."""
    if direction == "i2t":
        return matrix
    return [list(col) for col in zip(*matrix)]


def softmax(values: list[float], tau: float) -> list[float]:
    top = max(values)
    exps = [math.exp((v - top) / tau) for v in values]
    total = sum(exps)
    return [e / total for e in exps]


# --------------------------------------------------------------------------- reference loops


def ref_dr(target, anchor, alpha, beta, list_len):
    """DarkRank soft transfer over the anchor's top-n list, KL over all n! permutations."""

    def score(s):
        return -alpha * math.sqrt(max(2 - 2 * s, 1e-12)) ** beta

    def pl_prob(x, perm):
        prob = 1.0
        for i in range(len(perm)):
            prob *= math.exp(x[perm[i]]) / sum(math.exp(x[perm[k]]) for k in range(i, len(perm)))
        return prob

    out = {}
    for direction in ("i2t", "t2i"):
        t_rows, a_rows = rows(target.i2t.tolist(), direction), rows(anchor.i2t.tolist(), direction)
        total = 0.0
        for t_row, a_row in zip(t_rows, a_rows):
            t_sc, a_sc = [score(s) for s in t_row], [score(s) for s in a_row]
            n = min(list_len, len(a_row))
            top = sorted(range(len(a_row)), key=lambda k: -a_sc[k])[:n]
            for perm in itertools.permutations(top):
                p_a, p_t = pl_prob(a_sc, perm), pl_prob(t_sc, perm)
                total += p_a * math.log(p_a / p_t)
        out[direction] = total / len(t_rows)
    return out


def _huber(x):
    return 0.5 * x * x if abs(x) <= 1 else abs(x) - 0.5


def ref_rkd(target, anchor, relations):
    """RKD-D: mean Huber of mu-normalised distances d = sqrt(2 - 2 s) over the pairs."""

    def dist(s):
        return math.sqrt(max(2 - 2 * s, 1e-12))

    def pair_distances(sims):
        S, I, T = sims.i2t.tolist(), sims.i2i.tolist(), sims.t2t.tolist()
        n = len(S)
        if relations == "i2t":
            return {("i2t", i, j): dist(S[i][j]) for i in range(n) for j in range(n)}
        pairs = {}
        for x in range(2 * n):  # points 0..n-1 images, n..2n-1 captions
            for y in range(2 * n):
                if x == y:
                    continue
                if x < n and y < n:
                    pairs[("i2i", x, y)] = dist(I[x][y])
                elif x >= n and y >= n:
                    pairs[("t2t", x, y)] = dist(T[x - n][y - n])
                elif x < n:
                    pairs[("i2t", x, y)] = dist(S[x][y - n])
                else:
                    pairs[("i2t", x, y)] = dist(S[y][x - n])
        return pairs

    student, teacher = pair_distances(target), pair_distances(anchor)
    mu_s, mu_t = sum(student.values()) / len(student), sum(teacher.values()) / len(teacher)
    parts = {}
    for key in student:
        parts[key[0]] = parts.get(key[0], 0.0) + _huber(student[key] / mu_s - teacher[key] / mu_t) / len(student)
    return parts


def ref_dml(target, anchor, tau):
    out = {}
    for direction in ("i2t", "t2i"):
        t_rows, a_rows = rows(target.i2t.tolist(), direction), rows(anchor.i2t.tolist(), direction)
        total = 0.0
        for t_row, a_row in zip(t_rows, a_rows):
            p_t, p_a = softmax(t_row, tau), softmax(a_row, tau)
            total += sum(pa * math.log(pa / pt) for pa, pt in zip(p_a, p_t))
        out[direction] = total / len(t_rows)
    return out


def ref_dino(target, anchor, tau_s, tau_t, center, star):
    out = {}
    for direction in ("i2t", "t2i"):
        t_rows, a_rows = rows(target.i2t.tolist(), direction), rows(anchor.i2t.tolist(), direction)
        n = len(a_rows)
        c = [sum(a_rows[q][k] for q in range(n)) / n if center else 0.0 for k in range(n)]
        total = 0.0
        for t_row, a_row in zip(t_rows, a_rows):
            p_s = softmax(t_row, tau_s)
            p_t = softmax([a - ck for a, ck in zip(a_row, c)], tau_t)
            if star:
                total += -sum(ps * math.log(pt) for ps, pt in zip(p_s, p_t))
            else:
                total += -sum(pt * math.log(ps) for ps, pt in zip(p_s, p_t))
        out[direction] = total / n
    return out


def ref_cmpm(sims, tau, eps):
    """CMPM eq. 1-5: KL(p || q) with q uniform over same-id entries; mean over the batch."""
    S, ids = sims.i2t.tolist(), sims.image_ids.tolist()
    n = len(ids)
    out = {}
    for direction in ("i2t", "t2i"):
        total = 0.0
        for a, row in enumerate(rows(S, direction)):
            p = softmax(row, tau)
            y = [1.0 if ids[k] == ids[a] else 0.0 for k in range(n)]
            q = [v / sum(y) for v in y]
            total += sum(p[k] * math.log(p[k] / (q[k] + eps)) for k in range(n))
        out[direction] = total / n
    return out


def ref_mpl(sims, margin, pos_coeffs, neg_coeffs):
    """Wei et al.'s released polyloss loop: hardest informative negative, sum / batch size."""
    S, ids = sims.i2t.tolist(), sims.image_ids.tolist()
    n = len(ids)

    def poly(coeffs, x):
        return sum(c * x**k for k, c in enumerate(coeffs))

    out = {}
    for direction in ("i2t", "t2i"):
        total = 0.0
        for a, row in enumerate(rows(S, direction)):
            pos = row[a]
            if not pos < 1 - 1e-5:
                continue
            informative = [row[k] for k in range(n) if ids[k] != ids[a] and row[k] + margin > pos]
            if not informative:
                continue
            total += max(0.0, poly(pos_coeffs, pos)) + max(0.0, poly(neg_coeffs, max(informative)))
        out[direction] = total / n
    return out


COOPERATIVE_CASES = [
    (SoftDarkRankLoss, {}, lambda t, a: ref_dr(t, a, 3.0, 3.0, 4)),
    (SoftDarkRankLoss, {"alpha": 1.5, "beta": 2.0, "list_len": 3}, lambda t, a: ref_dr(t, a, 1.5, 2.0, 3)),
    (SoftDarkRankLoss, {"list_len": 5}, lambda t, a: ref_dr(t, a, 3.0, 3.0, 5)),
    (RelationalDistanceLoss, {}, lambda t, a: ref_rkd(t, a, "i2t")),
    (RelationalDistanceLoss, {"relations": "all"}, lambda t, a: ref_rkd(t, a, "all")),
    (MutualLearningLoss, {}, lambda t, a: ref_dml(t, a, 0.1)),
    (MutualLearningLoss, {"tau": 0.5}, lambda t, a: ref_dml(t, a, 0.5)),
    (DinoLoss, {}, lambda t, a: ref_dino(t, a, 0.1, 0.04, True, False)),
    (DinoLoss, {"tau_s": 0.2, "tau_t": 0.07, "center": False}, lambda t, a: ref_dino(t, a, 0.2, 0.07, False, False)),
    (DinoStarLoss, {}, lambda t, a: ref_dino(t, a, 0.1, 0.04, True, True)),
    (DinoStarLoss, {"tau_s": 0.3, "tau_t": 0.1, "center": False}, lambda t, a: ref_dino(t, a, 0.3, 0.1, False, True)),
]
TASK_CASES = [
    (CMPMLoss, {}, lambda s: ref_cmpm(s, 0.1, 1e-8)),
    (CMPMLoss, {"tau": 0.5, "eps": 1e-4}, lambda s: ref_cmpm(s, 0.5, 1e-4)),
    (MaxPolynomialLoss, {}, lambda s: ref_mpl(s, 0.2, (0.5, -0.7, 0.2), (0.03, -0.4, 0.9))),
    (MaxPolynomialLoss, {"margin": 0.0}, lambda s: ref_mpl(s, 0.0, (0.5, -0.7, 0.2), (0.03, -0.4, 0.9))),
    (
        MaxPolynomialLoss,
        {"margin": 0.5, "pos_coeffs": [1.0, -1.0], "neg_coeffs": (0.1, 0.5, 0.2, 0.3)},
        lambda s: ref_mpl(s, 0.5, (1.0, -1.0), (0.1, 0.5, 0.2, 0.3)),
    ),
]


def _case_id(case):
    cls, params, _ = case
    return f"{cls.name}-" + "-".join(f"{k}{v}" for k, v in params.items())


COOPERATIVE = [SoftDarkRankLoss, RelationalDistanceLoss, MutualLearningLoss, DinoLoss, DinoStarLoss]


@pytest.mark.parametrize("layout", list(ID_LAYOUTS))
@pytest.mark.parametrize(
    ("cls", "params", "reference"), COOPERATIVE_CASES, ids=[_case_id(c) for c in COOPERATIVE_CASES]
)
def test_cooperative_matches_reference_loop(cls, params, reference, layout):
    for seed in range(2):
        target, anchor = branches(layout, seed)
        out = cls(**params)(target, anchor)
        ref = reference(target, anchor)
        assert set(out.parts) == set(ref)
        for name, value in ref.items():
            assert out.parts[name].item() == pytest.approx(value, rel=REL, abs=1e-12)
        assert out.loss.item() == pytest.approx(sum(ref.values()), rel=REL, abs=1e-12)
        assert out.loss.item() > 1e-3  # two different branches: the comparison is not vacuous


@pytest.mark.parametrize("layout", list(ID_LAYOUTS))
@pytest.mark.parametrize(("cls", "params", "reference"), TASK_CASES, ids=[_case_id(c) for c in TASK_CASES])
def test_task_loss_matches_reference_loop(cls, params, reference, layout):
    for seed in range(4):
        sims = make_sims(ID_LAYOUTS[layout], seed)
        out = cls(**params)(sims)
        ref = reference(sims)
        assert cls.reduction == "mean"
        assert out.parts["i2t"].item() == pytest.approx(ref["i2t"], rel=REL, abs=1e-12)
        assert out.parts["t2i"].item() == pytest.approx(ref["t2i"], rel=REL, abs=1e-12)
        assert out.loss.item() == pytest.approx(ref["i2t"] + ref["t2i"], rel=REL, abs=1e-12)
        assert out.loss.item() > 0


def test_mpl_reference_cases_skip_and_keep_anchors():
    """The MPL loops above exercise both branches of the informative-negative rule."""
    kept = skipped = 0
    for layout in ID_LAYOUTS:
        for seed in range(4):
            sims = make_sims(ID_LAYOUTS[layout], seed)
            S, ids = sims.i2t, sims.image_ids
            hardest = S.masked_fill(~negative_mask(ids), -math.inf).max(dim=1).values
            informative = hardest + 0.2 > S.diagonal()
            kept, skipped = kept + int(informative.sum()), skipped + int((~informative).sum())
    assert kept > 0 and skipped > 0


# --------------------------------------------------------------------------- gradients


GRADCHECK_CASES = [
    (SoftDarkRankLoss, {"list_len": 5}),
    (RelationalDistanceLoss, {}),
    (RelationalDistanceLoss, {"relations": "all"}),
    (MutualLearningLoss, {}),
    (DinoLoss, {}),
    (DinoStarLoss, {}),
]


@pytest.mark.parametrize(("cls", "params"), GRADCHECK_CASES, ids=[_case_id((c, p, None)) for c, p in GRADCHECK_CASES])
def test_cooperative_gradcheck(cls, params):
    target, anchor = branches("triple_and_pair", seed=21)  # ids do not enter these losses
    target = noisy(target, seed=22)
    loss = cls(**params)

    def fn(i2t, i2i=target.i2i, t2t=target.t2t):
        return loss(Similarities(i2t, target.image_ids, i2i, t2t), anchor).loss

    inputs = (target.i2t, target.i2i, target.t2t) if loss.requires else (target.i2t,)
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-7)


@pytest.mark.parametrize(("cls", "params"), [(c, p) for c, p, _ in TASK_CASES], ids=[_case_id(c) for c in TASK_CASES])
@pytest.mark.parametrize("layout", ["distinct", "triple_and_pair"])
def test_task_gradcheck(cls, params, layout):
    base = noisy(make_sims(ID_LAYOUTS[layout], seed=11), seed=12)  # noise: no tie at the max
    loss = cls(**params)

    def fn(i2t):
        return loss(Similarities(i2t=i2t, image_ids=base.image_ids)).loss

    assert torch.autograd.gradcheck(fn, (base.i2t,), eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("cls", COOPERATIVE, ids=lambda c: c.name)
def test_anchor_gets_no_gradient(cls):
    target, anchor = branches("one_duplicate", seed=3)
    target, anchor = noisy(target, seed=4), noisy(anchor, seed=5)
    loss = cls(relations="all") if cls is RelationalDistanceLoss else cls()
    out = loss(target, anchor)
    out.loss.backward()
    assert cls.reduction == "mean"
    assert anchor.i2t.grad is None and anchor.i2i.grad is None and anchor.t2t.grad is None
    assert target.i2t.grad is not None and target.i2t.grad.abs().sum() > 0
    assert out.loss.requires_grad and out.loss.dim() == 0
    assert all(not p.requires_grad for p in out.parts.values())
    assert out.loss.item() == pytest.approx(sum(p.item() for p in out.parts.values()), rel=1e-12)


# --------------------------------------------------------------------------- behaviour


@pytest.mark.parametrize(
    "loss",
    [
        SoftDarkRankLoss(),
        SoftDarkRankLoss(list_len=5),
        RelationalDistanceLoss(),
        RelationalDistanceLoss("all"),
        MutualLearningLoss(),
    ],
    ids=["dr", "dr-list5", "rkd", "rkd-all", "dml"],
)
def test_identical_branches_give_zero_loss_and_gradient(loss):
    sims = noisy(make_sims(ID_LAYOUTS["triple_and_pair"], seed=7), seed=8)
    anchor = Similarities(
        sims.i2t.detach().clone(), sims.image_ids, sims.i2i.detach().clone(), sims.t2t.detach().clone()
    )
    out = loss(sims, anchor)
    out.loss.backward()
    assert out.loss.item() == pytest.approx(0.0, abs=1e-12)
    assert sims.i2t.grad.abs().max() < 1e-10
    # ...and a different anchor gives a positive loss.
    assert loss(sims, make_sims(ID_LAYOUTS["triple_and_pair"], seed=9)).loss.item() > 1e-3


def test_dino_student_equal_to_teacher_is_stationary():
    """H(P_t, P_s) has gradient P_s - P_t: zero when the student reproduces the teacher."""
    sims = noisy(make_sims(ID_LAYOUTS["one_duplicate"], seed=1), seed=2)
    anchor = Similarities(sims.i2t.detach().clone(), sims.image_ids)
    out = DinoLoss(tau_s=0.1, tau_t=0.1, center=False)(sims, anchor)
    out.loss.backward()
    assert sims.i2t.grad.abs().max() < 1e-12
    p = torch.softmax(anchor.i2t / 0.1, dim=1)
    entropy = -(p * p.log()).sum(dim=1).mean()
    assert out.parts["i2t"].item() == pytest.approx(entropy.item(), rel=1e-12)
    # DINO* at the same point is not stationary: it sharpens towards the teacher's mode.
    sims.i2t.grad = None
    DinoStarLoss(tau_s=0.1, tau_t=0.1, center=False)(sims, anchor).loss.backward()
    assert sims.i2t.grad.abs().max() > 1e-3


def test_dino_centering_removes_per_candidate_offsets():
    target, anchor = branches("one_duplicate", seed=2)
    gen = torch.Generator().manual_seed(0)
    row_shift = torch.randn(7, 1, generator=gen, dtype=torch.float64)
    col_shift = torch.randn(1, 7, generator=gen, dtype=torch.float64)
    shifted = Similarities(anchor.i2t + row_shift + col_shift, anchor.image_ids)
    for cls in (DinoLoss, DinoStarLoss):
        centred = cls()
        assert centred(target, shifted).loss.item() == pytest.approx(centred(target, anchor).loss.item(), rel=1e-10)
        plain = cls(center=False)
        assert plain(target, shifted).loss.item() != pytest.approx(plain(target, anchor).loss.item(), rel=1e-6)


def test_dml_roles_swapped_for_the_peer():
    first, second = branches("distinct", seed=4)
    loss = MutualLearningLoss()
    one, two = loss(first, second).loss.item(), loss(second, first).loss.item()
    assert one > 0 and two > 0 and one != pytest.approx(two)


def test_rkd_is_invariant_to_the_scale_of_distances():
    """psi_D divides by the mean distance: distances scaled by c distil to zero loss."""
    gen = torch.Generator().manual_seed(3)
    i2t = torch.rand(5, 5, generator=gen, dtype=torch.float64) * 1.6 - 0.8
    d2 = 2 - 2 * i2t
    scaled = 1 - (0.49 * d2) / 2  # the similarities whose distances are 0.7 times those of i2t
    ids = torch.arange(5)
    assert RelationalDistanceLoss()(Similarities(scaled, ids), Similarities(i2t, ids)).loss.item() == pytest.approx(
        0.0, abs=1e-12
    )


def test_dr_list_shorter_than_batch_and_probabilities():
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    perms = torch.tensor(list(itertools.permutations(range(4))))
    total = plackett_luce_log_prob(scores, perms).exp().sum(dim=1)
    assert torch.allclose(total, torch.ones(3, dtype=torch.float64))
    # A batch smaller than list_len uses the whole batch.
    target, anchor = make_sims([0, 1, 2], seed=1), make_sims([0, 1, 2], seed=2)
    out = SoftDarkRankLoss(list_len=6)(target, anchor)
    ref = ref_dr(target, anchor, 3.0, 3.0, 6)
    assert out.loss.item() == pytest.approx(ref["i2t"] + ref["t2i"], rel=REL)


def test_dr_only_reads_the_anchors_top_candidates():
    target, anchor = branches("distinct", seed=6)
    loss = SoftDarkRankLoss(list_len=3)
    # The anchor's smallest entry is last in its row and in its column: in no top-3 list.
    r, c = divmod(int(anchor.i2t.argmin()), 7)
    assert c not in anchor.i2t[r].topk(3).indices.tolist() and r not in anchor.i2t[:, c].topk(3).indices.tolist()
    changed = target.i2t.clone()
    changed[r, c] = -0.9
    assert loss(Similarities(changed, target.image_ids), anchor).loss.item() == pytest.approx(
        loss(target, anchor).loss.item(), rel=1e-12
    )


def test_cmpm_is_minimal_when_the_distribution_matches():
    for layout in ID_LAYOUTS:
        ids = torch.tensor(ID_LAYOUTS[layout])
        matching = torch.where(positive_mask(ids), 0.0, -50.0).to(torch.float64)  # p = q (to 1e-200)
        ideal = CMPMLoss()(Similarities(matching, ids)).loss.item()
        assert -2 * 7 * 1e-8 <= ideal <= 0  # sum_j q log(q / (q + eps)): about -eps per positive
        random = CMPMLoss()(make_sims(ID_LAYOUTS[layout], seed=0)).loss.item()
        assert random > ideal + 0.1
        # Only the positives' share matters: moving mass off one same-id entry raises the loss.
        if layout != "distinct":
            uneven = matching.clone()
            uneven[0, (ids == ids[0]).nonzero()[-1]] = -0.5
            assert CMPMLoss()(Similarities(uneven, ids)).loss.item() > ideal + 1e-3


def test_cmpm_treats_same_id_entries_as_positives():
    sims = make_sims(ID_LAYOUTS["triple_and_pair"], seed=5)
    same_off_diag = positive_mask(sims.image_ids) & ~torch.eye(7, dtype=torch.bool)
    raised = Similarities(sims.i2t.masked_fill(same_off_diag, 1.0), sims.image_ids)
    assert CMPMLoss()(raised).loss < CMPMLoss()(sims).loss  # more mass on positives: lower loss


def test_mpl_same_id_entries_are_never_negatives():
    sims = make_sims(ID_LAYOUTS["triple_and_pair"], seed=5)
    loss = MaxPolynomialLoss()
    before = loss(sims).loss
    same_off_diag = positive_mask(sims.image_ids) & ~torch.eye(7, dtype=torch.bool)
    assert loss(Similarities(sims.i2t.masked_fill(same_off_diag, 0.99), sims.image_ids)).loss.item() == pytest.approx(
        before.item(), rel=1e-12
    )
    neg = negative_mask(sims.image_ids)
    assert loss(Similarities(sims.i2t.masked_fill(neg, 0.99), sims.image_ids)).loss > before


def test_mpl_uses_only_the_hardest_informative_negative():
    ids = torch.arange(4)
    i2t = torch.full((4, 4), -0.4, dtype=torch.float64)
    i2t.fill_diagonal_(0.5)
    i2t[0, 1] = 0.9  # hardest caption of image 0 and hardest image of caption 1
    loss = MaxPolynomialLoss()
    perturbed = i2t.clone()
    perturbed[0, 2] = 0.45  # informative (0.45 + 0.2 > 0.5) but not the hardest of row 0 ...
    base_value = loss(Similarities(i2t, ids)).loss.item()
    # ... though it is the hardest image of caption 2, which had no informative negative.
    column_two = max(0.0, 0.2 * 0.25 - 0.7 * 0.5 + 0.5) + max(0.0, 0.9 * 0.45**2 - 0.4 * 0.45 + 0.03)
    assert loss(Similarities(perturbed, ids)).loss.item() == pytest.approx(base_value + column_two / 4, rel=1e-12)
    # Anchors without an informative negative contribute nothing, positive term included.
    no_informative = torch.full((4, 4), -0.4, dtype=torch.float64).fill_diagonal_(0.5)
    assert loss(Similarities(no_informative, ids)).loss.item() == 0.0


def test_float32_is_finite():
    target = make_sims(ID_LAYOUTS["one_duplicate"], seed=2, dtype=torch.float32)
    anchor = make_sims(ID_LAYOUTS["one_duplicate"], seed=3, dtype=torch.float32)
    for loss in [
        SoftDarkRankLoss(),
        RelationalDistanceLoss("all"),
        MutualLearningLoss(tau=1e-3),
        DinoLoss(),
        DinoStarLoss(),
    ]:
        out = loss(target, anchor)
        assert out.loss.dtype == torch.float32 and torch.isfinite(out.loss)
    for loss in [CMPMLoss(tau=1e-3), MaxPolynomialLoss()]:
        out = loss(target)
        assert out.loss.dtype == torch.float32 and torch.isfinite(out.loss)


def test_declared_inputs():
    assert [c.name for c in COOPERATIVE if c.requires] == []
    assert CMPMLoss.requires == () and MaxPolynomialLoss.requires == ()
    assert RelationalDistanceLoss("all").requires == ("i2i", "t2t")
    assert RelationalDistanceLoss().requires == ()
    target, anchor = branches("distinct", seed=0)
    bare = Similarities(target.i2t, target.image_ids)
    bare_anchor = Similarities(anchor.i2t, anchor.image_ids)
    with pytest.raises(ValueError, match="i2i"):
        RelationalDistanceLoss("all")(bare, bare_anchor)
    for cls in COOPERATIVE:  # the i2t forms read nothing else
        cls()(bare, bare_anchor)


def test_branches_must_share_the_batch():
    target = make_sims([0, 1, 2, 3], seed=0)
    anchor = make_sims([0, 1, 2, 4], seed=1)
    for cls in COOPERATIVE:
        with pytest.raises(ValueError, match="same batch"):
            cls()(target, anchor)


# --------------------------------------------------------------------------- params and registry


@pytest.mark.parametrize(
    ("cls", "params"),
    [
        (SoftDarkRankLoss, {"alpha": 0}),
        (SoftDarkRankLoss, {"beta": float("inf")}),
        (SoftDarkRankLoss, {"list_len": 1}),
        (SoftDarkRankLoss, {"list_len": 8}),
        (SoftDarkRankLoss, {"list_len": 4.0}),
        (SoftDarkRankLoss, {"list_len": True}),
        (RelationalDistanceLoss, {"relations": "t2t"}),
        (MutualLearningLoss, {"tau": 0}),
        (MutualLearningLoss, {"tau": "abc"}),
        (DinoLoss, {"tau_s": -0.1}),
        (DinoLoss, {"tau_t": float("nan")}),
        (DinoLoss, {"center": "yes"}),
        (DinoStarLoss, {"tau_t": 0}),
        (CMPMLoss, {"tau": 0}),
        (CMPMLoss, {"eps": 0}),
        (CMPMLoss, {"eps": -1e-8}),
        (MaxPolynomialLoss, {"margin": -0.1}),
        (MaxPolynomialLoss, {"pos_coeffs": ()}),
        (MaxPolynomialLoss, {"neg_coeffs": "0.1"}),
        (MaxPolynomialLoss, {"neg_coeffs": (0.1, float("nan"))}),
        (MaxPolynomialLoss, {"pos_coeffs": 0.5}),
    ],
)
def test_bad_params_raise_value_error(cls, params):
    with pytest.raises(ValueError):
        cls(**params)


def test_registry_names_and_params():
    assert {"dr", "rkd", "dml", "dino", "dino_star"} <= set(COOPERATIVE_LOSSES)
    assert {"cmpm", "mpl"} <= set(LOSSES)
    assert "vse0" not in LOSSES and LOSSES["vse"] is SumOfHingesLoss  # VSE0 is "vse"
    assert COOPERATIVE_LOSSES.param_names("dr") == ("alpha", "beta", "list_len")
    assert COOPERATIVE_LOSSES.param_names("rkd") == ("relations",)
    assert COOPERATIVE_LOSSES.param_names("dml") == ("tau",)
    assert COOPERATIVE_LOSSES.param_names("dino") == ("tau_s", "tau_t", "center")
    assert COOPERATIVE_LOSSES.param_names("dino_star") == ("tau_s", "tau_t", "center")
    assert loss_param_names("cmpm") == ("tau", "eps")
    assert loss_param_names("mpl") == ("margin", "pos_coeffs", "neg_coeffs")
    for name, cls in [
        ("dr", SoftDarkRankLoss),
        ("rkd", RelationalDistanceLoss),
        ("dml", MutualLearningLoss),
        ("dino", DinoLoss),
        ("dino_star", DinoStarLoss),
    ]:
        assert COOPERATIVE_LOSSES[name] is cls and isinstance(COOPERATIVE_LOSSES.build(name), cls)
    dino = COOPERATIVE_LOSSES.build("dino_star", tau_t=0.07)
    assert isinstance(dino, DinoStarLoss) and dino.tau_t == 0.07 and dino.tau_s == 0.1 and dino.center
    assert COOPERATIVE_LOSSES.build("rkd", relations="all").requires == ("i2i", "t2t")
    mpl = build_loss("mpl", pos_coeffs=[0.4, -0.4])
    assert isinstance(mpl, MaxPolynomialLoss) and mpl.pos_coeffs == (0.4, -0.4) and mpl.margin == 0.2
    assert isinstance(build_loss("cmpm"), CMPMLoss)


def test_registry_errors():
    assert refused_setting(COOPERATIVE_LOSSES.build, "dino", tau=0.1) == "tau"
    assert refused_setting(COOPERATIVE_LOSSES.build, "dr", margin=0.2) == "margin"
    assert refused_setting(COOPERATIVE_LOSSES.build, "dml", tau=-1) == "tau"
    assert refused_setting(build_loss, "cmpm", margin=0.2) == "margin"
    assert refused_setting(build_loss, "mpl", pos_coeffs=[]) == "pos_coeffs"
    assert refused_setting(build_loss, "mpl", neg_coeffs=[0.1, "x"]) == "neg_coeffs.1"
    assert refused_setting(COOPERATIVE_LOSSES.build, "dr", list_len=8) == "list_len"
    assert refused_setting(COOPERATIVE_LOSSES.build, "rkd", relations="some") == "relations"
    with pytest.raises(ValueError, match="unknown cooperative loss"):
        COOPERATIVE_LOSSES.build("cmpm")  # a task loss, not a target-anchor loss
