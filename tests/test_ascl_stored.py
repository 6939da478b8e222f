"""AsCL on stored text features (``model.text.encoder: precomp``): the positives cut and join
stored states exactly, the negatives perturb them on the right scale, no perturbation that the states cannot
show, and every Table II row trains on them (docs/papers/ascl.md#stored-text-features)."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import ascl_stored_config, write_precomp, write_text_features
from itrlab.data import CaptionDataset, collate, open_precomp
from itrlab.data.text_features import TextFeatures
from itrlab.errors import ConfigError
from itrlab.methods import BuildContext, build_method
from itrlab.methods.ascl.stored_positives import StatePool, content_ids, stored_positives
from itrlab.methods.ascl.text_augment import MIXTURE_OF, NegativeGenerator, PositiveGenerator
from itrlab.train import run_experiment

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TABLE_II = {
    "AsCL": [],
    "w/o Pos": ["loss.use_positives=false"],
    "w/o Neg": ["loss.use_negatives=false"],
    "w/o P&N": ["loss.use_positives=false", "loss.use_negatives=false"],
    "w/o MF": ["method.cross_attention=false"],
    "w triplet": ["loss={name: ascl_triplet, margin: 0.2}"],
}


@pytest.fixture
def stored_dir(tmp_path):
    root = write_precomp(tmp_path / "precomp", {"train": 40, "dev": 10, "test": 10})
    write_text_features(root, width=12)
    return root


def stored_method(root, *overrides):
    config = ascl_stored_config(root, *overrides)
    data = open_precomp(root, "train")
    features = TextFeatures(root / "text")
    torch.manual_seed(0)
    method = build_method(config, BuildContext.of(vocab=features, splits={"train": data}))
    return method, CaptionDataset(data, features, max_len=config.model.text.max_len)


# ----------------------------------------------------------------------------- end to end


def test_one_epoch_on_stored_text_features_trains_and_evaluates(stored_dir, tmp_path):
    config = ascl_stored_config(stored_dir, "train.epochs=1")
    result = run_experiment(config, tmp_path / "run")
    assert result.best_epoch == 1 and math.isfinite(result.test.rsum) and result.test.rsum > 0


@pytest.mark.parametrize("row", sorted(TABLE_II))
def test_every_table_ii_row_takes_a_step_on_stored_states(stored_dir, row):
    method, dataset = stored_method(stored_dir, *TABLE_II[row])
    output = method(collate([dataset[j] for j in range(0, 64, 2)]))
    output.loss.backward()
    assert torch.isfinite(output.loss)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in method.parameters())
    if row in ("AsCL", "w/o Pos", "w/o MF", "w triplet"):  # type-I negatives scored: their shares are logged
        assert 0 <= float(output.parts["own_outscores"]) <= 1
        assert 0 <= float(output.parts["dropped_generated"]) <= 1


# ----------------------------------------------------------------------------- positives on states


def numbered_states(lengths, width=3, first_caption=0):
    """States whose entries name (caption, position): row p of caption c is (c, p, 0, ...)."""
    states = torch.zeros((len(lengths), max(lengths), width))
    for row, n in enumerate(lengths):
        states[row, :n, 0] = first_caption + row
        states[row, :n, 1] = torch.arange(n, dtype=torch.float32)
    return states


def rows(tensor, n):
    return [tuple(int(v) for v in r[:2]) for r in tensor[:n]]


def test_type_three_keeps_the_frame_and_the_first_half_of_the_content_states():
    lengths = torch.tensor([7, 4, 3])  # 5, 2 and 1 content states between [CLS] and [SEP]
    states = numbered_states(lengths.tolist())
    out, out_lengths = stored_positives(
        PositiveGenerator("truncate", None, None),
        states,
        lengths,
        torch.tensor([0, 1, 2]),
        torch.tensor([0, 1, 2]),
        None,
        None,
        stride=8,
    )
    assert out_lengths.tolist() == [5, 3, 3]
    assert rows(out[0], 5) == [(0, 0), (0, 1), (0, 2), (0, 3), (0, 6)]  # [CLS], ⌈5/2⌉ = 3 words, [SEP]
    assert rows(out[1], 3) == [(1, 0), (1, 1), (1, 3)]
    assert rows(out[2], 3) == [(2, 0), (2, 1), (2, 2)]
    assert torch.equal(out[1, 3:], torch.zeros_like(out[1, 3:]))  # padding


def test_type_two_joins_two_distinct_captions_of_the_image_from_the_batch_and_the_pool():
    cpi, stride = 5, 10
    split_lengths = [6, 5, 7, 4, 6, 5, 5, 5, 5, 5]  # image 0: captions 0-4; image 1: 5-9

    class Split:  # the training split's stored states, as SplitText gives them
        def __len__(self):
            return len(split_lengths)

        def kept(self, c):
            return split_lengths[c]

        def __getitem__(self, c):
            return numbered_states([split_lengths[c]], first_caption=c)[0]

    pool = StatePool(Split(), cpi, stride)
    assert pool.get(0)[1] == content_ids(1, 5, stride) == [12, 13, 14]
    batch_captions = torch.tensor([2, 7])
    lengths = torch.tensor([split_lengths[2], split_lengths[7]])
    states = torch.zeros((2, 7, 3))
    states[0, :7] = Split()[2]
    states[1, :5] = Split()[7]
    for seed in range(20):
        out, out_lengths = stored_positives(
            PositiveGenerator("concat", None, None),
            states,
            lengths,
            torch.tensor([0, 1]),
            batch_captions,
            torch.Generator().manual_seed(seed),
            pool,
            stride,
        )
        for row, image in enumerate((0, 1)):
            got = rows(out[row], int(out_lengths[row]))
            first, second = got[0][0], got[-1][0]
            assert first != second and {first, second} <= set(range(image * cpi, (image + 1) * cpi))
            body = [(first, p) for p in range(1, split_lengths[first] - 1)]
            body += [(second, p) for p in range(1, split_lengths[second] - 1)]
            assert got == [(first, 0), *body, (second, split_lengths[second] - 1)]


# ----------------------------------------------------------------------------- negatives on states


def test_sigma_in_std_units_scales_with_what_it_perturbs_and_spares_the_frame_and_padding():
    x = torch.randn(4, 9, 6)
    lengths = torch.tensor([9, 5, 3, 7])
    relative = NegativeGenerator("gaussian", sigma=0.3, sigma_units="std")
    noise = relative(x, lengths, torch.Generator().manual_seed(3)) - x
    noise_scaled = relative(20 * x, lengths, torch.Generator().manual_seed(3)) - 20 * x
    torch.testing.assert_close(noise_scaled, 20 * noise)  # the same draws at 20 times the scale
    _, _, span = relative.span(lengths, 9)
    assert torch.equal(noise[~span], torch.zeros_like(noise[~span]))  # [CLS], [SEP] and padding untouched
    absolute = NegativeGenerator("gaussian", sigma=0.3)(20 * x, lengths, torch.Generator().manual_seed(3)) - 20 * x
    torch.testing.assert_close(absolute, noise / x[span].std())  # absolute: σ·N(0, 1) whatever the scale


def test_stored_states_refuse_a_shuffle_and_the_mixture_draws_from_the_other_four(stored_dir):
    with pytest.raises(ConfigError) as err:
        ascl_stored_config(stored_dir, "method.generator=shuffle")
    assert err.value.field == "method.generator"
    method, _ = stored_method(stored_dir)
    negatives = method.generators.negatives
    assert negatives.mixture_of == tuple(m for m in MIXTURE_OF if m != "shuffle") and negatives.protect_ends
    assert method.generators.stored_stride == ascl_stored_config(stored_dir).model.text.max_len + 1


def test_the_type_two_pool_holds_the_training_splits_stored_states(stored_dir):
    method, dataset = stored_method(stored_dir)  # build_method prepares the method on the training split
    pool = method.generators.pool
    assert isinstance(pool, StatePool) and len(pool.get(3)) == dataset.split.captions_per_image
    torch.testing.assert_close(pool.states(17), dataset[17][1].float())
