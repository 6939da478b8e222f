"""Text features computed once (``jobs/extract_features.py --text``) and the encoder that reads them
(``model.text.encoder=precomp``): the stored states are the model's own, the folder is a resumable cache
tied to its captions, bad folders stop a run before it trains, and every method that reads token-level
text trains on them.

Speed: the packaged MiniLM cut to one layer (conftest's ``small_bert_dir``) encodes a few hundred short
captions of a small precomp folder.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import conftest
from itrlab.cli import main
from itrlab.data.dataset import pad_tokens
from itrlab.data.text_features import TextFeatures, captions_digest, resolve_folder, tokens_path
from itrlab.data.tokenizers import PretrainedTokenizer, load_text_tokenizer
from itrlab.errors import DataError
from itrlab.extract import text as text_job
from itrlab.extract.ray_tasks import main as extract_main
from itrlab.models.bert_text import BertTextEncoder, load_pretrained_model
from itrlab.models.stored_text import StoredTextEncoder

SIZES = {"train": 40, "dev": 10, "test": 10}  # 300 captions


@pytest.fixture(scope="module")
def stored(tmp_path_factory, small_bert_dir) -> Path:
    """A small precomp folder with its text features (token states and sentence vectors), chunks of 64."""
    root = conftest.write_precomp(tmp_path_factory.mktemp("data") / "precomp", SIZES)
    text_job.extract_text(
        text_job.TextOptions(root, kind="both", model_dir=small_bert_dir, chunk_size=64, progress=False)
    )
    return root


def copy_of(stored: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(stored, tmp_path / "copy"))


def test_stored_states_are_the_models_own(stored, small_bert_dir):
    """Each caption's stored states equal the model's last hidden states for it alone (float16 rounding),
    its sentence vector their unit mean; the folder keeps the captions' digest."""
    features = TextFeatures(stored / "text")
    captions = (stored / "train_caps.txt").read_text().splitlines()
    split = features.open_split("train", captions)
    tokenizer, model = PretrainedTokenizer(small_bert_dir), load_pretrained_model(small_bert_dir).eval()
    sentences = np.load(stored / "text" / "train_sentence.npy")
    for index in (0, 7, 63, 64, 199):  # both sides of a chunk boundary
        ids = torch.tensor([tokenizer.encode(captions[index], max_len=64)])
        with torch.no_grad():
            expected = model(input_ids=ids).last_hidden_state[0]
        assert torch.allclose(split[index], expected, atol=2e-2, rtol=1e-2)
        assert np.allclose(sentences[index], torch.nn.functional.normalize(expected.mean(0), dim=0), atol=2e-3)
    assert features.splits["train"]["captions_sha256"] == captions_digest(captions)
    assert len(split) == 200 and features.width == 384 and set(features.kinds) == {"tokens", "sentence"}


def test_the_stored_encoder_is_the_frozen_bert_encoder_run_ahead_of_time(stored, small_bert_dir):
    """The same projection over stored states and over the frozen transformer gives the same embeddings."""
    torch.manual_seed(0)
    bert = BertTextEncoder(small_bert_dir, embed_dim=16, pooling="mean", freeze=True).eval()
    encoder = StoredTextEncoder(384, 16, "mean").eval()
    encoder.fc.load_state_dict(bert.fc.state_dict())
    captions = (stored / "dev_caps.txt").read_text().splitlines()
    split = TextFeatures(stored / "text").open_split("dev", captions)
    states, lengths = pad_tokens([split[i] for i in range(6)])
    tokenizer = PretrainedTokenizer(small_bert_dir)
    ids, id_lengths = pad_tokens([torch.tensor(tokenizer.encode(c, max_len=64)) for c in captions[:6]])
    assert torch.equal(lengths, id_lengths)
    with torch.no_grad():
        assert torch.allclose(encoder(states, lengths), bert(ids, id_lengths), atol=5e-3)


def test_a_rerun_computes_nothing_and_an_interrupted_run_resumes(stored, tmp_path, small_bert_dir, monkeypatch):
    root = copy_of(stored, tmp_path)
    options = text_job.TextOptions(root, kind="both", model_dir=small_bert_dir, chunk_size=64, progress=False)
    assert text_job.extract_text(options).get("up_to_date") is True
    before = {p.name: p.read_bytes() for p in (root / "text").glob("*.npy")}
    shutil.rmtree(root / "text")
    real_savez, written = np.savez, []

    def interrupting(path, **arrays):
        if len(written) == 2:
            raise KeyboardInterrupt
        real_savez(path, **arrays)
        written.append(path)

    monkeypatch.setattr(text_job.np, "savez", interrupting)
    with pytest.raises(KeyboardInterrupt):
        text_job.extract_text(options)
    assert not (root / "text" / "text.json").exists() and len(list((root / "text" / ".work").glob("*.npz"))) == 2
    monkeypatch.setattr(text_job.np, "savez", real_savez)
    computed = []
    monkeypatch.setattr(text_job.CaptionEncoder, "encode", counting(text_job.CaptionEncoder.encode, computed))
    manifest = text_job.extract_text(options)
    # chunks in split order: dev (50 captions), test (50), train (64, 64, 64, 8): dev and test were kept
    assert manifest["run"]["captions_this_run"] == 200 and len(computed) == 4
    assert {p.name: p.read_bytes() for p in (root / "text").glob("*.npy")} == before
    assert not (root / "text" / ".work").exists()


def counting(function, calls):
    def wrapped(*args, **kwargs):
        calls.append(1)
        return function(*args, **kwargs)

    return wrapped


def test_another_kind_or_length_is_refused_without_overwrite_and_changed_captions_extract_again(
    stored, tmp_path, small_bert_dir, capsys
):
    root = copy_of(stored, tmp_path)
    argv = ["--text-only", "--out", str(root), "--text-model", str(small_bert_dir), "--no-progress"]
    assert extract_main([*argv, "--text", "tokens"]) == 2
    assert "holds text features with other settings (kinds" in capsys.readouterr().err
    lines = (root / "test_caps.txt").read_text().splitlines()
    (root / "test_caps.txt").write_text("\n".join(["a new caption", *lines[1:]]) + "\n")
    assert extract_main([*argv, "--text", "both"]) == 0
    assert "out of date (splits changed)" in capsys.readouterr().err
    features = TextFeatures(root / "text")
    features.check_split("test", (root / "test_caps.txt").read_text().splitlines())


@pytest.mark.parametrize(
    "argv,says",
    [
        (["--text-only"], "--text-only needs --out"),
        (["--text-only", "--out", "x", "--images", "y"], "--images does not apply"),
        (["--text-only", "--out", "x", "--text-max-len", "1"], "--text-max-len: got 1; must be >= 2"),
    ],
)
def test_text_flags_are_checked_before_any_work(argv, says, capsys):
    assert extract_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1


def tiny_config(root: Path, *overrides: str, experiment: str = "vsepp_synthetic_tiny"):
    from itrlab.assembly import load_experiment

    return load_experiment(
        experiment,
        [*on_stored_text(root), "train.epochs=1", "train.batch_size=16", "tracking.enabled=false", *overrides],
    )


def on_stored_text(root: Path, *overrides: str) -> list[str]:
    """The overrides that train on the precomp folder ``root`` with its stored text features."""
    return ["dataset.kind=precomp", f"dataset.root={root}", "model.text.encoder=precomp", *overrides]


def refused(capsys, root: Path, *overrides: str) -> str:
    assert main(["check-config", "-c", "vsepp_synthetic_tiny", *on_stored_text(root, *overrides)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_text_features_of_other_captions_are_refused_before_training(stored, tmp_path, capsys):
    root = copy_of(stored, tmp_path)
    lines = (root / "train_caps.txt").read_text().splitlines()
    (root / "train_caps.txt").write_text("\n".join([lines[1], lines[0], *lines[2:]]) + "\n")  # another order
    err = refused(capsys, root)
    assert "text.json" in err and "split 'train': these text features belong to other captions" in err


def test_a_truncated_or_missing_text_file_is_refused(stored, tmp_path, capsys):
    root = copy_of(stored, tmp_path)
    path = tokens_path(root / "text", "dev")
    path.write_bytes(path.read_bytes()[:-4096])
    err = refused(capsys, root)
    assert "dev_tokens.npy" in err and "truncated" in err
    path.unlink()
    assert "dev_tokens.npy: missing" in refused(capsys, root)
    shutil.rmtree(root / "text")
    assert "no text features here (write them with jobs/extract_features.py --text" in refused(capsys, root)


def test_sentence_vectors_alone_cannot_feed_a_token_level_encoder(stored, tmp_path, capsys, small_bert_dir):
    root = conftest.write_precomp(tmp_path / "sentences", SIZES)
    text_job.extract_text(text_job.TextOptions(root, kind="sentence", model_dir=small_bert_dir, progress=False))
    assert "holds sentence, not tokens states" in refused(capsys, root)


def test_an_explicit_folder_and_a_pooled_layout_find_their_features(stored, tmp_path):
    assert resolve_folder(stored) == stored / "text"
    layout = tmp_path / "pool1x1"
    layout.mkdir()
    (layout / "layout.json").write_text("{}")
    (tmp_path / "text").mkdir()
    assert resolve_folder(layout) == tmp_path / "text"  # a derived layout reads its grid's features
    assert resolve_folder(layout, tmp_path / "elsewhere") == tmp_path / "elsewhere"


def test_training_on_stored_text_features_and_its_resume(stored, tmp_path):
    from itrlab.train import prepare_data, run_experiment

    config = tiny_config(stored)
    result = run_experiment(config, tmp_path / "run")
    assert 0 < result.test.rsum <= 600
    saved = json.loads((tmp_path / "run" / "vocab.json").read_text())
    assert saved["folder"] == str((stored / "text").resolve())
    again = prepare_data(config, tmp_path / "run")  # what a resumed run does
    assert isinstance(again.vocab, TextFeatures) and again.vocab == TextFeatures(stored / "text")


def test_a_resume_refuses_text_features_that_changed(stored, tmp_path, small_bert_dir):
    root = copy_of(stored, tmp_path)
    vocab_file = tmp_path / "vocab.json"
    TextFeatures(root / "text").save(vocab_file)
    text_job.extract_text(
        text_job.TextOptions(root, kind="both", max_len=8, model_dir=small_bert_dir, overwrite=True, progress=False)
    )
    with pytest.raises(DataError, match="changed since this run started"):
        load_text_tokenizer(vocab_file, "precomp")


@pytest.mark.parametrize(
    "experiment,method,overrides",
    [
        ("vsepp_synthetic_tiny", "vsepp", ["model.text.pooling=gpo"]),
        ("xattn_synthetic_tiny", "xattn", []),
        ("coder_synthetic_tiny", "coder", ["method.concept_size=6"]),  # the folder's captions use 8 words
    ],
)
def test_every_token_level_method_trains_on_stored_states(stored, tmp_path, experiment, method, overrides):
    """Dual encoders with GPO, xattn's cross-attention over token features and CODER's concept branch (its
    query pools the text encoder's word features) all train on stored states."""
    from itrlab.train import run_experiment

    config = tiny_config(stored, *overrides, experiment=experiment)
    assert config.method.name == method
    result = run_experiment(config, tmp_path / "run")
    assert 0 < result.test.rsum <= 600


@pytest.mark.parametrize("text_gradient", ["false", "true"])
def test_coder_pools_the_stored_states_once_as_it_pools_their_projections(stored, tmp_path, text_gradient):
    """Over stored states with mean pooling, CODER's caption embedding and caption concept query are the mean
    state projected once (``pooled_once``): the loss, its parts and every gradient equal those of projecting
    every token first and pooling the projections, with the concept query under stop-gradient or not."""
    from itrlab.data import CaptionDataset, collate
    from itrlab.methods import BuildContext
    from itrlab.methods.coder import CoderMethod
    from itrlab.train import prepare_data

    config = tiny_config(
        stored,
        "method.concept_size=6",
        f"method.concept_text_gradient={text_gradient}",
        experiment="coder_synthetic_tiny",
    )
    data = prepare_data(config, tmp_path / "ctx")
    context = BuildContext.of(vocab=data.vocab, splits={"train": data.train, "val": data.val, "test": data.test})
    method = CoderMethod.from_config(config, context).train()
    method.prepare(context)  # the concept graph and word vectors: without them every concept is zero
    batch = collate([CaptionDataset(data.train, data.vocab)[i] for i in range(16)])
    assert method.pooled_once

    def step(pooled_once: bool):
        method.pooled_once = pooled_once
        method.zero_grad()
        output = method.step(batch)[0]
        output.loss.backward()
        return output, {name: p.grad.clone() for name, p in method.named_parameters() if p.grad is not None}

    (once, once_grads), (per_token, per_token_grads) = step(True), step(False)
    assert torch.allclose(once.loss, per_token.loss, atol=1e-6) and once.parts.keys() == per_token.parts.keys()
    assert all(torch.allclose(once.parts[k], per_token.parts[k], atol=1e-5) for k in once.parts)
    assert once_grads.keys() == per_token_grads.keys() and "model.text_encoder.fc.weight" in once_grads
    assert all(torch.allclose(once_grads[k], per_token_grads[k], atol=1e-5) for k in once_grads)
    assert once.parts["concept"] > 0 and once_grads["text_concept_fc.weight"].abs().sum() > 0


def test_ascl_on_stored_states_refuses_only_a_shuffle_with_one_line(stored, capsys):
    """AsCL trains on stored states (docs/papers/ascl.md#stored-text-features); a shuffle of them is a no-op."""
    assert main(["check-config", "-c", "ascl_synthetic_tiny", *on_stored_text(stored)]) == 0
    capsys.readouterr()
    assert main(["check-config", "-c", "ascl_synthetic_tiny", *on_stored_text(stored, "method.generator=shuffle")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "method.generator" in err and "no-op" in err


def test_resident_and_loader_batches_of_stored_states_train_the_same_model(stored, tmp_path):
    """The resident split holds the states in float16, the loader's items are float32 copies of the same
    float16 values: the same seed trains the same model either way (and the resident size counts them)."""
    from itrlab.data.precomp import open_precomp
    from itrlab.data.resident import resident_bytes
    from itrlab.train import run_experiment

    tables = [
        run_experiment(tiny_config(stored, f"train.data_path={path}"), tmp_path / path).test
        for path in ("loader", "resident")
    ]
    assert tables[0] == tables[1]
    split = open_precomp(stored, "train")
    assert resident_bytes(split, 16, text_width=384) > 200 * 16 * 384 * 2 > resident_bytes(split, 16)


def test_a_model_on_stored_text_embeds_new_captions_with_their_text_model(stored, tmp_path):
    """A typed caption gets its states from the text model that computed the stored ones (as ``itrlab retrieve``
    and a served model need): a split's own captions typed in score as their stored states do; a text model gone
    or replaced is one line."""
    import itrlab
    from itrlab.data import open_precomp
    from itrlab.errors import UserInputError
    from itrlab.train import run_experiment
    from itrlab.trained.new_text import NewTextFeatures

    run_experiment(tiny_config(stored), tmp_path / "run")
    model = itrlab.load_model(tmp_path / "run")
    split = open_precomp(stored, "test", 5)
    from_stored = model.score_fn(split)(slice(0, split.n_images), slice(0, 4))
    typed = model.score(split.features[:], split.captions[:4])
    assert typed.shape == from_stored.shape == (split.n_images, 4)
    assert torch.allclose(typed, from_stored, atol=1e-3), (typed - from_stored).abs().max()
    assert model.embed_captions(["a caption no data set holds"]).shape[0] == 1
    for key, value, says in (
        ("dir", str(tmp_path / "gone"), "which is not there"),
        ("sha256", "0" * 16, "is not the one that computed"),
    ):
        copy = copy_of(stored, tmp_path / key)
        manifest = json.loads((copy / "text" / "text.json").read_text())
        manifest["model"][key] = value
        (copy / "text" / "text.json").write_text(json.dumps(manifest))
        with pytest.raises(UserInputError, match=says):
            NewTextFeatures.of(TextFeatures(copy / "text"))


# ---------------------------------------------------------------- bad feature files, one line before any work


def edit_manifest(folder: Path, edit) -> None:
    """``edit`` (a function of the manifest dict) applied to ``folder``'s ``text.json``."""
    manifest = json.loads((folder / "text.json").read_text())
    edit(manifest)
    (folder / "text.json").write_text(json.dumps(manifest))


def rebind_text(folder: Path) -> None:
    """Record the sha256 of ``folder``'s arrays, as they are now, in its ``text.json``: a forged folder whose
    digests agree, so that the checks behind the digests are what refuses it."""
    import hashlib

    roles = {"tokens": ("tokens", "lengths"), "sentence": ("sentence",)}

    def rebind(manifest):
        for split, entry in manifest["splits"].items():
            entry["arrays_sha256"] = {
                role: hashlib.sha256((folder / f"{split}_{role}.npy").read_bytes()).hexdigest()
                for kind in manifest["kinds"]
                for role in roles[kind]
            }

    edit_manifest(folder, rebind)


def test_the_extraction_records_the_digest_of_every_array_and_extracts_a_folder_without_them_again(
    stored, tmp_path, small_bert_dir
):
    from itrlab.files import sha256_file

    root = copy_of(stored, tmp_path)
    manifest = json.loads((root / "text" / "text.json").read_text())
    for split, entry in manifest["splits"].items():
        assert entry["arrays_sha256"] == {
            kind: sha256_file(root / "text" / f"{split}_{kind}.npy") for kind in ("tokens", "lengths", "sentence")
        }
    before = {p.name: p.read_bytes() for p in (root / "text").glob("*.npy")}
    edit_manifest(root / "text", lambda m: [entry.pop("arrays_sha256") for entry in m["splits"].values()])
    options = text_job.TextOptions(root, kind="both", model_dir=small_bert_dir, chunk_size=64, progress=False)
    again = text_job.extract_text(options)
    assert not again.get("up_to_date") and again["splits"] == manifest["splits"]
    assert {p.name: p.read_bytes() for p in (root / "text").glob("*.npy")} == before


@pytest.mark.parametrize(
    "edit, says",
    [
        (lambda m: m.pop("hidden_size"), "the text-feature manifest lacks 'hidden_size'"),
        (lambda m: m.update(splits=[1, 2]), "'splits': got [1, 2]; Input should be a valid dictionary"),
        (lambda m: m.update(hidden_size="384"), "'hidden_size': got '384'; Input should be a valid integer"),
        (lambda m: m.update(hidden_size=2**40), "'hidden_size': got 1099511627776"),
        (lambda m: m.update(kinds=["words"]), "'kinds.0': got 'words'"),
        (lambda m: m["splits"]["dev"].update(captions=-1), "'splits.dev.captions': got -1"),
        (lambda m: m["splits"]["dev"].update(tokens=None), "split 'dev' lacks 'tokens'"),
        (lambda m: m["splits"].update({"../x": m["splits"]["dev"]}), "'splits.../x.[key]': got '../x'"),
    ],
)
def test_a_text_manifest_is_typed_and_a_bad_key_is_one_line(stored, tmp_path, capsys, edit, says):
    root = copy_of(stored, tmp_path)
    edit_manifest(root / "text", edit)
    err = refused(capsys, root)
    assert "text.json" in err and says in err


def rewrite(path: Path, change) -> None:
    """``path``'s array replaced by ``change(array)``."""
    array = np.load(path)
    np.save(path, change(array))


@pytest.mark.parametrize(
    "name, change, says",
    [
        ("dev_tokens.npy", lambda a: a.astype(str), "dtype <U"),
        ("dev_lengths.npy", lambda a: a.astype(np.float32), "dtype float32; caption lengths are integer numbers"),
        ("dev_lengths.npy", lambda a: np.concatenate([[0], a[1:-1], [a[0] + a[-1]]]), "caption 0 has 0 tokens"),
        ("dev_lengths.npy", lambda a: a[:-1], "shape (49,), expected (50,)"),
        ("dev_lengths.npy", lambda a: a.reshape(2, 25), "shape (2, 25), expected (50,)"),
        ("dev_lengths.npy", lambda a: a + 1, "the lengths add up to"),
        ("test_tokens.npy", lambda a: np.where(np.arange(len(a))[:, None] == 3, np.nan, a), "NaN or infinite"),
        ("dev_sentence.npy", lambda a: np.where(np.arange(len(a))[:, None] == 0, np.inf, a), "NaN or infinite"),
    ],
)
def test_every_array_file_is_checked_whole_before_training(stored, tmp_path, capsys, name, change, says):
    """Each bad array is one line at the run's start, its digest in text.json agreeing (a forged folder): the
    check behind the digest is what refuses it."""
    root = copy_of(stored, tmp_path)
    rewrite(root / "text" / name, change)
    rebind_text(root / "text")
    if name.endswith("sentence.npy"):  # sentence vectors are read by a run only where they are asked for
        from itrlab.data.precomp import read_captions

        with pytest.raises(DataError, match="NaN or infinite") as refusal:
            TextFeatures(root / "text").check_split("dev", read_captions(root, "dev"), "sentence")
        assert name in str(refusal.value)
        return
    err = refused(capsys, root)
    assert name in err and says in err


@pytest.mark.parametrize(
    "name, change",
    [
        ("test_tokens.npy", lambda a: np.random.default_rng(1).standard_normal(a.shape).astype(a.dtype)),
        ("train_lengths.npy", lambda a: np.concatenate([[a[0] - 3, a[1] + 3], a[2:]]).astype(a.dtype)),
    ],
    ids=["other numbers of the same shape", "three tokens moved to the next caption"],
)
def test_arrays_changed_after_the_extraction_are_refused_by_their_digest(stored, tmp_path, capsys, name, change):
    root = copy_of(stored, tmp_path)
    rewrite(root / "text" / name, change)
    err = refused(capsys, root)
    assert name in err and "are not those text.json recorded" in err and "changed after the extraction" in err


def test_nan_in_the_test_split_is_refused_at_the_start_of_training(stored, tmp_path):
    """Not after every epoch: the run stops before its first step, no checkpoint written."""
    from itrlab.train import run_experiment

    root = copy_of(stored, tmp_path)
    rewrite(root / "text" / "test_tokens.npy", lambda a: np.where(np.arange(len(a))[:, None] == 7, np.nan, a))
    rebind_text(root / "text")
    with pytest.raises(DataError, match="test_tokens.npy: holds NaN or infinite values"):
        run_experiment(tiny_config(root), tmp_path / "run")
    assert not list(tmp_path.glob("run/**/*.pt"))  # no epoch trained


@pytest.mark.timeout(60)
def test_a_token_file_that_is_a_fifo_is_refused_without_opening_it(stored, tmp_path, capsys):
    root = copy_of(stored, tmp_path)
    (root / "text" / "dev_tokens.npy").unlink()
    os.mkfifo(root / "text" / "dev_tokens.npy")
    err = refused(capsys, root)
    assert "dev_tokens.npy" in err and "is a FIFO, not a regular file" in err


def test_a_folder_extracted_before_the_digests_is_checked_with_one_warning(stored, tmp_path, capsys):
    from itrlab.data import text_features

    root = copy_of(stored, tmp_path)
    edit_manifest(root / "text", lambda m: [entry.pop("arrays_sha256") for entry in m["splits"].values()])
    text_features._unbound.discard((root / "text").resolve())
    assert main(["check-config", "-c", "vsepp_synthetic_tiny", *on_stored_text(root)]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "records no digest of their arrays" in err[0], err
    rewrite(root / "text" / "dev_tokens.npy", lambda a: np.where(np.arange(len(a))[:, None] == 0, np.inf, a))
    assert "dev_tokens.npy: holds NaN or infinite values" in refused(capsys, root)


def test_each_array_is_read_once_until_its_file_changes(stored, tmp_path):
    """The digest pass is remembered by file status: a second check reads nothing; bytes rewritten with their
    modification time set back are read again (their change time moved)."""
    from itrlab.data import array_checks
    from itrlab.data.precomp import read_captions

    root = copy_of(stored, tmp_path)
    captions = read_captions(root, "dev")
    reads = []
    real = array_checks._read_pass
    array_checks._seen.clear()
    try:
        array_checks._read_pass = lambda path: reads.append(path.name) or real(path)
        TextFeatures(root / "text").check_split("dev", captions)
        assert sorted(reads) == ["dev_lengths.npy", "dev_tokens.npy"]
        array_checks._seen.clear()  # a new process: the record beside the arrays answers
        TextFeatures(root / "text").check_split("dev", captions)
        assert len(reads) == 2 and (root / "text" / array_checks.CACHE).is_file()
        path = root / "text" / "dev_tokens.npy"
        status = path.stat()
        rewrite(path, lambda a: -a)
        os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))
        array_checks._seen.clear()
        with pytest.raises(DataError, match="are not those text.json recorded"):
            TextFeatures(root / "text").check_split("dev", captions)
        assert reads[-1] == "dev_tokens.npy" and len(reads) == 3
    finally:
        array_checks._read_pass = real


def test_a_run_and_its_model_are_bound_to_the_bytes_they_read(stored, tmp_path, capsys):
    """``vocab.json`` and ``model.json`` record the digests of the arrays the run read; test tokens overwritten
    with other numbers of the same shape (and text.json forged to agree): the run's resume and the model refuse
    them, where ``itrlab evaluate`` gave another table, exit 0."""
    import itrlab
    from itrlab.train import run_experiment
    from itrlab.trained import bundle_from_run

    root = copy_of(stored, tmp_path)
    run_experiment(tiny_config(root), tmp_path / "run")
    recorded = json.loads((tmp_path / "run" / "vocab.json").read_text())["arrays_sha256"]
    manifest = json.loads((root / "text" / "text.json").read_text())
    assert recorded == {
        split: {k: v for k, v in e["arrays_sha256"].items() if k != "sentence"}
        for split, e in manifest["splits"].items()
    }
    folder = bundle_from_run(tmp_path / "run", tmp_path / "bundle")
    assert json.loads((folder / "model.json").read_text())["text_features_sha256"] == recorded
    assert itrlab.load_model(folder).info.text_encoder == "precomp"
    rewrite(
        root / "text" / "test_tokens.npy", lambda a: np.random.default_rng(1).standard_normal(a.shape).astype(a.dtype)
    )
    rebind_text(root / "text")
    with pytest.raises(DataError, match="changed since this run read them .test_tokens.npy"):
        load_text_tokenizer(tmp_path / "run" / "vocab.json", "precomp")
    assert main(["evaluate", "--no-tracking", str(folder)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "test_tokens.npy" in err[0] and "changed since" in err[0], err
