"""The AsCL method: one epoch end to end, leak-free evaluation at the method level, the generated
samples it scores, config errors before anything starts, and AsCL inside DBL's cooperative schemes."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch

from itrlab.assembly import load_experiment
from itrlab.data import CaptionDataset, Vocabulary, collate, open_precomp
from itrlab.errors import ConfigError
from itrlab.methods import BuildContext, build_method
from itrlab.methods.ascl.losses import I2T_GENERATED_NEG, I2T_POS, I2T_POS_GENERATED_NEG
from itrlab.methods.ascl.method import AsclMethod
from itrlab.methods.ascl.networks import length_buckets
from itrlab.methods.dbl import CooperativeMethod
from itrlab.train import run_experiment

GENERATED = (I2T_GENERATED_NEG, I2T_POS, I2T_POS_GENERATED_NEG)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def ascl_config(root, *overrides):
    return load_experiment(
        "ascl_synthetic_tiny",
        [f"dataset.root={root}", "tracking.enabled=false", "model.embed_dim=16", "model.text.word_dim=8", *overrides],
    )


def built(root, *overrides, split="train"):
    """(method prepared on ``split`` of the precomp data at ``root``, that split, its vocabulary)."""
    config = ascl_config(root, *overrides)
    data = open_precomp(root, split)
    vocab = Vocabulary.build(data.captions)
    torch.manual_seed(0)
    method = build_method(config, BuildContext.of(vocab=vocab, splits={"train": data}))
    return method, data, vocab


def batch_of(split, vocab, indices):
    dataset = CaptionDataset(split, vocab)
    return collate([dataset[j] for j in indices])


# ----------------------------------------------------------------------------- end to end


def test_one_epoch_of_tiny_trains_and_evaluates(tmp_path):
    config = load_experiment(
        "ascl_synthetic_tiny",
        [
            f"dataset.root={tmp_path / 'tiny'}",
            "tracking.enabled=false",
            "train.epochs=1",
            "dataset.synthetic.knobs={n_train: 80, n_dev: 20, n_test: 20}",
        ],
    )
    result = run_experiment(config, tmp_path / "run")
    assert result.best_epoch == 1
    assert math.isfinite(result.test.rsum) and result.test.rsum > 0


# ----------------------------------------------------------------------------- leak-free evaluation


def test_permuting_a_splits_captions_permutes_its_score_matrix(precomp_dir):
    method, split, vocab = built(precomp_dir, split="test")
    method.shard_elements = 500  # many shards per block: the layout must not matter
    scores = method.score_fn(split, vocab, batch_size=7)(slice(0, 10), slice(0, 50))
    perm = torch.randperm(50, generator=torch.Generator().manual_seed(3))
    permuted = dataclasses.replace(split, captions=[split.captions[int(p)] for p in perm])
    method.shard_elements = None  # one shard
    again = method.score_fn(permuted, vocab, batch_size=16)(slice(0, 10), slice(0, 50))
    torch.testing.assert_close(again, scores[:, perm], rtol=1e-5, atol=1e-6)
    part = method.score_fn(split, vocab, batch_size=16)(slice(3, 5), slice(17, 29))  # other items, other blocks
    torch.testing.assert_close(part, scores[3:5, 17:29], rtol=1e-5, atol=1e-6)


def test_training_pairs_score_as_evaluation_scores_them(precomp_dir):
    """The batch path (token ids -> B x B) and the split path agree: nothing depends on the batch."""
    method, split, vocab = built(precomp_dir, split="test")
    batch = batch_of(split, vocab, [0, 7, 13, 26, 49])
    with torch.no_grad():
        sims = method.batch_similarities(batch)
    scores = method.score_fn(split, vocab, batch_size=16)(slice(0, 10), slice(0, 50))
    torch.testing.assert_close(sims.i2t, scores[batch.image_ids][:, batch.caption_ids], rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- generated samples


def test_generated_samples_are_scored_and_only_those_the_loss_reads(precomp_dir):
    method, split, vocab = built(precomp_dir)
    batch = batch_of(split, vocab, [0, 5, 10, 15, 20, 25])  # one caption per image
    sims = method.batch_similarities(batch, GENERATED)
    assert all(sims.get(name).shape == (6, 6) for name in GENERATED)
    assert not torch.allclose(sims.get(I2T_GENERATED_NEG), sims.i2t)
    assert int(method.generated_batches) == 1 and "generated_batches" in method.state_dict()
    output = method(batch)
    output.loss.backward()
    assert torch.isfinite(output.loss) and {"L_I", "L_II_III", "dropped_generated"} <= set(output.parts)
    plain, _, _ = built(precomp_dir, "loss.use_positives=false", "loss.use_negatives=false")
    assert set(plain.batch_similarities(batch, plain.loss.requires).extras) == set()
    assert int(plain.generated_batches) == 0


def test_type_two_positives_concatenate_two_captions_of_the_image_from_the_split(precomp_dir):
    method, split, vocab = built(precomp_dir, "method.positives=concat")
    batch = batch_of(split, vocab, [0, 5, 10])  # images 0, 1, 2, one caption each: the pool gives the rest
    tokens, lengths = method.generators.positive_tokens(
        batch.tokens, batch.lengths, batch.image_ids, batch.caption_ids, torch.Generator().manual_seed(0)
    )
    for row, (image, n) in enumerate(zip(batch.image_ids.tolist(), lengths.tolist())):
        words = tokens[row, 1 : n - 1].tolist()
        captions = [vocab.encode(c)[1:-1] for c in split.captions[image * 5 : (image + 1) * 5]]
        assert any(words == a + b for a in captions for b in captions if a != b)
    assert copy.deepcopy(method).generators.pool is method.generators.pool  # data, shared by branch copies


def test_length_buckets_split_where_padding_costs_least():
    runs = length_buckets(torch.tensor([20, 5, 6, 21, 5, 22]))
    assert [sorted(r.tolist()) for r in runs] == [[1, 2, 4], [0, 3, 5]]
    assert len(length_buckets(torch.tensor([10, 11, 12, 12]))) == 1


# ----------------------------------------------------------------------------- config errors


@pytest.mark.parametrize(
    "overrides, field",
    [
        (["loss.tau=0"], "loss.tau"),
        (["loss.tau=-0.05"], "loss.tau"),
        (["method.u1=1.5"], "method.u1"),
        (["method.u1=-0.1"], "method.u1"),
        (["method.generator=blur"], "method.generator"),
        (["method.positives=paraphrase"], "method.positives"),
        (["method.sigma=-1"], "method.sigma"),
        (["method.p=1.5"], "method.p"),
        (["method.noise_site=output"], "method.noise_site"),
        (["method.noise_site=features", "method.generator=shuffle"], "method.generator"),
        (["model.text.pooling=gpo"], "model.text.pooling"),
        (["model.projection_hidden=32"], "model.projection_hidden"),
        (["model.embed_dim=20"], "model.embed_dim"),
        (["loss={name: mvn, tau: 0.1}"], "loss.name"),
    ],
)
def test_bad_settings_fail_at_config_time(tmp_path, overrides, field):
    with pytest.raises(ConfigError) as err:
        ascl_config(tmp_path, *overrides)
    assert err.value.field == field, str(err.value)


# ----------------------------------------------------------------------------- inside DBL


@pytest.mark.parametrize("scenario", ["oss", "mss"])
def test_ascl_inside_dbl_trains_one_step(precomp_dir, scenario):
    coop = f"cooperative={{scenario: {scenario}, strategy: F, gamma: 0.2}}"
    method, split, vocab = built(precomp_dir, coop)
    assert isinstance(method, CooperativeMethod) and all(isinstance(b, AsclMethod) for b in method.branches)
    batch = batch_of(split, vocab, list(range(0, 40, 5)))
    output = method(batch)
    output.loss.backward()
    assert torch.isfinite(output.loss) and {"task", "cooperative", "task_L_I", "task_L_II_III"} <= set(output.parts)
    target, anchor = method.target, method.anchors[0]
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in target.parameters())
    if scenario == "oss":  # the anchor learns from its own AsCL loss; the boosting term sends it nothing
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in anchor.parameters())
        assert int(anchor.generated_batches) == 1
    else:  # a frozen EMA anchor only scores the batch: no generated samples
        assert all(p.grad is None for p in anchor.parameters()) and int(anchor.generated_batches) == 0
