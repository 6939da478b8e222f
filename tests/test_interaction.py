"""The cross-attention interaction model (xattn, DBL eq. 1-2): batched scores, masks, sharded
evaluation, training end to end."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from itrlab.assembly import load_experiment
from itrlab.data import Vocabulary, open_precomp
from itrlab.errors import ConfigError
from itrlab.eval import evaluate, reference_evaluate
from itrlab.methods import build_method
from itrlab.methods.xattn.method import InteractionMethod
from itrlab.models.interaction import CrossAttentionSimilarity, InteractionModel, pair_scores
from itrlab.models.text_factory import TextEncoderSpec
from itrlab.train import run_experiment


@torch.no_grad()
def reference_score(regions: torch.Tensor, words: torch.Tensor, length: int, head: CrossAttentionSimilarity) -> float:
    """One pair, straight from DBL eq. 1-2, with explicit loops over words and regions."""
    V, T = regions, words[:length]
    n_words, n_regions = T.shape[0], V.shape[0]
    M = torch.zeros(n_words, n_regions, dtype=torch.float64)
    for l in range(n_words):
        for k in range(n_regions):
            M[l, k] = max(float(T[l] @ V[k]), 0.0)  # [T Vᵀ]_+
    for k in range(n_regions):  # norm_T: over the words
        M[:, k] = M[:, k] / max(math.sqrt(float((M[:, k] ** 2).sum())), 1e-12)
    W1, b1 = head.sim.weight.double(), head.sim.bias.double()
    W2, b2 = head.score.weight.double(), head.score.bias.double()
    A = []
    for l in range(n_words):
        weights = torch.exp(head.lambda_ * M[l]) / torch.exp(head.lambda_ * M[l]).sum()  # softmax_V
        v_att = sum(weights[k] * V[k] for k in range(n_regions))  # v'_l
        a = W1 @ (T[l] - v_att) ** 2 + b1
        A.append(a / max(float(a.norm()), 1e-12))
    mean = torch.stack(A).mean(0)  # Ā
    return float(torch.tanh(W2 @ mean + b2))


def unit(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.normalize(x, dim=-1)


def random_features(n_images=3, n_captions=4, regions=5, max_len=6, dim=8, seed=0, positive=False):
    generator = torch.Generator().manual_seed(seed)
    V = torch.randn(n_images, regions, dim, generator=generator, dtype=torch.float64)
    T = torch.randn(n_captions, max_len, dim, generator=generator, dtype=torch.float64)
    if positive:  # all cosines > 0: no region is clipped away for every word
        V, T = V.abs(), T.abs()
    lengths = torch.randint(1, max_len + 1, (n_captions,), generator=generator)
    lengths[0] = max_len
    return unit(V), unit(T), lengths


def make_head(dim=8, sim_dim=4, seed=0, lambda_=9.0) -> CrossAttentionSimilarity:
    """A head with every parameter random (the biases too, which start at zero)."""
    torch.manual_seed(seed)
    head = CrossAttentionSimilarity(dim, sim_dim, lambda_).double()
    with torch.no_grad():
        for parameter in head.parameters():
            parameter.normal_(0.0, 0.5)
    return head


@pytest.mark.parametrize("positive", [False, True])
def test_pair_scores_equal_per_pair_loop(positive):
    V, T, lengths = random_features(positive=positive)
    head = make_head()
    with torch.no_grad():
        batched = head(V, T, lengths)
    expected = torch.tensor(
        [[reference_score(V[i], T[j], int(lengths[j]), head) for j in range(len(T))] for i in range(len(V))],
        dtype=torch.float64,
    )
    assert batched.shape == (3, 4) and batched.dtype == torch.float64
    torch.testing.assert_close(batched, expected, rtol=1e-10, atol=1e-12)
    assert (batched.abs() < 1).all() and batched.std() > 1e-3
    with_grad = head(V, T, lengths)  # the autograd path (no in-place updates) computes the same
    assert with_grad.requires_grad
    torch.testing.assert_close(with_grad.detach(), batched, rtol=1e-12, atol=1e-14)


def test_lambda_matters():
    V, T, lengths = random_features()
    with torch.no_grad():
        assert not torch.allclose(make_head(lambda_=9.0)(V, T, lengths), make_head(lambda_=1.0)(V, T, lengths))


def test_padding_words_do_not_change_scores():
    V, T, lengths = random_features()
    head = make_head()
    padded = torch.cat([T, unit(torch.randn(T.shape[0], 3, T.shape[2], dtype=torch.float64))], dim=1)
    garbage = T.clone()
    for j, n in enumerate(lengths.tolist()):
        garbage[j, n:] = unit(torch.randn(T.shape[1] - n, T.shape[2], dtype=torch.float64)) * 5
    with torch.no_grad():
        base = head(V, T, lengths)
        torch.testing.assert_close(head(V, padded, lengths), base, rtol=0, atol=1e-12)
        torch.testing.assert_close(head(V, garbage, lengths), base, rtol=0, atol=1e-12)
        trimmed = [head(V, T[j : j + 1, : int(lengths[j])], lengths[j : j + 1]) for j in range(len(T))]
        torch.testing.assert_close(torch.cat(trimmed, dim=1), base, rtol=0, atol=1e-12)


def test_sharded_pair_scores_equal_one_shot():
    torch.manual_seed(1)
    model = InteractionModel.build(
        feature_dim=8, vocab_size=20, embed_dim=8, sim_dim=4, text=TextEncoderSpec(word_dim=6)
    ).double()
    V, T, lengths = random_features(n_images=7, n_captions=11, max_len=9)
    with torch.no_grad():
        whole = model.pair_scores(V, T, lengths, max_elements=None)
        for budget in (1, 50, 9 * 8 * 7, 9 * 8 * 7 * 3, 10**9):
            torch.testing.assert_close(
                model.pair_scores(V, T, lengths, max_elements=budget), whole, rtol=1e-12, atol=1e-12
            )


def test_gradcheck_pair_scores():
    V, T, lengths = random_features(n_images=2, n_captions=2, regions=3, max_len=4, dim=5, positive=True)
    head = make_head(dim=5, sim_dim=3)
    params = [
        p.detach().clone().requires_grad_()
        for p in (head.sim.weight, head.sim.bias, head.score.weight, head.score.bias)
    ]

    def fn(regions, words, w1, b1, w2, b2):
        return pair_scores(
            regions, words, lengths, lambda_=9.0, sim_weight=w1, sim_bias=b1, score_weight=w2, score_bias=b2
        )

    assert torch.autograd.gradcheck(fn, (V.clone().requires_grad_(), T.clone().requires_grad_(), *params))


# ----------------------------------------------------------------------------- the method


def tiny_setup(root: Path, *overrides: str):
    config = load_experiment(
        "xattn_synthetic_tiny",
        [f"dataset.root={root}", "tracking.enabled=false", "model.embed_dim=8", "method.sim_dim=4", *overrides],
    )
    split = open_precomp(root, "test")
    vocab = Vocabulary.build(split.captions)
    torch.manual_seed(0)
    method = build_method(config, vocab_size=len(vocab), feature_dim=split.feature_dim)
    return config, method, split, vocab


def test_score_fn_blocks_equal_pair_scores(precomp_dir):
    _, method, split, vocab = tiny_setup(precomp_dir)
    assert isinstance(method, InteractionMethod)
    method.shard_elements = 200  # force several shards per block
    regions, words, lengths = method.encode_split(split, vocab, batch_size=7)
    assert regions.shape == (10, 4, 8) and words.shape[:2] == (50, int(lengths.max()))
    with torch.no_grad():
        full = method.model.pair_scores(regions, words, lengths, max_elements=None)
    score_fn = method.score_fn(split, vocab, batch_size=7)
    for images, captions in [
        (slice(0, 10), slice(0, 50)),
        (slice(2, 5), slice(11, 37)),
        (slice(9, 10), slice(0, 1)),
        (slice(0, 3), slice(45, 50)),
    ]:
        torch.testing.assert_close(score_fn(images, captions), full[images, captions], rtol=1e-5, atol=1e-6)


def test_training_batch_scores_match_split_scores(precomp_dir):
    """The training path (B x B from token ids) and the evaluation path give the same scores."""
    _, method, split, vocab = tiny_setup(precomp_dir)
    from itrlab.data import CaptionDataset, collate

    dataset = CaptionDataset(split, vocab)
    batch = collate([dataset[j] for j in (0, 7, 13, 26, 49)])
    with torch.no_grad():
        sims = method.batch_similarities(batch)
    regions, words, lengths = method.encode_split(split, vocab, batch_size=16)
    expected = method.model.pair_scores(regions[batch.image_ids], words[batch.caption_ids], lengths[batch.caption_ids])
    torch.testing.assert_close(sims.i2t, expected, rtol=1e-5, atol=1e-6)
    output = method(batch)
    assert output.loss.requires_grad and torch.isfinite(output.loss)


def test_evaluate_split_through_itrlab_eval(precomp_dir):
    _, method, split, vocab = tiny_setup(precomp_dir)
    method.shard_elements = 300
    score_fn = method.score_fn(split, vocab, batch_size=16)
    seen = np.full((split.n_images, split.n_captions), np.nan, dtype=np.float32)

    def recording(images: slice, captions: slice) -> torch.Tensor:
        block = score_fn(images, captions)
        seen[images, captions] = block.numpy()
        return block

    table = evaluate(recording, split.n_images, protocol="all", image_chunk=3)
    assert not np.isnan(seen).any()  # every entry scored, each exactly once by construction of the evaluator
    np.testing.assert_allclose(seen, score_fn(slice(0, 10), slice(0, 50)).numpy(), rtol=1e-5, atol=1e-6)
    # The same matrix ranked by the per-query reference: one-hot "embeddings" give S = I @ seen.
    reference = reference_evaluate(np.eye(split.n_images, dtype=np.float32), seen.T.copy(), protocol="all")
    got, want = table.to_dict(), reference.to_dict()
    assert got.pop("md") == pytest.approx(want.pop("md"), rel=1e-4, abs=1e-7)
    assert got == want
    assert math.isfinite(table.rsum) and 0 <= table.rsum <= 600


def test_config_rejects_what_the_model_cannot_use(precomp_dir):
    with pytest.raises(ConfigError, match="projection_hidden"):
        tiny_setup(precomp_dir, "model.projection_hidden=16")
    with pytest.raises(ConfigError, match="pooling"):
        tiny_setup(precomp_dir, "model.text.pooling=gpo")
    with pytest.raises(ConfigError, match="attention_lambda"):
        tiny_setup(precomp_dir, "method.attention_lambda=0")


def test_one_epoch_training_gives_a_finite_table(tmp_path):
    config = load_experiment(
        "xattn_synthetic_tiny", [f"dataset.root={tmp_path / 'tiny'}", "tracking.enabled=false", "train.epochs=1"]
    )
    result = run_experiment(config, tmp_path / "run")
    assert result.best_epoch == 1
    assert math.isfinite(result.test.rsum) and result.test.rsum > 0
