"""The real-data paths: coco_mini photos end to end, the SCAN precomp layout with the COCO protocols,
and float16 feature storage."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import SHARED, write_precomp
from itrlab.assembly import load_experiment
from itrlab.data import open_precomp
from itrlab.data.synthetic import generate_synthetic, synthetic_spec
from itrlab.eval import METRIC_NAMES, RecallTable, evaluate_embeddings
from itrlab.extract.ray_tasks import main as extract_main
from itrlab.train import run_experiment
from itrlab.train.checkpoint import BEST, LAST, load_checkpoint
from itrlab.train.experiment import build_run_method, prepare_data

COCO_MINI = SHARED / "data" / "coco_mini"
COCO_MINI_CAPTIONS = COCO_MINI / "annotations" / "captions_train2017.json"
N_PHOTOS = 10  # -> 6 / 2 / 2 images with fractions 0.6,0.2,0.2


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def assert_finite_table(table: RecallTable, protocol: str, n_images: int, n_folds: int = 1) -> None:
    assert (table.protocol, table.n_images, table.n_folds) == (protocol, n_images, n_folds)
    assert all(math.isfinite(value) for value in table.metrics().values()), table
    assert f"protocol {protocol}" in table.format()


# --- coco_mini: real photos -> EfficientNet features -> MiniLM + VSE++ training -> recall ---------


@pytest.mark.skipif(
    not (COCO_MINI / "train2017").is_dir() or not COCO_MINI_CAPTIONS.is_file(),
    reason=f"coco_mini (80 real COCO photos) not found at {COCO_MINI}; it lives beside the "
    f"checkout in ../shared/data/coco_mini",
)
def test_coco_mini_photos_to_recall_table(tmp_path, capsys):
    """10 of the photos: the extraction job's command line, then 1 epoch of coco_mini_bert (frozen MiniLM)."""
    doc = json.loads(COCO_MINI_CAPTIONS.read_text(encoding="utf-8"))
    images = sorted(doc["images"], key=lambda im: im["file_name"])[:N_PHOTOS]
    ids = {im["id"] for im in images}
    (tmp_path / "images").mkdir()
    for im in images:
        shutil.copy(COCO_MINI / "train2017" / im["file_name"], tmp_path / "images" / im["file_name"])
    trimmed = {"images": images, "annotations": [a for a in doc["annotations"] if a["image_id"] in ids]}
    (tmp_path / "captions.json").write_text(json.dumps(trimmed), encoding="utf-8")

    out = tmp_path / "coco_mini_precomp"
    status = extract_main(
        [
            "--images",
            str(tmp_path / "images"),
            "--captions",
            str(tmp_path / "captions.json"),
            "--out",
            str(out),
            "--split-fractions",
            "0.6,0.2,0.2",
            "--seed",
            "0",
            "--batch-size",
            "5",
            "--no-progress",
            "--no-ray",
        ]
    )
    assert status == 0, capsys.readouterr().err
    assert "images/s" in capsys.readouterr().out
    sizes = {"train": 6, "dev": 2, "test": 2}
    for split, n in sizes.items():
        regions = np.load(out / f"{split}_ims.npy", mmap_mode="r")
        assert regions.shape == (n, 49, 1280) and regions.dtype == np.float32
        assert np.load(out / f"{split}_global.npy").shape == (n, 1280)
        assert {int(line) for line in (out / f"{split}_ids.txt").read_text().split()} <= ids
    manifest = json.loads((out / "extract.json").read_text())
    assert {s: c["images"] for s, c in manifest["splits"].items()} == sizes

    config = load_experiment(
        "coco_mini_bert",
        [
            f"dataset.root={out}",
            "tracking.enabled=false",
            "train.epochs=1",
            "train.lr_decay_epochs=[]",
            "train.batch_size=10",
            "train.warmup_steps=0",
            "model.text.max_len=16",
        ],
    )
    assert config.model.text.encoder == "bert" and config.model.text.freeze
    result = run_experiment(config, tmp_path / "run")
    assert_finite_table(result.test, "all", 2)
    assert "protocol all" in (tmp_path / "run" / "test_recall.md").read_text()


# --- the SCAN precomp layout, evaluated with the COCO 1K and 5K protocols ------------------------


def write_scan_layout(root: Path) -> Path:
    """SCAN's coco_precomp file set in miniature: train/dev/test/testall with ids; testall has 5000 images."""
    sizes = {"train": 100, "dev": 20, "test": 20, "testall": 5000}
    write_precomp(root, {s: n for s, n in sizes.items() if s != "testall"}, regions=2, dim=8)
    rng = np.random.default_rng(1)
    np.save(root / "testall_ims.npy", rng.standard_normal((5000, 2, 8)).astype(np.float32))
    words = np.array(["dog", "cat", "car", "tree", "red", "blue", "man", "park"])
    lines = [" ".join(row) for row in rng.choice(words, size=(5000 * 5, 3))]
    (root / "testall_caps.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    first_id = 0
    for split, n in sizes.items():  # COCO image ids, one per line, as SCAN's data ships them
        (root / f"{split}_ids.txt").write_text("".join(f"{100000 + first_id + i}\n" for i in range(n)))
        first_id += n
    return root


def test_scan_layout_trains_and_evaluates_coco_1k_and_5k(tmp_path):
    root = write_scan_layout(tmp_path / "coco_precomp")
    overrides = ["defaults.dataset=coco_precomp", f"dataset.root={root}", "tracking.enabled=false", "train.epochs=1"]
    config = load_experiment("vsepp_synthetic_tiny", [*overrides, "eval.test_protocol=coco_1k"])
    assert (config.dataset.kind, config.dataset.splits.test) == ("precomp", "testall")
    run_dir = tmp_path / "run"
    coco_1k = run_experiment(config, run_dir).test
    assert_finite_table(coco_1k, "coco_1k", 5000, n_folds=5)

    # the same trained run, evaluated again with COCO 5K (resumes after its last epoch: no training)
    config_5k = load_experiment("vsepp_synthetic_tiny", [*overrides, "eval.test_protocol=coco_5k"])
    coco_5k = run_experiment(config_5k, run_dir).test
    assert_finite_table(coco_5k, "coco_5k", 5000)
    assert load_checkpoint(run_dir / LAST)["state"].epoch == 1

    # COCO 1K is the mean of the 5 folds of 1000 images, each ranked on its own; 5K ranks all 5000
    data = prepare_data(config, run_dir)
    method, _ = build_run_method(config, data)
    method.load_state_dict(load_checkpoint(run_dir / BEST)["model"])
    images, captions = method.embed_split(data.test, data.vocab, config.eval.batch_size)
    assert images.shape[0] == 5000 and captions.shape[0] == 25000
    folds = [
        evaluate_embeddings(images[k * 1000 : (k + 1) * 1000], captions[k * 5000 : (k + 1) * 5000]) for k in range(5)
    ]
    assert len({round(f.rsum, 6) for f in folds}) > 1  # the folds really differ
    for name in METRIC_NAMES:
        assert getattr(coco_1k, name) == pytest.approx(np.mean([getattr(f, name) for f in folds]), abs=1e-6), name
    whole = evaluate_embeddings(images, captions)
    for name in METRIC_NAMES:
        assert getattr(coco_5k, name) == pytest.approx(getattr(whole, name), abs=1e-6), name


# --- float16 storage ------------------------------------------------------------------------------


@pytest.mark.slow
def test_float16_features_halve_the_files_and_keep_the_recall(tmp_path):
    """A model trained on float32 features, evaluated on them and on a float16 copy: |Δ rsum| < 0.5.

    This is the issue's "the recall of a trained model changes by less than 0.5 rsum points between
    float32 and float16 features": the SAME trained weights (best.pt) evaluated on both copies of
    the test split. Training a second model on the float16 copy with the same seed is not the
    comparison made here: float16 rounding (relative error ~5e-4) sends SGD on a different
    trajectory (and the best epoch can differ): on this data and config two such runs gave rsum 136.6
    (float32) and 129.4 (float16), inside the seed-to-seed spread (seeds 0, 1, 2: 136.6, 119.3,
    143.1); that measures training noise, not the storage format.
    """
    spec = synthetic_spec("tiny", n_train=1000, n_dev=100, n_test=1000, n_concepts=80, region_noise=0.5)
    root32, root16 = generate_synthetic(tmp_path / "f32", spec), tmp_path / "f16"
    root16.mkdir()
    for split in ("train", "dev", "test"):
        np.save(root16 / f"{split}_ims.npy", np.load(root32 / f"{split}_ims.npy").astype(np.float16))
        shutil.copy(root32 / f"{split}_caps.txt", root16 / f"{split}_caps.txt")
        size32, size16 = ((root / f"{split}_ims.npy").stat().st_size for root in (root32, root16))
        assert size16 <= size32 / 2 + 128  # half the bytes (the 128-byte .npy header aside)
        mapped32, mapped16 = open_precomp(root32, split).features, open_precomp(root16, split).features
        assert mapped16.dtype == np.float16 and mapped16.nbytes * 2 == mapped32.nbytes  # and half the memory
    test32, test16 = (np.load(root / "test_ims.npy") for root in (root32, root16))
    assert 0 < np.abs(test16.astype(np.float32) - test32).max() < 1e-2  # rounded, not identical

    def config(root: Path):
        return load_experiment(
            "vsepp_synthetic_tiny",
            [
                f"dataset.root={root}",
                "dataset.kind=precomp",
                "dataset.synthetic=null",
                "tracking.enabled=false",
                "train.epochs=5",
                "train.lr=0.002",
            ],
        )

    trained = run_experiment(config(root32), tmp_path / "run32")
    assert trained.test.rsum > 60  # a trained model (chance is about 10 on 1000 images)
    shutil.copytree(tmp_path / "run32", tmp_path / "run32_on_f16")
    on_f16 = run_experiment(config(root16), tmp_path / "run32_on_f16")  # resumes after epoch 5: evaluates only
    assert on_f16.best_epoch == trained.best_epoch
    before, after = (load_checkpoint(tmp_path / run / LAST)["state"] for run in ("run32", "run32_on_f16"))
    assert after.epoch == 5 and after.history == before.history  # the same weights, no further training
    assert on_f16.test.md != trained.test.md  # the float16 copy was read: similarities moved slightly
    assert abs(trained.test.rsum - on_f16.test.rsum) < 0.5, (trained.test, on_f16.test)
