"""Tests of itrlab.losses against plain loops written straight from the papers' equations."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import refused_setting
from itrlab.losses import (
    LOSSES,
    MaxOfHingesLoss,
    Similarities,
    SumOfHingesLoss,
    WarmupLoss,
    build_loss,
    loss_param_names,
    negative_mask,
    positive_mask,
)
from itrlab.methods.convse import ContrastiveMaxOfNegativesLoss, ContrastiveSumOfNegativesLoss, MultimodalNCELoss

# --------------------------------------------------------------------------- inputs

ID_LAYOUTS = {
    "distinct": [0, 1, 2, 3, 4, 5, 6],
    "one_duplicate": [0, 1, 0, 2, 3, 4, 5],
    "triple_and_pair": [3, 1, 3, 2, 1, 3, 4],
}


def make_sims(image_ids: list[int], seed: int, dim: int = 5, dtype=torch.float64) -> Similarities:
    """Consistent i2t/i2i/t2t from random unit embeddings; same-id pairs share one image."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.tensor(image_ids, dtype=torch.long)
    per_image = torch.nn.functional.normalize(torch.randn(int(ids.max()) + 1, dim, generator=gen, dtype=dtype), dim=1)
    images = per_image[ids]
    captions = torch.nn.functional.normalize(torch.randn(len(image_ids), dim, generator=gen, dtype=dtype), dim=1)
    return Similarities(i2t=images @ captions.T, image_ids=ids, i2i=images @ images.T, t2t=captions @ captions.T)


def as_lists(sims: Similarities):
    return sims.i2t.tolist(), sims.image_ids.tolist(), sims.i2i.tolist(), sims.t2t.tolist()


# --------------------------------------------------------------------------- reference loops


def ref_vse(sims, margin):
    """Eq. 2, summed over negatives and over the batch."""
    S, ids, _, _ = as_lists(sims)
    n = len(ids)
    i2t = t2i = 0.0
    for a in range(n):  # the pair (I_a, C_a)
        for k in range(n):
            if ids[k] != ids[a]:
                i2t += max(0.0, margin + S[a][k] - S[a][a])  # negative caption C_k
                t2i += max(0.0, margin + S[k][a] - S[a][a])  # negative image I_k
    return i2t, t2i, "sum"


def _hardest(values):
    return max(values) if values else None


def ref_vsepp(sims, margin):
    """Eq. 3-5, summed over the batch; no negative -> 0."""
    S, ids, _, _ = as_lists(sims)
    n = len(ids)
    i2t = t2i = 0.0
    for a in range(n):
        c_star = _hardest([S[a][k] for k in range(n) if ids[k] != ids[a]])
        i_star = _hardest([S[k][a] for k in range(n) if ids[k] != ids[a]])
        if c_star is not None:
            i2t += max(0.0, margin + c_star - S[a][a])
        if i_star is not None:
            t2i += max(0.0, margin + i_star - S[a][a])
    return i2t, t2i, "sum"


def ref_mvn(sims, tau):
    """Multimodal NCE: 2(N-1) negatives (other modality and same modality), mean."""
    S, ids, I, T = as_lists(sims)
    n = len(ids)
    i2t = t2i = 0.0
    for a in range(n):
        num = math.exp(S[a][a] / tau)
        den_image = num
        den_caption = num
        for k in range(n):
            if ids[k] != ids[a]:
                den_image += math.exp(S[a][k] / tau) + math.exp(I[a][k] / tau)
                den_caption += math.exp(S[k][a] / tau) + math.exp(T[a][k] / tau)
        i2t += -math.log(num / den_image)
        t2i += -math.log(num / den_caption)
    return i2t / n, t2i / n, "mean"


def ref_convse(sims, tau):
    """Eq. 6-8: denominator = positive + cross-modal negatives; mean (Algorithm 1)."""
    S, ids, _, _ = as_lists(sims)
    n = len(ids)
    i2t = t2i = 0.0
    for a in range(n):
        num = math.exp(S[a][a] / tau)
        den_7 = sum(math.exp(S[a][k] / tau) for k in range(n) if k == a or ids[k] != ids[a])
        den_8 = sum(math.exp(S[k][a] / tau) for k in range(n) if k == a or ids[k] != ids[a])
        i2t += -math.log(num / den_7)
        t2i += -math.log(num / den_8)
    return i2t / n, t2i / n, "mean"


def ref_convsepp(sims, margin, tau):
    """Eq. 12-14 with the hardest negatives of eq. 3-4; mean (Algorithm 1)."""
    S, ids, _, _ = as_lists(sims)
    n = len(ids)
    i2t = t2i = 0.0
    for a in range(n):
        num = math.exp(S[a][a] / tau)
        c_star = _hardest([S[a][k] for k in range(n) if ids[k] != ids[a]])
        i_star = _hardest([S[k][a] for k in range(n) if ids[k] != ids[a]])
        if c_star is not None:
            i2t += max(0.0, -math.log(num / math.exp((c_star + margin) / tau)))
        if i_star is not None:
            t2i += max(0.0, -math.log(num / math.exp((i_star + margin) / tau)))
    return i2t / n, t2i / n, "mean"


CASES = [
    (SumOfHingesLoss, {"margin": 0.2}, lambda s: ref_vse(s, 0.2)),
    (SumOfHingesLoss, {"margin": 0.5}, lambda s: ref_vse(s, 0.5)),
    (MaxOfHingesLoss, {"margin": 0.2}, lambda s: ref_vsepp(s, 0.2)),
    (MaxOfHingesLoss, {"margin": 0.05}, lambda s: ref_vsepp(s, 0.05)),
    (MultimodalNCELoss, {"tau": 0.1}, lambda s: ref_mvn(s, 0.1)),
    (MultimodalNCELoss, {"tau": 0.7}, lambda s: ref_mvn(s, 0.7)),
    (ContrastiveSumOfNegativesLoss, {"tau": 0.1}, lambda s: ref_convse(s, 0.1)),
    (ContrastiveSumOfNegativesLoss, {"tau": 0.5}, lambda s: ref_convse(s, 0.5)),
    (ContrastiveMaxOfNegativesLoss, {"margin": 0.2, "tau": 0.1}, lambda s: ref_convsepp(s, 0.2, 0.1)),
    (ContrastiveMaxOfNegativesLoss, {"margin": 0.4, "tau": 0.3}, lambda s: ref_convsepp(s, 0.4, 0.3)),
]
CASE_IDS = [f"{cls.name}-{'-'.join(f'{k}{v}' for k, v in p.items())}" for cls, p, _ in CASES]
# the losses of this module's loops; every registered loss against its loop: tests/test_method_contract.py
LOSSES_HERE = list(dict.fromkeys(cls for cls, _, _ in CASES))


@pytest.mark.parametrize("layout", list(ID_LAYOUTS))
@pytest.mark.parametrize(("cls", "params", "reference"), CASES, ids=CASE_IDS)
def test_matches_reference_loop(cls, params, reference, layout):
    for seed in range(4):
        sims = make_sims(ID_LAYOUTS[layout], seed)
        out = cls(**params)(sims)
        ref_i2t, ref_t2i, reduction = reference(sims)
        assert cls.reduction == reduction
        assert out.loss.item() == pytest.approx(ref_i2t + ref_t2i, rel=1e-10, abs=1e-12)
        assert out.parts["i2t"].item() == pytest.approx(ref_i2t, rel=1e-10, abs=1e-12)
        assert out.parts["t2i"].item() == pytest.approx(ref_t2i, rel=1e-10, abs=1e-12)
        assert out.loss.item() > 0  # random inputs violate margins: the comparison is not vacuous


@pytest.mark.parametrize("cls", LOSSES_HERE, ids=lambda c: c.name)
@pytest.mark.parametrize("layout", ["distinct", "triple_and_pair"])
def test_gradcheck(cls, layout):
    base = make_sims(ID_LAYOUTS[layout], seed=11)
    loss = cls()
    # Same-id pairs share an image, so their rows of i2t tie exactly (a kink of the max):
    # small independent noise puts every entry at a generic, differentiable position.
    gen = torch.Generator().manual_seed(12)
    inputs = tuple(
        (t + 1e-2 * torch.randn(t.shape, generator=gen, dtype=t.dtype)).requires_grad_(True)
        for t in (base.i2t, base.i2i, base.t2t)
    )

    def fn(i2t, i2i, t2t):
        return loss(Similarities(i2t=i2t, image_ids=base.image_ids, i2i=i2i, t2t=t2t)).loss

    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-7)


def test_parts_are_detached_and_add_up():
    sims = make_sims(ID_LAYOUTS["one_duplicate"], seed=3)
    sims = Similarities(sims.i2t.requires_grad_(True), sims.image_ids, sims.i2i, sims.t2t)
    for cls in LOSSES_HERE:
        out = cls()(sims)
        assert out.loss.requires_grad and out.loss.dim() == 0
        assert set(out.parts) >= {"i2t", "t2i"}
        assert all(not p.requires_grad for p in out.parts.values())
        assert out.loss.item() == pytest.approx((out.parts["i2t"] + out.parts["t2i"]).item())


# --------------------------------------------------------------------------- behaviour


def test_masks():
    ids = torch.tensor([4, 2, 4, 7])
    pos = positive_mask(ids)
    assert pos.diagonal().all()
    assert pos[0, 2] and pos[2, 0] and not pos[0, 1]
    assert torch.equal(negative_mask(ids), ~pos)


@pytest.mark.parametrize("cls", LOSSES_HERE, ids=lambda c: c.name)
def test_same_id_entries_are_never_negatives(cls):
    sims = make_sims(ID_LAYOUTS["triple_and_pair"], seed=5)
    loss = cls()
    before = loss(sims).loss
    same_off_diag = positive_mask(sims.image_ids) & ~torch.eye(7, dtype=torch.bool)
    assert same_off_diag.sum() > 0
    changed = Similarities(
        i2t=sims.i2t.masked_fill(same_off_diag, 5.0),
        image_ids=sims.image_ids,
        i2i=sims.i2i.masked_fill(positive_mask(sims.image_ids), 9.0),  # incl. self-similarity
        t2t=sims.t2t.masked_fill(positive_mask(sims.image_ids), 9.0),
    )
    assert loss(changed).loss.item() == pytest.approx(before.item(), rel=1e-12)
    # The same change on a different-id entry does change the loss: the check can fail.
    neg = negative_mask(sims.image_ids)
    assert loss(Similarities(sims.i2t.masked_fill(neg, 5.0), sims.image_ids, sims.i2i, sims.t2t)).loss > before


@pytest.mark.parametrize("cls", LOSSES_HERE, ids=lambda c: c.name)
def test_batch_of_one_image_gives_zero(cls):
    base = make_sims([2, 2, 2, 2], seed=1)
    i2t = base.i2t.clone().requires_grad_(True)
    out = cls()(Similarities(i2t, base.image_ids, base.i2i, base.t2t))
    out.loss.backward()
    assert out.loss.item() == pytest.approx(0.0, abs=1e-12)
    assert torch.isfinite(i2t.grad).all() and i2t.grad.abs().max() < 1e-12


@pytest.mark.parametrize("cls", [SumOfHingesLoss, MaxOfHingesLoss, ContrastiveMaxOfNegativesLoss], ids=lambda c: c.name)
def test_zero_loss_and_gradient_when_margins_hold(cls):
    gen = torch.Generator().manual_seed(0)
    i2t = (torch.rand(6, 6, generator=gen, dtype=torch.float64) * 0.5 + 0.2).fill_diagonal_(1.0)  # gap >= 0.3
    i2t.requires_grad_(True)
    out = cls(margin=0.25)(Similarities(i2t=i2t, image_ids=torch.arange(6)))
    out.loss.backward()
    assert out.loss.item() == 0.0
    assert torch.count_nonzero(i2t.grad) == 0
    assert cls(margin=0.35)(Similarities(i2t=i2t.detach(), image_ids=torch.arange(6))).loss > 0


def _hard_negative_matrix() -> torch.Tensor:
    i2t = torch.full((4, 4), -0.4, dtype=torch.float64)
    i2t.fill_diagonal_(0.5)
    i2t[0, 1] = 0.9  # hardest caption of image 0 and hardest image of caption 1
    i2t[3, 2] = 0.85  # hardest image of caption 2
    return i2t


@pytest.mark.parametrize("cls", [MaxOfHingesLoss, ContrastiveMaxOfNegativesLoss], ids=lambda c: c.name)
def test_max_of_hinges_uses_only_the_hardest_negative(cls):
    ids = torch.arange(4)
    i2t = _hard_negative_matrix()
    perturbed = i2t.clone()
    perturbed[0, 2] = 0.45  # violates the margin (0.2 + 0.45 - 0.5 > 0) but is not the hardest
    loss = cls()
    assert loss(Similarities(perturbed, ids)).loss.item() == pytest.approx(loss(Similarities(i2t, ids)).loss.item())
    # Sum of hinges sees it; and making it the hardest changes the max-of-hinges loss.
    assert SumOfHingesLoss()(Similarities(perturbed, ids)).loss > SumOfHingesLoss()(Similarities(i2t, ids)).loss
    perturbed[0, 2] = 0.95
    assert loss(Similarities(perturbed, ids)).loss > loss(Similarities(i2t, ids)).loss


def test_same_seed_same_result():
    for cls in LOSSES_HERE:
        first = cls()(make_sims(ID_LAYOUTS["one_duplicate"], seed=9)).loss
        second = cls()(make_sims(ID_LAYOUTS["one_duplicate"], seed=9)).loss
        assert torch.equal(first, second)


def test_float32_and_small_tau_are_finite():
    sims = make_sims(ID_LAYOUTS["one_duplicate"], seed=2, dtype=torch.float32)
    for cls in [MultimodalNCELoss, ContrastiveSumOfNegativesLoss, ContrastiveMaxOfNegativesLoss]:
        out = cls(tau=1e-3)(sims)
        assert out.loss.dtype == torch.float32 and torch.isfinite(out.loss)


def test_mvn_requires_same_modality_similarities():
    sims = make_sims(ID_LAYOUTS["distinct"], seed=0)
    assert [cls.name for cls in LOSSES_HERE if cls.requires] == ["mvn"]
    assert MultimodalNCELoss.requires == ("i2i", "t2t")
    with pytest.raises(ValueError, match="i2i"):
        MultimodalNCELoss()(Similarities(i2t=sims.i2t, image_ids=sims.image_ids))
    ContrastiveSumOfNegativesLoss()(Similarities(i2t=sims.i2t, image_ids=sims.image_ids))  # others do not


def test_similarities_shape_checks():
    with pytest.raises(ValueError, match="square"):
        Similarities(i2t=torch.zeros(3, 4), image_ids=torch.arange(3))
    with pytest.raises(ValueError, match="image_ids"):
        Similarities(i2t=torch.zeros(3, 3), image_ids=torch.arange(4))
    with pytest.raises(ValueError, match="t2t"):
        Similarities(i2t=torch.zeros(3, 3), image_ids=torch.arange(3), t2t=torch.zeros(2, 2))


# --------------------------------------------------------------------------- params and registry


@pytest.mark.parametrize(
    ("cls", "params"),
    [
        (SumOfHingesLoss, {"margin": -0.1}),
        (MaxOfHingesLoss, {"margin": float("nan")}),
        (MultimodalNCELoss, {"tau": 0.0}),
        (ContrastiveSumOfNegativesLoss, {"tau": -1.0}),
        (ContrastiveMaxOfNegativesLoss, {"margin": -1.0}),
        (ContrastiveMaxOfNegativesLoss, {"tau": 0}),
        (ContrastiveMaxOfNegativesLoss, {"tau": "abc"}),
    ],
)
def test_bad_params_raise_value_error(cls, params):
    with pytest.raises(ValueError):
        cls(**params)
    assert SumOfHingesLoss(margin=0).margin == 0.0  # the boundary itself is allowed


def test_registry():
    assert set(LOSSES) >= {"vse", "vsepp", "mvn", "convse", "convsepp", "cmpm", "mpl"}
    assert all(LOSSES[name].name == name for name in LOSSES)
    assert loss_param_names("vse") == ("margin",)
    assert loss_param_names("vsepp") == ("margin",)
    assert loss_param_names("mvn") == ("tau",)
    assert loss_param_names("convse") == ("tau",)
    assert loss_param_names("convsepp") == ("margin", "tau")
    loss = build_loss("convsepp", tau=0.05)
    assert isinstance(loss, ContrastiveMaxOfNegativesLoss) and loss.tau == 0.05 and loss.margin == 0.2
    assert isinstance(build_loss("vse"), SumOfHingesLoss)


def test_registry_errors():
    with pytest.raises(ValueError, match="known losses: ") as err:
        build_loss("triplet")
    assert all(name in str(err.value) for name in ("cmpm", "convse", "convsepp", "mpl", "mvn", "vse", "vsepp"))
    with pytest.raises(ValueError, match="unknown loss"):
        loss_param_names("nope")
    assert refused_setting(build_loss, "vse", tau=0.1) == "tau"
    assert refused_setting(build_loss, "convse", tau=-0.5) == "tau"


@pytest.mark.parametrize("layout", ["distinct", "one_duplicate"])
def test_warmup_loss_is_the_sum_of_hinges_then_the_max(layout):
    """VSE∞'s warm-up: VSE (sum of hinges) during epochs 1..N, VSE++ from epoch N+1 (plain loops above)."""
    sims = make_sims(ID_LAYOUTS[layout], seed=3)
    loss = WarmupLoss(MaxOfHingesLoss(margin=0.2), SumOfHingesLoss(margin=0.2), epochs=2)
    for epoch, reference in [(1, ref_vse), (2, ref_vse), (3, ref_vsepp), (7, ref_vsepp)]:
        loss.set_epoch(epoch)
        i2t, t2i, _ = reference(sims, 0.2)
        assert loss(sims).loss.item() == pytest.approx(i2t + t2i, rel=1e-12), epoch
    assert loss.name == "vsepp" and loss.requires == ()
    assert WarmupLoss(MultimodalNCELoss(tau=0.1), SumOfHingesLoss(), epochs=1).requires == ("i2i", "t2t")
    with pytest.raises(ValueError, match="warm-up epochs"):
        WarmupLoss(MaxOfHingesLoss(), SumOfHingesLoss(), epochs=0)
