"""Tests of CODER's losses (itrlab.methods.coder.losses) against plain loops written from C eq. 3-7 / S eq. 7-9,
the DCL term in each of its three readings (as printed, InfoNCE form, multi-similarity form)."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import refused_setting
from itrlab.losses import LOSSES, Similarities, build_loss, loss_param_names
from itrlab.methods.coder.losses import (
    DCLInstanceLoss,
    DCLLoss,
    MemoryDCLLoss,
    PrototypeClusterLoss,
    averaged_diversity,
    diversity,
)

# --------------------------------------------------------------------------- inputs

ID_LAYOUTS = {
    "distinct": [0, 1, 2, 3, 4, 5],
    "two_captions": [0, 1, 0, 2, 3, 4],  # pairs 0 and 2: two captions of one image
    "triple_and_pair": [3, 1, 3, 2, 1, 3],
}
QUEUE_IDS = [0, 7, -1, 3, 8, 1, -1, 9]  # after the B momentum keys: repeats, invalid slots, others


def make_sims(image_ids, seed, queue_ids=QUEUE_IDS, dim=4, dtype=torch.float64, classes=5) -> Similarities:
    """Batch, memory (momentum keys + queue) and cluster logits from random unit embeddings."""
    gen = torch.Generator().manual_seed(seed)
    unit = lambda *shape: torch.nn.functional.normalize(torch.randn(*shape, dim, generator=gen, dtype=dtype), dim=-1)
    ids = torch.tensor(image_ids, dtype=torch.long)
    memory_ids = torch.cat([ids, torch.tensor(queue_ids, dtype=torch.long)])
    per_image = unit(int(memory_ids.max()) + 1)
    images, captions = per_image[ids], unit(len(image_ids))
    key_images = torch.nn.functional.normalize(images + 0.1 * unit(len(image_ids)), dim=-1)
    key_captions = torch.nn.functional.normalize(captions + 0.1 * unit(len(image_ids)), dim=-1)
    memory_images = torch.cat([key_images, per_image[memory_ids[len(image_ids) :].clamp(min=0)]])
    memory_captions = torch.cat([key_captions, unit(len(queue_ids))])
    labels = torch.randint(-1, classes, (len(image_ids),), generator=gen)
    return Similarities(
        i2t=images @ captions.T,
        image_ids=ids,
        extras={
            "i2t_memory": images @ memory_captions.T,
            "t2i_memory": captions @ memory_images.T,
            "memory_image_ids": memory_ids,
            "i2t_momentum_pos": (images * key_captions).sum(-1),
            "t2i_momentum_pos": (captions * key_images).sum(-1),
            "image_cluster_logits": torch.randn(len(image_ids), classes, generator=gen, dtype=dtype),
            "caption_cluster_logits": torch.randn(len(image_ids), classes, generator=gen, dtype=dtype),
            "cluster_labels": labels,
        },
    )


# --------------------------------------------------------------------------- reference loops


def sigmoid(x):
    return 1.0 / (1.0 + math.exp(-x))


def ref_diversity(rows, kind, eps):
    """C eq. 3 / S eq. 8 per anchor, literally; rows = [(negative scores, positive score)]."""
    if kind == "none":
        return [1.0] * len(rows)
    d = []
    for negatives, positive in rows:
        if not negatives:
            d.append(None)
            continue
        if kind == "std":
            mean = sum(negatives) / len(negatives)
            spread = math.sqrt(max(sum(s * s for s in negatives) / len(negatives) - mean**2, 0.0))
        else:
            z = sum(math.exp(s) for s in negatives + [positive])
            spread = -sum(math.exp(s) / z * math.log2(math.exp(s) / z) for s in negatives)
        d.append(1.0 / sigmoid(eps / max(spread, 1e-6)))
    top = max([x for x in d if x is not None], default=1.0)
    return [1.0 if x is None else x / top for x in d]


def ref_anchor_rows(sims):
    """Per direction, per anchor: (positive, batch negatives, memory negatives, momentum positive)."""
    S, ids = sims.i2t, sims.image_ids.tolist()
    mids = sims.extras["memory_image_ids"].tolist()
    directions = []
    for memory, key in (("i2t_memory", "i2t_momentum_pos"), ("t2i_memory", "t2i_momentum_pos")):
        M, rows = sims.extras[memory], []
        for n in range(len(ids)):
            batch = [S[n, q] if memory == "i2t_memory" else S[q, n] for q in range(len(ids)) if ids[q] != ids[n]]
            mem = [M[n, m] for m in range(len(mids)) if mids[m] != -1 and mids[m] != ids[n]]
            rows.append((S[n, n], batch, mem, sims.extras[key][n]))
        directions.append(rows)
    return directions


def ref_divs(rows, kind, eps, memory_div):
    batch = ref_diversity([([s.item() for s in b], p.item()) for p, b, _, _ in rows], kind, eps)
    if not memory_div or kind == "none":
        return batch
    memory = ref_diversity([([s.item() for s in m], k.item()) for _, _, m, k in rows], kind, eps)
    return [0.5 * (a + b) for a, b in zip(batch, memory)]


def ref_term(positive, negatives, mu, gamma, div, reading="printed", alpha=2.0):
    """One anchor's term, in the reading asked for:

    printed (C eq. 4-5, S eq. 9): μ [log(Σ_{q≠n} exp((S_nq − γ)/(μ div)) + 1) − log(S_nn + 1)];
    infonce: μ log(1 + Σ_{q≠n} exp((S_nq − S_nn + γ)/(μ div))), i.e. −μ log of the positive's softmax share
    with the negatives' logits raised by γ: exp(S_nn/T) / (exp(S_nn/T) + Σ exp((S_nq + γ)/T));
    multi_similarity: μ log(1 + Σ_{q≠n} exp((S_nq − γ)/(μ div))) + (1/α) log(1 + exp(−α (S_nn − γ))).
    """
    zero = torch.zeros((), dtype=torch.float64)
    temperature = mu * div
    if reading == "infonce":
        own = torch.exp(positive / temperature)
        others = sum((torch.exp((s + gamma) / temperature) for s in negatives), zero)
        return -mu * torch.log(own / (own + others))
    push = mu * torch.log(sum((torch.exp((s - gamma) / temperature) for s in negatives), zero) + 1)
    if reading == "multi_similarity":
        return push + torch.log(1 + torch.exp(-alpha * (positive - gamma))) / alpha
    assert reading == "printed", reading
    return push - mu * torch.log(torch.clamp(positive + 1, min=1e-6))


def ref_dcl(sims, mu=0.1, gamma=0.3, eps=0.1, div="std", memory_div=False, reading="printed", alpha=2.0):
    out = []
    for rows in ref_anchor_rows(sims):
        divs = ref_divs(rows, div, eps, memory_div)
        out.append(sum(ref_term(p, b, mu, gamma, d, reading, alpha) for (p, b, _, _), d in zip(rows, divs)) / len(rows))
    return out  # [l(V→W), l(W→V)]


def ref_mdcl(
    sims, mu=0.1, gamma=0.3, eps=0.1, div="std", memory_div=True, positive="momentum", reading="printed", alpha=2.0
):
    out = []
    for rows in ref_anchor_rows(sims):
        divs = ref_divs(rows, div, eps, memory_div)
        out.append(
            sum(
                ref_term(k if positive == "momentum" else p, m, mu, gamma, d, reading, alpha)
                for (p, _, m, k), d in zip(rows, divs)
            )
            / len(rows)
        )
    return out


def ref_pgc(sims):
    labels = sims.extras["cluster_labels"].tolist()
    out = []
    for name in ("image_cluster_logits", "caption_cluster_logits"):
        logits = sims.extras[name]
        total = 0.0
        for n, z in enumerate(labels):
            if z >= 0:
                total -= torch.log(torch.exp(logits[n, z]) / sum(torch.exp(x) for x in logits[n]))
        out.append(total / len(labels))
    return out


# --------------------------------------------------------------------------- losses vs loops

CASES = [
    (DCLInstanceLoss, {}, lambda s: ref_dcl(s, div="none")),
    (DCLInstanceLoss, {"mu": 0.05, "gamma": 0.1}, lambda s: ref_dcl(s, mu=0.05, gamma=0.1, div="none")),
    (DCLLoss, {}, ref_dcl),
    (DCLLoss, {"div": "ent", "eps": 0.5}, lambda s: ref_dcl(s, div="ent", eps=0.5)),
    (DCLLoss, {"memory_div": True}, lambda s: ref_dcl(s, memory_div=True)),
    (DCLLoss, {"memory_div": True, "div": "ent"}, lambda s: ref_dcl(s, memory_div=True, div="ent")),
    (DCLLoss, {"mu": 0.2, "gamma": -0.1, "eps": 0.05}, lambda s: ref_dcl(s, mu=0.2, gamma=-0.1, eps=0.05)),
    (MemoryDCLLoss, {}, ref_mdcl),
    (MemoryDCLLoss, {"memory_div": False}, lambda s: ref_mdcl(s, memory_div=False)),
    (MemoryDCLLoss, {"div": "ent"}, lambda s: ref_mdcl(s, div="ent")),
    (MemoryDCLLoss, {"div": "none", "positive": "online"}, lambda s: ref_mdcl(s, div="none", positive="online")),
    # the InfoNCE and multi-similarity readings, wherever the printed one runs
    (DCLInstanceLoss, {"reading": "infonce"}, lambda s: ref_dcl(s, div="none", reading="infonce")),
    (DCLInstanceLoss, {"reading": "multi_similarity"}, lambda s: ref_dcl(s, div="none", reading="multi_similarity")),
    (DCLLoss, {"reading": "infonce"}, lambda s: ref_dcl(s, reading="infonce")),
    (
        DCLLoss,
        {"reading": "infonce", "gamma": -0.2, "div": "ent", "memory_div": True},
        lambda s: ref_dcl(s, reading="infonce", gamma=-0.2, div="ent", memory_div=True),
    ),
    (DCLLoss, {"reading": "multi_similarity"}, lambda s: ref_dcl(s, reading="multi_similarity")),
    (
        DCLLoss,
        {"reading": "multi_similarity", "alpha": 5.0, "mu": 0.05, "memory_div": True},
        lambda s: ref_dcl(s, reading="multi_similarity", alpha=5.0, mu=0.05, memory_div=True),
    ),
    (MemoryDCLLoss, {"reading": "infonce"}, lambda s: ref_mdcl(s, reading="infonce")),
    (
        MemoryDCLLoss,
        {"reading": "multi_similarity", "alpha": 1.5, "positive": "online", "div": "ent"},
        lambda s: ref_mdcl(s, reading="multi_similarity", alpha=1.5, positive="online", div="ent"),
    ),
]
CASE_IDS = [f"{c.name}-{'-'.join(f'{k}={v}' for k, v in p.items()) or 'default'}" for c, p, _ in CASES]


@pytest.mark.parametrize("layout", sorted(ID_LAYOUTS))
@pytest.mark.parametrize(("cls", "params", "reference"), CASES, ids=CASE_IDS)
def test_matches_reference_loop(cls, params, reference, layout):
    sims = make_sims(ID_LAYOUTS[layout], seed=sorted(ID_LAYOUTS).index(layout))
    out = cls(**params)(sims)
    i2t, t2i = reference(sims)
    assert out.parts["i2t"].item() == pytest.approx(i2t.item(), rel=1e-9, abs=1e-12)
    assert out.parts["t2i"].item() == pytest.approx(t2i.item(), rel=1e-9, abs=1e-12)
    assert out.loss.item() == pytest.approx((i2t + t2i).item(), rel=1e-9)


@pytest.mark.parametrize(("cls", "params", "reference"), CASES, ids=CASE_IDS)
def test_gradient_matches_loop_with_diversity_held_fixed(cls, params, reference):
    """div is under stop-gradient: the gradient is the loop's, with div as constants."""
    names = ("i2t", "i2t_memory", "t2i_memory", "i2t_momentum_pos", "t2i_momentum_pos")
    base = make_sims(ID_LAYOUTS["two_captions"], seed=5)
    leaves = {n: base.get(n).clone().requires_grad_(True) for n in names}
    as_sims = lambda: Similarities(i2t=leaves["i2t"], image_ids=base.image_ids, extras={**base.extras, **leaves})
    got = torch.autograd.grad(cls(**params)(as_sims()).loss, list(leaves.values()), allow_unused=True)
    want = torch.autograd.grad(sum(reference(as_sims())), list(leaves.values()), allow_unused=True)
    for name, g, w in zip(names, got, want):
        if w is None:
            assert g is None or torch.count_nonzero(g) == 0, name
        else:
            torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-12, msg=name)


@pytest.mark.parametrize(
    "loss",
    [
        DCLInstanceLoss(),
        DCLLoss(div="none", memory_div=True),
        MemoryDCLLoss(div="none"),
        DCLInstanceLoss(reading="infonce"),
        DCLLoss(reading="multi_similarity", div="none"),
        MemoryDCLLoss(reading="infonce", div="none", positive="online"),
        MemoryDCLLoss(reading="multi_similarity", alpha=3.0, div="none"),
    ],
    ids=["dcl_i", "dcl_none", "mdcl_none", "dcl_i_infonce", "dcl_ms_none", "mdcl_infonce_online", "mdcl_ms"],
)
def test_gradcheck(loss):
    base = make_sims(ID_LAYOUTS["two_captions"], seed=11)
    names = ("i2t", "i2t_memory", "t2i_memory", "i2t_momentum_pos", "t2i_momentum_pos")
    inputs = tuple(base.get(n).clone().requires_grad_(True) for n in names)

    def fn(*tensors):
        extras = {**base.extras, **dict(zip(names, tensors))}
        return loss(Similarities(i2t=tensors[0], image_ids=base.image_ids, extras=extras)).loss

    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-7)


def test_gradcheck_pgc():
    base = make_sims(ID_LAYOUTS["two_captions"], seed=12)
    inputs = tuple(base.get(n).clone().requires_grad_(True) for n in ("image_cluster_logits", "caption_cluster_logits"))
    fn = lambda v, w: PrototypeClusterLoss()(base.with_extras(image_cluster_logits=v, caption_cluster_logits=w)).loss
    assert torch.autograd.gradcheck(
        fn, inputs, eps=1e-6, atol=1e-7, fast_mode=True
    )  # cross_entropy is slow on busy CPUs


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pgc_matches_reference_loop(seed):
    sims = make_sims(ID_LAYOUTS["triple_and_pair"], seed=seed)
    out = PrototypeClusterLoss()(sims)
    image, caption = ref_pgc(sims)
    assert out.parts["image"].item() == pytest.approx(float(image), rel=1e-9, abs=1e-12)
    assert out.parts["caption"].item() == pytest.approx(float(caption), rel=1e-9, abs=1e-12)
    labels = sims.extras["cluster_labels"]
    assert out.parts["labelled"].item() == pytest.approx((labels >= 0).double().mean().item())


def test_pgc_without_labels_is_zero_with_zero_gradient():
    sims = make_sims(ID_LAYOUTS["distinct"], seed=3)
    logits = sims.extras["image_cluster_logits"].clone().requires_grad_(True)
    out = PrototypeClusterLoss()(
        sims.with_extras(image_cluster_logits=logits, cluster_labels=torch.full((6,), -1, dtype=torch.long))
    )
    out.loss.backward()
    assert out.loss.item() == 0.0 and torch.count_nonzero(logits.grad) == 0
    with pytest.raises(ValueError, match="cluster_labels must be integer"):
        PrototypeClusterLoss()(sims.with_extras(cluster_labels=torch.zeros(6)))


# --------------------------------------------------------------------------- masks and diversity

ALL_MEMORY_LOSSES = [
    DCLInstanceLoss(),
    DCLLoss(),
    DCLLoss(div="ent", memory_div=True),
    MemoryDCLLoss(),
    MemoryDCLLoss(div="ent", positive="online"),
    DCLLoss(reading="infonce", memory_div=True),
    DCLLoss(reading="multi_similarity", div="ent", memory_div=True),
    MemoryDCLLoss(reading="infonce"),
    MemoryDCLLoss(reading="multi_similarity", positive="online"),
]


@pytest.mark.parametrize("loss", ALL_MEMORY_LOSSES, ids=repr)
def test_same_image_entries_and_invalid_slots_are_never_negatives(loss):
    """Changing any same-image score (batch or memory) or any invalid slot leaves the loss unchanged."""
    sims = make_sims(ID_LAYOUTS["triple_and_pair"], seed=7)
    ids, mids = sims.image_ids, sims.extras["memory_image_ids"]
    same_batch = (ids[:, None] == ids[None, :]) & ~torch.eye(len(ids), dtype=torch.bool)
    masked_memory = (mids[None, :] == ids[:, None]) | (mids[None, :] < 0)
    in_queue = torch.arange(len(mids)) >= len(ids)
    assert same_batch.any() and (masked_memory & (mids >= 0) & in_queue).any()  # queue repeats exist
    gen = torch.Generator().manual_seed(1)
    noise = torch.randn(sims.i2t.shape, generator=gen, dtype=torch.float64)
    changed = sims.with_extras(
        **{
            n: torch.where(
                masked_memory,
                0.9 - 1.5 * torch.rand(masked_memory.shape, generator=gen, dtype=torch.float64),
                sims.get(n),
            )
            for n in ("i2t_memory", "t2i_memory")
        }
    )
    changed = Similarities(i2t=torch.where(same_batch, noise, sims.i2t), image_ids=ids, extras=changed.extras)
    assert loss(changed).loss.item() == pytest.approx(loss(sims).loss.item(), rel=1e-12)


def test_diversity_values_from_the_spec():
    """SD 0.05 → d = 1.135, SD 0.2 → d = 1.607 (spec A2); div = d / max d; no negatives → 1."""
    scores = torch.tensor([[0.30, 0.40, 9.0], [0.10, 0.50, 9.0], [5.0, 5.0, 9.0]], dtype=torch.float64)
    valid = torch.tensor([[True, True, False], [True, True, False], [False, False, False]])
    d_narrow, d_wide = 1 / sigmoid(0.1 / 0.05), 1 / sigmoid(0.1 / 0.2)
    assert (round(d_narrow, 3), round(d_wide, 3)) == (1.135, 1.607)
    torch.testing.assert_close(
        diversity(scores, valid, "std", 0.1), torch.tensor([d_narrow / d_wide, 1.0, 1.0], dtype=torch.float64)
    )
    assert torch.equal(diversity(scores, valid, "none", 0.1), torch.ones(3, dtype=torch.float64))
    assert torch.equal(diversity(scores, valid & False, "std", 0.1), torch.ones(3, dtype=torch.float64))
    one_negative = diversity(scores, torch.tensor([[True, False, False]] * 3), "std", 0.1)  # SD 0 → clamp
    assert torch.isfinite(one_negative).all() and torch.equal(one_negative, torch.ones(3, dtype=torch.float64))
    with pytest.raises(ValueError, match="div must be one of std, ent, none"):
        diversity(scores, valid, "var", 0.1)


def test_diversity_is_detached_and_in_range():
    sims = make_sims(ID_LAYOUTS["distinct"], seed=2)
    scores = sims.i2t.clone().requires_grad_(True)
    valid = ~torch.eye(6, dtype=torch.bool)
    for kind in ("std", "ent"):
        div = diversity(scores, valid, kind, 0.1, scores.diagonal())
        assert not div.requires_grad and div.max().item() == 1.0 and (div > 0.5).all()
    torch.testing.assert_close(
        averaged_diversity(torch.tensor([0.6, 1.0]), torch.tensor([1.0, 0.8])), torch.tensor([0.8, 0.9])
    )


def test_batch_of_one_image_has_no_negatives():
    sims = make_sims([4, 4, 4], seed=8, queue_ids=[4, -1])
    out = DCLLoss(memory_div=True)(sims)
    want = 0.1 * -torch.log(1 + sims.i2t.diagonal()).mean()
    assert out.parts["i2t"].item() == pytest.approx(want.item()) and torch.isfinite(out.loss)
    mdcl = MemoryDCLLoss()(sims)
    assert mdcl.parts["t2i"].item() == pytest.approx(
        0.1 * -torch.log(1 + sims.extras["t2i_momentum_pos"]).mean().item()
    )


def test_positive_clamp_and_float32_small_mu_are_finite():
    sims = make_sims(ID_LAYOUTS["two_captions"], seed=9, dtype=torch.float32)
    i2t = sims.i2t.clone()
    i2t[0, 0] = -1.0  # 1 + S_nn = 0 → clamped at 1e-6
    for loss in (DCLLoss(mu=0.01), MemoryDCLLoss(mu=0.01, div="ent", positive="online"), DCLInstanceLoss(mu=0.01)):
        out = loss(Similarities(i2t=i2t.requires_grad_(True), image_ids=sims.image_ids, extras=sims.extras))
        out.loss.backward()
        assert torch.isfinite(out.loss) and torch.isfinite(i2t.grad).all()
        i2t.grad = None


def test_dcl_i_equals_dcl_without_diversity_and_ignores_memory():
    sims = make_sims(ID_LAYOUTS["two_captions"], seed=4)
    batch_only = Similarities(i2t=sims.i2t, image_ids=sims.image_ids)
    assert DCLInstanceLoss()(batch_only).loss.item() == DCLLoss(div="none", memory_div=True)(batch_only).loss.item()
    assert DCLLoss()(batch_only).loss.item() == DCLLoss()(sims).loss.item()


def test_parts_are_detached_and_add_up():
    sims = make_sims(ID_LAYOUTS["two_captions"], seed=3)
    sims = sims.with_extras(i2t_memory=sims.extras["i2t_memory"].clone().requires_grad_(True))
    for loss in ALL_MEMORY_LOSSES:
        out = loss(
            Similarities(i2t=sims.i2t.clone().requires_grad_(True), image_ids=sims.image_ids, extras=sims.extras)
        )
        assert out.loss.requires_grad and out.loss.dim() == 0 and set(out.parts) == {"i2t", "t2i"}
        assert all(not p.requires_grad for p in out.parts.values())
        assert out.loss.item() == pytest.approx((out.parts["i2t"] + out.parts["t2i"]).item())


def test_same_seed_same_result():
    for loss in [*ALL_MEMORY_LOSSES, PrototypeClusterLoss()]:
        a, b = (
            loss(make_sims(ID_LAYOUTS["two_captions"], seed=21)),
            loss(make_sims(ID_LAYOUTS["two_captions"], seed=21)),
        )
        assert a.loss.item() == b.loss.item()
        assert a.loss.item() != loss(make_sims(ID_LAYOUTS["two_captions"], seed=22)).loss.item()


# --------------------------------------------------------------------------- inputs and parameters


def test_requires_follows_the_configuration():
    assert DCLLoss().requires == ("i2t", "image_ids") == DCLInstanceLoss().requires
    assert DCLLoss(div="none", memory_div=True).requires == ("i2t", "image_ids")
    assert set(DCLLoss(memory_div=True).requires) == {
        "i2t",
        "image_ids",
        "i2t_memory",
        "t2i_memory",
        "memory_image_ids",
    }
    assert {"i2t_momentum_pos", "t2i_momentum_pos"} <= set(DCLLoss(memory_div=True, div="ent").requires)
    assert "i2t_momentum_pos" not in MemoryDCLLoss(positive="online").requires
    assert "t2i_momentum_pos" in MemoryDCLLoss().requires
    assert PrototypeClusterLoss().requires == ("image_cluster_logits", "caption_cluster_logits", "cluster_labels")
    sims = make_sims(ID_LAYOUTS["distinct"], seed=1)
    bare = Similarities(i2t=sims.i2t, image_ids=sims.image_ids)
    for loss, missing in (
        (DCLLoss(memory_div=True), "i2t_memory"),
        (MemoryDCLLoss(), "i2t_memory"),
        (PrototypeClusterLoss(), "image_cluster_logits"),
    ):
        with pytest.raises(ValueError, match=f"needs .*{missing}"):
            loss(bare)


def test_memory_shape_checks():
    sims = make_sims(ID_LAYOUTS["distinct"], seed=1)
    with pytest.raises(ValueError, match=r"i2t_memory must have shape \(B, M\) = \(6, 14\)"):
        MemoryDCLLoss()(sims.with_extras(i2t_memory=sims.extras["i2t_memory"][:, :5]))
    with pytest.raises(ValueError, match=r"t2i_momentum_pos must have shape \(6,\)"):
        MemoryDCLLoss()(sims.with_extras(t2i_momentum_pos=sims.extras["t2i_momentum_pos"][:3]))


@pytest.mark.parametrize(
    ("cls", "params", "message"),
    [
        (DCLLoss, {"mu": 0}, "must be a finite number > 0"),
        (DCLLoss, {"mu": -0.1}, "must be"),
        (DCLInstanceLoss, {"mu": float("nan")}, "must be"),
        (MemoryDCLLoss, {"mu": True}, "must be"),
        (DCLLoss, {"eps": 0}, "must be a finite number > 0"),
        (MemoryDCLLoss, {"eps": -1.0}, "must be"),
        (DCLLoss, {"gamma": float("inf")}, "must be a finite number"),
        (DCLLoss, {"div": "var"}, "'std', 'ent' or 'none'"),
        (MemoryDCLLoss, {"div": None}, "'std', 'ent' or 'none'"),
        (DCLLoss, {"memory_div": "yes"}, "valid boolean"),
        (MemoryDCLLoss, {"positive": "key"}, "'momentum' or 'online'"),
        (DCLLoss, {"reading": "moco"}, "'printed', 'infonce' or 'multi_similarity'"),
        (DCLInstanceLoss, {"alpha": 0, "reading": "multi_similarity"}, "must be a finite number > 0"),
        (DCLLoss, {"alpha": 3.0}, "changes nothing with reading 'printed'"),
        (MemoryDCLLoss, {"alpha": 1.0, "reading": "infonce"}, "changes nothing with reading 'infonce'"),
    ],
)
def test_bad_params_raise_value_error(cls, params, message):
    with pytest.raises(ValueError, match=message):
        cls(**params)
    assert refused_setting(cls, **params) == next(iter(params))


def test_registry():
    assert {LOSSES[n] for n in ("dcl_i", "dcl", "mdcl", "pgc")} == {
        DCLInstanceLoss,
        DCLLoss,
        MemoryDCLLoss,
        PrototypeClusterLoss,
    }
    assert loss_param_names("dcl") == ("mu", "gamma", "reading", "alpha", "eps", "div", "memory_div")
    assert loss_param_names("dcl_i") == ("mu", "gamma", "reading", "alpha")
    assert loss_param_names("mdcl") == ("mu", "gamma", "reading", "alpha", "eps", "div", "memory_div", "positive")
    assert loss_param_names("pgc") == ()
    assert build_loss("dcl", div="ent", eps=0.05).eps == 0.05
    assert refused_setting(build_loss, "dcl_i", div="std") == "div"


# --------------------------------------------------------------------------- the three readings


def test_infonce_reading_without_margin_or_diversity_is_mu_times_convse():
    """``reading: infonce`` at γ = 0 and div = 1 is ConVSE's l_CSN (eq. 6-8, the InfoNCE row) at τ = μ, times μ."""
    sims = make_sims(ID_LAYOUTS["two_captions"], seed=13)
    for mu in (0.1, 0.3):
        dcl = DCLInstanceLoss(mu=mu, gamma=0.0, reading="infonce")(sims)
        convse = build_loss("convse", tau=mu)(sims)
        for part in ("i2t", "t2i"):
            assert dcl.parts[part].item() == pytest.approx(mu * convse.parts[part].item(), rel=1e-12)


def test_multi_similarity_reading_is_the_printed_push_with_another_pull():
    """The multi-similarity reading keeps the printed negative term and replaces −μ log(1 + S_nn) by
    (1/α) log(1 + exp(−α(S_nn − γ))): the difference of the two losses depends on the positives alone."""
    sims = make_sims(ID_LAYOUTS["triple_and_pair"], seed=14)
    gamma, alpha, mu = 0.3, 2.0, 0.1
    positive = sims.i2t.diagonal()
    pull_ms = torch.nn.functional.softplus(-alpha * (positive - gamma)) / alpha
    pull_printed = -mu * torch.log(1 + positive)
    for memory_div in (False, True):
        printed = DCLLoss(memory_div=memory_div)(sims)
        ms = DCLLoss(reading="multi_similarity", memory_div=memory_div)(sims)
        for part in ("i2t", "t2i"):
            assert ms.parts[part].item() - printed.parts[part].item() == pytest.approx(
                (pull_ms - pull_printed).mean().item(), rel=1e-9
            )


@pytest.mark.parametrize("reading", ["printed", "infonce", "multi_similarity"])
@pytest.mark.parametrize("div", ["none", "std"])
def test_gradient_pulls_the_positive_up_pushes_negatives_down_and_skips_same_image_entries(reading, div):
    """Every reading: dL/dS_nn < 0, dL/dS_nq > 0 on every negative, exactly 0 on a sibling caption of the
    anchor's image."""
    sims = make_sims(ID_LAYOUTS["two_captions"], seed=15)
    i2t = sims.i2t.clone().requires_grad_(True)
    DCLLoss(reading=reading, div=div)(Similarities(i2t=i2t, image_ids=sims.image_ids)).loss.backward()
    ids = sims.image_ids
    same_image = ids[:, None] == ids[None, :]
    eye = torch.eye(len(ids), dtype=torch.bool)
    assert (i2t.grad.diagonal() < 0).all()
    assert (i2t.grad[~same_image] > 0).all()
    assert torch.count_nonzero(i2t.grad[same_image & ~eye]) == 0 and (same_image & ~eye).any()


def test_the_printed_pull_is_weaker_than_the_other_readings():
    """One image anchor's term at the paper's μ = 0.1, γ = 0.3, every score 0.3: the printed positive gradient
    μ/(1 + S_nn) is a small fraction of the push on the anchor's negatives; the InfoNCE form pulls with the whole
    push, the multi-similarity form with σ(−α(S_nn − γ)) = ½."""
    n = 8
    ids = torch.arange(n)
    grads = {}
    for reading in ("printed", "infonce", "multi_similarity"):
        i2t = torch.full((n, n), 0.3, dtype=torch.float64, requires_grad=True)
        image_terms, _ = DCLInstanceLoss(reading=reading).terms(Similarities(i2t=i2t, image_ids=ids))
        image_terms[0].backward()
        grads[reading] = (-i2t.grad[0, 0].item(), i2t.grad[0, 1:].sum().item())  # (pull, push)
    assert grads["printed"][0] == pytest.approx(0.1 / 1.3)
    assert grads["infonce"][0] == pytest.approx(grads["infonce"][1])
    assert grads["multi_similarity"][0] == pytest.approx(0.5)
    assert grads["printed"][1] == grads["multi_similarity"][1]  # the same negative term
    assert grads["printed"][0] < grads["printed"][1] / 5
    assert grads["printed"][0] < min(grads["infonce"][0], grads["multi_similarity"][0]) / 5
