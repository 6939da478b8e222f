"""AsCL building blocks: the loss (eq. 5-7) against plain loops, the sample generators, the fusion
scorer (eq. 1-4) against a per-pair loop, and the leak tests of spec B3."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from itrlab.eval import evaluate
from itrlab.losses import LOSSES, Similarities, build_loss, loss_param_names
from itrlab.methods.ascl.fusion import HierarchicalFusion
from itrlab.methods.ascl.text_augment import (
    CONCAT,
    MIXTURE_OF,
    NEGATIVE_GENERATORS,
    TRUNCATE,
    NegativeGenerator,
    PositiveGenerator,
)
from itrlab.models.interaction import CrossAttentionSimilarity, InteractionModel
from itrlab.models.sharding import shard_plan, sharded_pair_scores

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# --------------------------------------------------------------------------- the loss


def make_sims(ids, n_generated=5, seed=0, above=False):
    gen = torch.Generator().manual_seed(seed)
    B = len(ids)
    m = {
        k: torch.rand(shape, generator=gen, dtype=torch.float64) * 2 - 1
        for k, shape in (
            ("i2t", (B, B)),
            ("i2t_generated_neg", (B, n_generated)),
            ("i2t_pos", (B, B)),
            ("i2t_pos_generated_neg", (B, n_generated)),
        )
    }
    if above:  # a generated negative above the positive in both halves, for anchor 0
        m["i2t_generated_neg"][0, 1] = m["i2t"][0, 0] + 0.3
        m["i2t_pos_generated_neg"][0, 2] = m["i2t_pos"][0, 0] + 0.3
    i2t = m.pop("i2t")
    return Similarities(i2t=i2t, image_ids=torch.tensor(ids), extras=m)


def ref_half(S, gen, ids, tau, triplet, margin):
    """Eq. 5 (or 6) for every pair, straight from the printed fractions with -log; α drops > P."""
    out = []
    for i in range(len(ids)):
        P = S[i][i]
        images = [S[n][i] for n in range(len(ids)) if ids[n] != ids[i]]
        captions = [S[i][n] for n in range(len(ids)) if ids[n] != ids[i]]
        captions += [g for g in (gen[i] if gen is not None else []) if not g > P]  # α_n
        term = 0.0
        for negatives in (images, captions):
            if triplet:
                term += max(0.0, margin + max(negatives) - P) if negatives else 0.0
            else:
                term -= math.log(math.exp(P / tau) / (math.exp(P / tau) + sum(math.exp(s / tau) for s in negatives)))
        out.append(term)
    return out


def ref_loss(sims, tau=0.1, use_positives=True, use_negatives=True, triplet=False, margin=0.2):
    ids = sims.image_ids.tolist()
    reduce = sum if triplet else (lambda v: sum(v) / len(v))
    get = lambda name: sims.get(name).tolist() if use_negatives else None  # noqa: E731
    l1 = reduce(ref_half(sims.i2t.tolist(), get("i2t_generated_neg"), ids, tau, triplet, margin))
    if not use_positives:
        return l1
    l2 = reduce(ref_half(sims.get("i2t_pos").tolist(), get("i2t_pos_generated_neg"), ids, tau, triplet, margin))
    return 0.5 * l1 + 0.5 * l2


LAYOUTS = {"distinct": [0, 1, 2, 3, 4], "two_captions_of_one_image": [0, 1, 0, 2, 3], "triple": [2, 1, 2, 2, 0]}
FLAGS = [(True, True), (False, True), (True, False), (False, False)]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("use_positives,use_negatives", FLAGS)
@pytest.mark.parametrize("name", ["ascl", "ascl_triplet"])
def test_loss_matches_reference_loop(layout, use_positives, use_negatives, name):
    sims = make_sims(LAYOUTS[layout], above=True)
    loss = build_loss(
        name, use_positives=use_positives, use_negatives=use_negatives, **({"tau": 0.1} if name == "ascl" else {})
    )
    expected = ref_loss(sims, 0.1, use_positives, use_negatives, triplet=name == "ascl_triplet")
    assert loss(sims).loss.item() == pytest.approx(expected, rel=1e-10, abs=1e-12)


def test_generated_negative_above_the_positive_is_dropped():
    sims = make_sims(LAYOUTS["two_captions_of_one_image"], above=True)
    generated = sims.extras["i2t_generated_neg"].clone().requires_grad_(True)
    out = build_loss("ascl", tau=0.1)(sims.with_extras(i2t_generated_neg=generated))
    out.loss.backward()
    assert generated.grad[0, 1] == 0 and (generated.grad[0, [0, 2, 3, 4]] != 0).all()
    dropped = int(
        (sims.extras["i2t_generated_neg"] > sims.i2t.diagonal()[:, None]).sum()
        + (sims.extras["i2t_pos_generated_neg"] > sims.extras["i2t_pos"].diagonal()[:, None]).sum()
    )
    assert dropped >= 2 and out.parts["dropped_generated"].item() == pytest.approx(dropped / 50)
    assert set(out.parts) == {"i2t", "t2i", "L_I", "L_II_III", "dropped_generated", "own_outscores"}


@pytest.mark.parametrize("use_positives", [True, False])
def test_own_outscores_counts_the_negatives_above_the_caption_they_were_made_from(use_positives):
    sims = make_sims(LAYOUTS["distinct"], above=True)
    sims.extras["i2t_generated_neg"][3, 3] = sims.i2t[3, 3] + 0.1  # anchor 3's own negative outscores it
    pairs = [(sims.i2t, sims.extras["i2t_generated_neg"])]
    if use_positives:
        pairs.append((sims.extras["i2t_pos"], sims.extras["i2t_pos_generated_neg"]))
    own = sum(int((generated.diagonal() > scores.diagonal()).sum()) for scores, generated in pairs)
    assert 1 <= own < 5 * len(pairs)
    out = build_loss("ascl", tau=0.1, use_positives=use_positives)(sims)
    assert out.parts["own_outscores"].item() == pytest.approx(own / (5 * len(pairs)))
    assert "own_outscores" not in build_loss("ascl", tau=0.1, use_negatives=False)(sims).parts


@pytest.mark.parametrize("name", ["ascl", "ascl_triplet"])
def test_gradcheck(name):
    sims = make_sims(LAYOUTS["two_captions_of_one_image"], seed=3, above=True)
    names = ("i2t_generated_neg", "i2t_pos", "i2t_pos_generated_neg")
    loss = build_loss(name)

    def fn(i2t, *extras):
        return loss(Similarities(i2t=i2t, image_ids=sims.image_ids, extras=dict(zip(names, extras)))).loss

    inputs = [sims.i2t.clone().requires_grad_(True)] + [sims.get(n).clone().requires_grad_(True) for n in names]
    assert torch.autograd.gradcheck(fn, inputs, fast_mode=True)


def test_without_positives_and_negatives_is_plain_infonce():
    sims = make_sims(LAYOUTS["triple"])
    plain = Similarities(i2t=sims.i2t, image_ids=sims.image_ids)
    ours = build_loss("ascl", tau=0.07, use_positives=False, use_negatives=False)(plain).loss
    assert ours.item() == pytest.approx(build_loss("convse", tau=0.07)(plain).loss.item(), rel=1e-12)


def test_requires_params_and_registry():
    assert {"ascl", "ascl_triplet"} <= set(LOSSES)
    assert loss_param_names("ascl") == ("tau", "use_positives", "use_negatives")
    assert loss_param_names("ascl_triplet") == ("margin", "use_positives", "use_negatives")
    assert build_loss("ascl").requires == ("i2t", "image_ids", "i2t_generated_neg", "i2t_pos", "i2t_pos_generated_neg")
    assert build_loss("ascl", use_positives=False).requires == ("i2t", "image_ids", "i2t_generated_neg")
    assert build_loss("ascl", use_negatives=False).requires == ("i2t", "image_ids", "i2t_pos")
    with pytest.raises(ValueError, match="i2t_pos"):
        build_loss("ascl")(Similarities(i2t=torch.eye(3), image_ids=torch.arange(3)))
    for params in ({"tau": 0}, {"tau": -1.0}, {"tau": float("nan")}, {"use_positives": "yes"}, {"use_negatives": 1}):
        with pytest.raises(ValueError):
            build_loss("ascl", **params)
    with pytest.raises(ValueError, match="margin"):
        build_loss("ascl_triplet", margin=-0.1)


# --------------------------------------------------------------------------- generators


def embeddings(B=6, L=9, E=5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x, lengths = torch.randn(B, L, E, generator=gen), torch.tensor([9, 2, 3, 5, 7, 4][:B])
    x[torch.arange(L)[None, :] >= lengths[:, None]] = 0.0
    return x, lengths


def span_of(lengths, L):
    pos = torch.arange(L)[None, :]
    return (pos >= 1) & (pos < (lengths - 1).clamp(min=1)[:, None])


@pytest.mark.parametrize("kind", NEGATIVE_GENERATORS)
def test_negative_generators_are_deterministic_and_touch_only_the_span(kind):
    x, lengths = embeddings()
    make = lambda seed: NegativeGenerator(kind)(x, lengths, torch.Generator().manual_seed(seed))  # noqa: E731
    a, b, c = make(1), make(1), make(2)
    assert torch.equal(a, b) and not torch.equal(a, c)
    outside = ~span_of(lengths, x.shape[1])
    assert torch.equal(a[outside], x[outside])  # frame tokens and padding unchanged


def test_shuffle_permutes_only_real_tokens():
    x, lengths = embeddings()
    out = NegativeGenerator("shuffle")(x, lengths, torch.Generator().manual_seed(0))
    span = span_of(lengths, x.shape[1])
    for b in range(len(x)):
        original, shuffled = x[b][span[b]], out[b][span[b]]
        assert torch.equal(torch.sort(original, 0).values, torch.sort(shuffled, 0).values)
    assert not torch.equal(out[0], x[0])


def test_cutoffs_zero_exactly_one_row_or_column():
    x, lengths = embeddings()
    span = span_of(lengths, x.shape[1])
    rows = NegativeGenerator("token_cutoff")(x, lengths, torch.Generator().manual_seed(0))
    cols = NegativeGenerator("feature_cutoff")(x, lengths, torch.Generator().manual_seed(0))
    for b in range(len(x)):
        zero_rows = (rows[b] != x[b]).any(-1)
        assert int(zero_rows.sum()) == int(span[b].sum() > 0) and (rows[b][zero_rows] == 0).all()
        changed = cols[b] != x[b]
        if span[b].any():
            column = changed.any(0).nonzero().flatten()
            assert len(column) == 1 and (cols[b][span[b]][:, column] == 0).all()
            assert changed[:, column].flatten().tolist() == span[b].tolist()


def test_dropout_rate_and_gaussian_scale():
    x = torch.randn(64, 40, 50, generator=torch.Generator().manual_seed(0))
    lengths = torch.full((64,), 40)
    span = span_of(lengths, 40)
    out = NegativeGenerator("dropout", p=0.3)(x, lengths, torch.Generator().manual_seed(1))
    zeros = (out[span] == 0).float().mean().item()
    assert zeros == pytest.approx(0.3, abs=0.01)
    kept = out[span] != 0
    torch.testing.assert_close(out[span][kept], x[span][kept] / 0.7)
    noisy = NegativeGenerator("gaussian", sigma=0.5)(x, lengths, torch.Generator().manual_seed(1))
    assert (noisy - x)[span].std().item() == pytest.approx(0.5, rel=0.02)
    assert torch.equal(NegativeGenerator("gaussian", sigma=0.0)(x, lengths), x)


def test_mixture_picks_one_elementary_generator_per_sample():
    x, lengths = embeddings()
    out = NegativeGenerator("mixture")(x, lengths, torch.Generator().manual_seed(5))
    replay = torch.Generator().manual_seed(5)  # the same stream: choices, then each kind
    choice = (torch.rand(len(x), generator=replay) * len(MIXTURE_OF)).long()
    single = [NegativeGenerator("mixture").perturb(kind, x, lengths, replay) for kind in MIXTURE_OF]
    for b in range(len(x)):
        assert torch.equal(out[b], single[int(choice[b])][b])


def test_generator_settings_are_validated():
    for params in ({"sigma": -1.0}, {"p": -0.1}, {"p": 1.5}, {"cutoff_rows": -1}, {"cutoff_cols": 1.5}):
        with pytest.raises(ValueError):
            NegativeGenerator("mixture", **params)
    with pytest.raises(ValueError, match="allowed: gaussian, shuffle"):
        NegativeGenerator("blur")
    with pytest.raises(ValueError, match="allowed: concat, truncate, mixture"):
        PositiveGenerator("reverse")
    torch.nn.Sequential(NegativeGenerator(), PositiveGenerator()).apply(lambda module: None)  # nn.Module.apply intact


def padded(rows):
    out = torch.zeros(len(rows), max(map(len, rows)), dtype=torch.long)
    for b, r in enumerate(rows):
        out[b, : len(r)] = torch.tensor(r)
    return out, torch.tensor([len(r) for r in rows])


@pytest.mark.parametrize("start,end", [(1, 2), (101, 102)])  # BiGRU <start>/<end>, BERT [CLS]/[SEP]
def test_positives_concatenate_or_truncate_keeping_the_frame(start, end):
    rows = [[start, 10, 11, 12, end], [start, 20, 21, 22, 23, end], [start, 30, end], [start, 40, 41, end]]
    tokens, lengths = padded(rows)
    image_ids = torch.tensor([7, 8, 7, 9])  # captions 0 and 2 show the same image
    out, out_len, kinds = PositiveGenerator("concat", start, end)(tokens, lengths, image_ids)
    got = [out[b, : out_len[b]].tolist() for b in range(4)]
    assert kinds.tolist() == [CONCAT, TRUNCATE, CONCAT, TRUNCATE]  # images 8, 9: one caption -> type III
    assert sorted(got[0][1:-1]) == [10, 11, 12, 30] and got[0][0] == start and got[0][-1] == end
    assert got[1] == [start, 20, 21, end] and got[3] == [start, 40, end]
    assert (out[1, out_len[1] :] == 0).all()
    short, short_len, kinds = PositiveGenerator("truncate", start, end)(tokens, lengths, image_ids)
    assert [short[b, : short_len[b]].tolist() for b in range(4)] == [
        [start, 10, 11, end],
        [start, 20, 21, end],
        [start, 30, end],
        [start, 40, end],
    ]
    pool = {9: [[start, 50, 51, end]]}
    out, out_len, kinds = PositiveGenerator("concat", start, end, max_len=5)(
        tokens, lengths, image_ids, torch.Generator().manual_seed(0), pool=pool
    )
    assert kinds[3] == CONCAT and out[3, : out_len[3]].tolist() in ([start, 40, 41, 50, end], [start, 50, 51, 40, end])
    assert int(out_len.max()) <= 5 and all(out[b, out_len[b] - 1] == end for b in range(4))


def test_truncation_keeps_whole_words_and_positives_are_deterministic():
    tokens, lengths = padded([[1, 10, 90, 11, 12, 91, 2]])  # words: 10##90, 11, 12##91
    out, n, _ = PositiveGenerator("truncate", continuation_ids={90, 91})(tokens, lengths, torch.tensor([0]))
    assert out[0, : n[0]].tolist() == [1, 10, 90, 11, 2]
    tokens, lengths = padded([[1, 10 + b, 11, 12, 2] for b in range(8)])
    ids = torch.tensor([0, 0, 0, 1, 1, 2, 3, 3])
    run = lambda seed: PositiveGenerator()(tokens, lengths, ids, torch.Generator().manual_seed(seed))  # noqa: E731
    assert all(torch.equal(a, b) for a, b in zip(run(3), run(3)))
    assert any(not torch.equal(run(3)[0], run(s)[0]) for s in range(4, 9))


# --------------------------------------------------------------------------- fusion scorer


def fusion_inputs(n_images=3, n_captions=4, K=4, L=6, D=8, G=5, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    regions = torch.randn(n_images, K, D, generator=gen, dtype=dtype)
    globals_ = torch.randn(n_images, G, generator=gen, dtype=dtype)
    words = torch.randn(n_captions, L, D, generator=gen, dtype=dtype)
    lengths = torch.randint(1, L + 1, (n_captions,), generator=gen)
    lengths[0] = L
    return regions, globals_, words, lengths


def make_fusion(D=8, G=5, heads=2, u1=0.6, seed=0, **kw):
    torch.manual_seed(seed)
    return HierarchicalFusion(D, G, heads=heads, u1=u1, **kw).double()


def cos(a, b):
    return float(a @ b / (a.norm() * b.norm()))


@torch.no_grad()
def reference_score(m: HierarchicalFusion, V, G, W, length) -> float:
    """One pair from eq. 1-4 with explicit heads and an explicit Z^O (no folding, no batching)."""
    W = W[:length]
    dh = m.embed_dim // m.heads

    def multihead(att, X, Y):
        heads = []
        for h in range(m.heads):
            zx = att.query.weight.T[:, h * dh : (h + 1) * dh]
            zy = att.key_value.weight.T[:, h * dh : (h + 1) * dh]
            heads.append(torch.softmax((X @ zx) @ (Y @ zy).T / math.sqrt(dh), dim=1) @ (Y @ zy))
        return torch.cat(heads, dim=1) @ att.out.weight.T  # Concat(head_1..H) Z^O

    w_star, v_star = multihead(m.i2t, V, W), multihead(m.t2i, W, V)
    local = sum(cos(V[i], w_star[i]) for i in range(len(V))) / (2 * len(V)) + sum(
        cos(W[j], v_star[j]) for j in range(length)
    ) / (2 * length)
    w_g = m.x_w.weight @ w_star.mean(0)
    v_g1, v_g2 = m.x_v.weight @ v_star.mean(0), m.x_g.weight @ G
    t = torch.sigmoid(m.gate.weight @ torch.cat([v_g1, v_g2]) + m.gate.bias)
    return m.u1 * local + (1 - m.u1) * cos(t * v_g1 + (1 - t) * v_g2, w_g)


def test_fusion_scores_equal_the_per_pair_reference():
    regions, globals_, words, lengths = fusion_inputs()
    m = make_fusion()
    with torch.no_grad():
        scores = m.pair_scores(regions, globals_, words, lengths)
    expected = torch.tensor(
        [
            [reference_score(m, regions[i], globals_[i], words[j], int(lengths[j])) for j in range(len(words))]
            for i in range(len(regions))
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(scores, expected, rtol=1e-10, atol=1e-12)


def test_permuting_captions_permutes_the_score_matrix_and_padding_never_matters():
    regions, globals_, words, lengths = fusion_inputs(n_images=4, n_captions=7)
    m = make_fusion()
    perm = torch.randperm(7, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        scores = m.pair_scores(regions, globals_, words, lengths)
        torch.testing.assert_close(m.pair_scores(regions, globals_, words[perm], lengths[perm]), scores[:, perm])
        garbage = words.clone()
        garbage[torch.arange(words.shape[1])[None, :] >= lengths[:, None]] = 1e3
        torch.testing.assert_close(m.pair_scores(regions, globals_, garbage, lengths), scores)


@pytest.mark.parametrize("budget", [1, 3000, None])
def test_a_pairs_score_does_not_depend_on_its_shard(budget):
    regions, globals_, words, lengths = fusion_inputs(n_images=5, n_captions=9)
    m = make_fusion()
    costs = torch.full((9,), m.pair_cost(regions.shape[1], int(lengths.max())))
    assert len(shard_plan(5, costs, 1)) == 45  # budget 1: one pair per shard
    with torch.no_grad():
        big = m.pair_scores(regions, globals_, words, lengths, max_elements=10**9)
        torch.testing.assert_close(
            m.pair_scores(regions, globals_, words, lengths, max_elements=budget), big, rtol=1e-12, atol=1e-12
        )
    scores = m.pair_scores(regions.requires_grad_(True), globals_, words, lengths, max_elements=3000)
    scores.sum().backward()
    assert regions.grad is not None and torch.isfinite(regions.grad).all()


def test_without_fusion_is_a_cosine_of_self_pooled_globals():
    regions, globals_, words, lengths = fusion_inputs()
    m = make_fusion(cross_attention=False)
    assert not hasattr(m, "i2t") and not hasattr(m, "t2i")
    scores = m.pair_scores(regions, globals_, words, lengths)
    mean_words = torch.stack([words[j, : lengths[j]].mean(0) for j in range(len(words))])
    w_g = F.normalize(m.x_w(mean_words), dim=-1)
    v_g1, v_g2 = m.x_v(regions.mean(1)), m.x_g(globals_)
    t = torch.sigmoid(m.gate(torch.cat([v_g1, v_g2], -1)))
    torch.testing.assert_close(scores, F.normalize(t * v_g1 + (1 - t) * v_g2, dim=-1) @ w_g.T)
    for params in ({"u1": 1.5}, {"u1": -0.1}, {"heads": 3}, {"cross_attention": "no"}):
        with pytest.raises(ValueError):
            make_fusion(**params)


def test_shard_plan_is_the_xattn_plan():
    """The generic helper reproduces InteractionModel.pair_scores shard for shard (the proposed refactor)."""
    torch.manual_seed(0)
    similarity = CrossAttentionSimilarity(8, 4)
    model = InteractionModel(torch.nn.Identity(), torch.nn.Identity(), similarity)
    calls = []
    similarity.register_forward_hook(lambda mod, args, out: calls.append((args[0].shape[0], args[1].shape[0])))
    regions = F.normalize(torch.randn(7, 5, 8), dim=-1)
    words, lengths = F.normalize(torch.randn(11, 6, 8), dim=-1), torch.randint(1, 7, (11,))
    width = max(8, 4, 5)
    for budget in (0, 1, 50, 200, 700, 10**6, None):
        calls.clear()
        expected = model.pair_scores(regions, words, lengths, max_elements=budget)
        plan = shard_plan(7, lengths * width, budget)
        assert calls == [(i.stop - i.start, c.stop - c.start) for i, c in plan]
        block = lambda i, c: similarity(regions[i], words[c], lengths[c])  # noqa: E731
        ours = sharded_pair_scores(block, 7, lengths * width, budget)
        torch.testing.assert_close(ours, expected)


def aligned_fusion(D, G, sharpness=8.0):
    """Identity-like parameters with sharp attention: the state that training would push a leaky
    evaluation toward (each word picks its most similar region and vice versa)."""
    m = HierarchicalFusion(D, G, heads=1, u1=0.0)
    with torch.no_grad():
        eye = torch.eye(D)
        for attention in (m.i2t, m.t2i):
            attention.query.weight.copy_(eye * sharpness)
            attention.key_value.weight.copy_(eye * sharpness)
            attention.out.weight.copy_(eye / sharpness)
        m.x_w.weight.copy_(eye), m.x_v.weight.copy_(eye), m.x_g.weight.zero_(), m.gate.weight.zero_()
        m.gate.bias.fill_(10.0)
    return m


def test_a_partner_leaking_scorer_beats_chance_and_ours_does_not():
    n, cpi, K, L, D, G = 50, 5, 3, 4, 16, 8
    gen = torch.Generator().manual_seed(0)
    regions = F.normalize(torch.randn(n, K, D, generator=gen), dim=-1)  # random: nothing to learn
    words = F.normalize(torch.randn(n * cpi, L, D, generator=gen), dim=-1)
    lengths = torch.randint(2, L + 1, (n * cpi,), generator=gen)
    globals_ = torch.randn(n, G, generator=gen)
    m = aligned_fusion(D, G)
    with torch.no_grad():
        ours = m.pair_scores(regions, globals_, words, lengths, max_elements=1 << 16)
        # The reference code's evaluation: each image's global embedding from its ground-truth caption,
        # each caption's from its ground-truth image, then one matmul.
        one = lambda i, j: (regions[i : i + 1], globals_[i : i + 1], words[j : j + 1], lengths[j : j + 1])  # noqa: E731
        parts = lambda i, j: m.pair_parts(*one(i, j))  # noqa: E731
        v_g = torch.cat([parts(i, i * cpi).v_global[:, 0] for i in range(n)])
        w_g = torch.cat([parts(j // cpi, j).w_global[0] for j in range(n * cpi)])
        leaky = F.normalize(v_g, dim=-1) @ F.normalize(w_g, dim=-1).T
    negatives = (n - 1) * cpi  # chance: positives placed at random among the negatives
    i2t = [100 * (1 - math.prod((negatives - t) / (negatives + cpi - t) for t in range(k))) for k in (1, 5, 10)]
    chance = sum(i2t) + sum(100 * k / n for k in (1, 5, 10))
    table = lambda s: evaluate(lambda a, b: s[a, b], n, "all", cpi)  # noqa: E731
    assert table(ours).rsum < 1.6 * chance
    assert table(leaky).rsum > 2.2 * chance
