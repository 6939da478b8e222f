"""Tests of itrlab.data: precomp validation, vocabulary, batches and the synthetic generator."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from itrlab.data import (
    Batch,
    CaptionDataset,
    SyntheticSpec,
    Vocabulary,
    collate,
    eval_loaders,
    generate_synthetic,
    inspect_precomp,
    make_loader,
    open_precomp,
    synthetic,
    synthetic_spec,
    tokenize,
)
from itrlab.data.vocab import END_ID, PAD_ID, START_ID, UNK_ID
from itrlab.errors import DataError, UserInputError

CAPTIONS = [
    "A dog runs.",
    "The dog plays",
    "a brown dog",
    "dog on grass",
    "one dog",
    "Two cats sleep!",
    "a cat, a sofa",
    "cats on a sofa",
    "sleepy cats",
    "the cats",
]


def write_split(root, split="train", features=None, captions=CAPTIONS, cpi=5):
    """Write a precomp split; ``captions`` is a list of lines or raw bytes."""
    if features is None:
        n = len(captions) // cpi if isinstance(captions, list) else 2
        features = np.random.default_rng(0).standard_normal((n, 3, 4)).astype(np.float32)
    np.save(root / f"{split}_ims.npy", features)
    data = captions if isinstance(captions, bytes) else ("\n".join(captions) + "\n").encode()
    (root / f"{split}_caps.txt").write_bytes(data)
    return root / f"{split}_ims.npy", root / f"{split}_caps.txt"


def data_error(root, path, line=None, split="train", **kwargs) -> DataError:
    with pytest.raises(DataError) as info:
        open_precomp(root, split, **kwargs)
    assert info.value.path == path and path.name in str(info.value)
    assert info.value.line == line
    assert isinstance(info.value, UserInputError)
    return info.value


# --- precomp -------------------------------------------------------------------------------


def test_open_precomp_memory_maps_features(tmp_path):
    ims, _ = write_split(tmp_path)
    split = open_precomp(tmp_path, "train")
    assert isinstance(split.features, np.memmap) and Path(split.features.filename) == ims
    assert (split.n_images, split.n_regions, split.feature_dim, split.n_captions) == (2, 3, 4, 10)
    assert split.captions[5] == "Two cats sleep!" and split.image_of(5) == 1
    assert split.image_features(1).dtype == np.float32
    clone = pickle.loads(pickle.dumps(split))  # workers re-open the map, no copy of the data
    assert isinstance(clone.features, np.memmap)
    assert len(pickle.dumps(split)) < 2000 + sum(map(len, CAPTIONS))
    info = inspect_precomp(tmp_path, "train")
    assert (info.n_images, info.n_regions, info.feature_dim, info.dtype) == (2, 3, 4, "float32")
    assert info.n_captions == 10


def test_float16_and_crlf_captions_accepted(tmp_path):
    feats = np.zeros((2, 3, 4), dtype=np.float16)
    write_split(tmp_path, features=feats, captions="\r\n".join(CAPTIONS).encode())
    split = open_precomp(tmp_path, "train")
    assert split.captions[0] == "A dog runs." and split.features.dtype == np.float16


def test_missing_files(tmp_path):
    ims, caps = write_split(tmp_path)
    caps.unlink()
    data_error(tmp_path, caps)
    ims.unlink()
    data_error(tmp_path, ims)


def test_not_3d(tmp_path):
    ims, _ = write_split(tmp_path, features=np.zeros((2, 12), dtype=np.float32))
    assert "3-D" in str(data_error(tmp_path, ims))


@pytest.mark.parametrize("dtype", [np.float64, np.int32])
def test_bad_dtype(tmp_path, dtype):
    ims, _ = write_split(tmp_path, features=np.zeros((2, 3, 4), dtype=dtype))
    assert "float16 or float32" in str(data_error(tmp_path, ims))


def test_not_npy_and_truncated(tmp_path):
    ims, _ = write_split(tmp_path)
    data = ims.read_bytes()
    ims.write_bytes(data[:-10])
    assert "truncated" in str(data_error(tmp_path, ims))
    ims.write_bytes(b"not numpy at all")
    data_error(tmp_path, ims)


def test_caption_count_mismatch_names_both_numbers(tmp_path):
    _, caps = write_split(tmp_path, features=np.zeros((3, 3, 4), dtype=np.float32))
    error = data_error(tmp_path, caps)
    assert "10" in str(error) and "15" in str(error)
    with pytest.raises(DataError):
        inspect_precomp(tmp_path, "train")
    info = inspect_precomp(tmp_path, "train", captions_per_image=None)  # report, don't check
    assert (info.n_images, info.n_captions, info.captions_per_image) == (3, 10, None)


@pytest.mark.parametrize("bad", ["", "   \t"])
def test_empty_caption_line(tmp_path, bad):
    _, caps = write_split(tmp_path, captions=CAPTIONS[:6] + [bad] + CAPTIONS[7:])
    data_error(tmp_path, caps, line=7)


def test_non_utf8_names_line(tmp_path):
    lines = [c.encode() for c in CAPTIONS]
    lines[3] = b"caf\xe9 latte"
    _, caps = write_split(tmp_path, captions=b"\n".join(lines) + b"\n")
    data_error(tmp_path, caps, line=4)


def test_nan_and_inf_name_the_image(tmp_path):
    feats = np.zeros((6, 3, 4), dtype=np.float32)
    feats[4, 1, 2] = np.nan
    ims, _ = write_split(tmp_path, features=feats, captions=CAPTIONS * 3)
    assert "image 4" in str(data_error(tmp_path, ims))
    feats[4, 1, 2], feats[2, 0, 0] = 0, np.inf
    np.save(ims, feats)
    assert "image 2" in str(data_error(tmp_path, ims))
    open_precomp(tmp_path, "train", check_samples=0)  # the check can be switched off


# --- vocabulary ----------------------------------------------------------------------------


def test_tokenize():
    assert tokenize("A dog's ball, 2 cats!") == ["a", "dog", "s", "ball", "2", "cats"]


def test_vocabulary_from_train_only(tmp_path):
    write_split(tmp_path, "train")
    write_split(tmp_path, "test", captions=["a zebra"] * 5 + ["dog"] * 5)
    vocab = Vocabulary.build(open_precomp(tmp_path, "train").captions)
    test = open_precomp(tmp_path, "test")
    assert "zebra" not in vocab and "dog" in vocab
    assert vocab.encode("a zebra")[2] == UNK_ID
    assert vocab.coverage(test.captions) == pytest.approx(10 / 15)
    assert vocab.words[:4] == ["<pad>", "<start>", "<end>", "<unk>"] and PAD_ID == 0
    assert vocab.words[4:6] == ["a", "dog"]  # most frequent first, ties alphabetical


def test_encode_decode_save_load(tmp_path):
    vocab = Vocabulary.build(CAPTIONS)
    ids = vocab.encode("Two cats sleep!")
    assert ids[0] == START_ID and ids[-1] == END_ID and len(ids) == 5
    assert vocab.decode(ids) == "two cats sleep"
    assert vocab.encode("a b c d e f", max_len=4)[-1] == END_ID
    assert len(Vocabulary.build(CAPTIONS, min_count=3)) < len(vocab)
    vocab.save(tmp_path / "vocab.json")
    assert Vocabulary.load(tmp_path / "vocab.json") == vocab
    (tmp_path / "bad.json").write_text("{not json")
    for name in ("bad.json", "missing.json"):
        with pytest.raises(DataError) as info:
            Vocabulary.load(tmp_path / name)
        assert info.value.path.name == name


# --- batches -------------------------------------------------------------------------------


@pytest.fixture()
def split(tmp_path):
    write_split(tmp_path)
    return open_precomp(tmp_path, "train")


def test_collate_shapes_and_padding(split):
    vocab = Vocabulary.build(split.captions)
    dataset = CaptionDataset(split, vocab)
    batch = collate([dataset[i] for i in range(len(dataset))])
    assert isinstance(batch, Batch) and len(batch) == 10
    assert batch.images.shape == (10, 3, 4) and batch.images.dtype == torch.float32
    assert batch.tokens.dtype == torch.long and batch.tokens.shape[1] == int(batch.lengths.max())
    for row, length in enumerate(batch.lengths.tolist()):
        assert batch.tokens[row, length - 1] == END_ID
        assert (batch.tokens[row, length:] == PAD_ID).all()
    assert batch.image_ids.tolist() == [0] * 5 + [1] * 5  # captions of one image share its id
    assert batch.caption_ids.tolist() == list(range(10))
    assert torch.equal(batch.images[7], torch.from_numpy(np.array(split.features[1])))
    moved = batch.to("cpu")
    assert isinstance(moved, Batch) and torch.equal(moved.tokens, batch.tokens)


def test_seeded_loader_order(split):
    dataset = CaptionDataset(split, Vocabulary.build(split.captions))
    order = lambda seed: [b.caption_ids.tolist() for b in make_loader(dataset, 3, True, seed)]  # noqa: E731
    assert order(7) == order(7) and order(7) != order(8)
    assert sorted(sum(order(7), [])) == list(range(10))
    assert len(list(make_loader(dataset, 3, True, 0, drop_last=True))) == 3


def test_eval_loaders_cover_split_in_order(split):
    images, texts = eval_loaders(split, Vocabulary.build(split.captions), batch_size=4)
    assert torch.cat([b.image_ids for b in images]).tolist() == [0, 1]
    caption_batches = list(texts)
    assert torch.cat([b.caption_ids for b in caption_batches]).tolist() == list(range(10))
    assert torch.cat([b.image_ids for b in caption_batches]).tolist() == [0] * 5 + [1] * 5


# --- synthetic -----------------------------------------------------------------------------


def test_synthetic_tiny_is_deterministic_and_valid(tmp_path):
    spec = synthetic_spec("tiny")
    a, b = generate_synthetic(tmp_path / "a", spec), generate_synthetic(tmp_path / "b", spec)
    names = sorted(p.name for p in a.iterdir() if not p.name.startswith("."))
    assert "synthetic.json" in names and "train_ims.npy" in names and "test_caps.txt" in names
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    other = generate_synthetic(tmp_path / "c", synthetic_spec("tiny", seed=1))
    assert (other / "train_ims.npy").read_bytes() != (a / "train_ims.npy").read_bytes()
    for name, n in [("train", spec.n_train), ("dev", spec.n_dev), ("test", spec.n_test)]:
        split = open_precomp(a, name, check_samples=10**6)
        assert split.features.shape == (n, spec.n_regions, spec.feature_dim)
    assert json.loads((a / "synthetic.json").read_text())["spec"]["seed"] == 0


def test_synthetic_retrieval_is_learnable_not_trivial(tmp_path):
    """A caption's mentioned concepts vs each image's concepts: above chance, below perfect."""
    root = generate_synthetic(tmp_path, synthetic_spec("tiny"))
    truth = np.load(root / "test_truth.npz")
    concepts = truth["image_concepts"]
    mentions = np.unpackbits(truth["caption_mentions"], axis=1)[:, :24].astype(float)
    images = np.zeros((len(concepts), 24))
    np.put_along_axis(images, concepts, 1, axis=1)
    scores = mentions @ images.T
    target = np.arange(len(mentions)) // 5
    positive = scores[np.arange(len(mentions)), target]
    top1 = ((scores > positive[:, None]).sum(1) == 0) / (scores == positive[:, None]).sum(1)
    assert 5 * 100 / len(concepts) < 100 * top1.mean() < 99


def test_synthetic_is_idempotent_and_refuses_other_specs(tmp_path):
    spec = synthetic_spec("tiny")
    generate_synthetic(tmp_path, spec)
    stamp = (tmp_path / "train_ims.npy").stat().st_mtime_ns
    generate_synthetic(tmp_path, spec)
    assert (tmp_path / "train_ims.npy").stat().st_mtime_ns == stamp
    with pytest.raises(DataError) as info:
        generate_synthetic(tmp_path, synthetic_spec("tiny", region_noise=2.0))
    assert "another output directory" in str(info.value) and "region_noise" in str(info.value)
    assert (tmp_path / "train_ims.npy").stat().st_mtime_ns == stamp


def test_synthetic_refuses_foreign_files_and_redoes_partial_runs(tmp_path):
    write_split(tmp_path)
    with pytest.raises(DataError, match="not written by the synthetic generator"):
        generate_synthetic(tmp_path, synthetic_spec("tiny"))
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "synthetic.partial").write_text("{}")
    (partial / "train_ims.npy.tmp").write_bytes(b"half")
    (partial / "train_ims.npy").write_bytes(b"half")
    generate_synthetic(partial, synthetic_spec("tiny"))
    assert open_precomp(partial, "train").n_images == 200
    assert not (partial / "synthetic.partial").exists()


def test_spec_validation():
    with pytest.raises(ValueError, match="tiny"):
        synthetic_spec("huge")
    with pytest.raises(ValueError, match="region_noise"):
        synthetic_spec("tiny", noise=1.0)
    bad = [
        dict(n_train=0),
        dict(concepts_per_image=7),
        dict(mention_fraction=0.0),
        dict(dtype="float64"),
        dict(region_noise=-1.0),
        dict(n_regions=2.5),
        dict(seed=-1),
        dict(attribute_rate=1.5),
    ]
    for knobs in bad:
        with pytest.raises(ValueError) as info:
            synthetic_spec("tiny", **knobs)
        assert isinstance(info.value, UserInputError) and next(iter(knobs)) in str(info.value)
    assert set(synthetic.SIZES) == {"tiny", "small", "paper-shape", "f30k-shape"}
    assert isinstance(synthetic_spec("small", seed=3), SyntheticSpec)


def test_cli_main(tmp_path, capsys):
    assert synthetic.main(["--size", "tiny", "--out", str(tmp_path), "--seed", "5", "--n-train", "20"]) == 0
    manifest = json.loads((tmp_path / "synthetic.json").read_text())
    assert manifest["spec"]["seed"] == 5 and manifest["spec"]["n_train"] == 20
    with pytest.raises(SystemExit):
        synthetic.main(["--size", "nope", "--out", str(tmp_path)])


def test_fingerprint_changes_with_the_data(tmp_path):
    from conftest import write_precomp
    from itrlab.data.precomp import features_path, fingerprint

    root = write_precomp(tmp_path / "d", {"train": 6, "dev": 2, "test": 2}, regions=2, dim=3, seed=0)
    first = fingerprint(root)
    assert first == fingerprint(root) and len(first) == 16
    path = features_path(root, "dev")
    path.write_bytes(path.read_bytes()[:-4] + b"\0\0\0\1")  # one value changed
    assert fingerprint(root) != first
