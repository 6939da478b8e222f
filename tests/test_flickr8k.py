"""Flickr8K in its original form -> the precomp layout in one command; the extraction as a cache of its
inputs; region layouts pooled from the stored grid.

The default tests build a tiny original-layout folder of generated JPEGs and replace EfficientNet by a
cheap deterministic encoder (the real one is tested in test_extract.py); the slow test extracts a few
dozen real photos of ../shared/data/flickr8k with the real model and trains an epoch on them.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import SHARED, interrupt_after_shards
from itrlab.data import open_precomp
from itrlab.errors import DataError
from itrlab.extract import digests, job, plan, shards
from itrlab.extract.image_encoder import FEATURE_DIM, N_REGIONS
from itrlab.extract.layouts import LAYOUT_FILE, pool_bins, pool_regions
from itrlab.extract.plan import WORK_DIR, ExtractOptions
from itrlab.extract.ray_tasks import build_parser
from itrlab.extract.ray_tasks import main as extract_main
from itrlab.extract.readers import READERS
from itrlab.extract.readers.flickr8k import IMAGES_DIR, SPLIT_FILES, TOKEN_FILE, read_flickr8k

SIZES = {"train": 4, "dev": 2, "test": 2}
FLICKR8K = SHARED / "data" / "flickr8k"


def write_jpeg(path: Path, seed: int, size: tuple[int, int] = (300, 220)) -> None:
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path, quality=90)


def make_original(root: Path) -> dict:
    """A Flickr8K folder as downloaded, in miniature: 8 listed photos (4 / 2 / 2), one more photo with
    captions in the token file but in no list (the original has 92 such names), lists and token lines
    in no particular order."""
    names = [f"{1000 + 7 * i}_{i:04x}ab.jpg" for i in range(9)]
    (root / IMAGES_DIR).mkdir(parents=True)
    for i, name in enumerate(names):
        write_jpeg(root / IMAGES_DIR / name, seed=i)
    lines = [f"{name}#{n}\tPhoto {i} , caption {n} ." for i, name in enumerate(names) for n in range(5)]
    random.Random(0).shuffle(lines)
    (root / TOKEN_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    listed = names[:8][::-1]
    start = 0
    for split, n in SIZES.items():
        (root / SPLIT_FILES[split]).write_text("\n".join(listed[start : start + n]) + "\n", encoding="utf-8")
        start += n
    return {
        "root": root,
        "names": names,
        "lists": {s: sorted(listed[a : a + n]) for s, a, n in (("train", 0, 4), ("dev", 4, 2), ("test", 6, 2))},
    }


class FakeEncoder:
    """A stand-in for EfficientNet: each of the 49 regions is its 32 x 32 patch's mean pixel, ramped over
    1280 dimensions; ``images`` counts the images encoded by every instance."""

    images: list[int] = []

    def __init__(self, device: str = "cpu"):
        pass

    def __call__(self, pixels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        FakeEncoder.images.append(len(pixels))
        patches = pixels.astype(np.float32).reshape(len(pixels), 7, 32, 7, 32, 3).mean(axis=(2, 4, 5)) / 255
        regions = patches.reshape(len(pixels), N_REGIONS, 1) * np.linspace(1, 2, FEATURE_DIM, dtype=np.float32)
        return regions, regions.mean(axis=1)


@pytest.fixture
def encoded(monkeypatch) -> list[int]:
    FakeEncoder.images = []
    monkeypatch.setattr(job, "ImageEncoder", FakeEncoder)
    return FakeEncoder.images


@pytest.fixture
def original(tmp_path) -> dict:
    return make_original(tmp_path / "Flickr8k")


def run(original: dict, out: Path, *args: str) -> int:
    return extract_main(
        [
            "--flickr8k",
            str(original["root"]),
            "--out",
            str(out),
            "--no-progress",
            "--chunk-size",
            "2",
            "--batch-size",
            "2",
            *args,
        ]
    )


# --- the reader ----------------------------------------------------------------------------------


def test_reader_gives_the_official_split_sorted_with_ids_by_file_name(original):
    data = read_flickr8k(original["root"])
    assert {split: [im.file_name for im in images] for split, images in data.splits.items()} == original["lists"]
    listed = sorted(name for names in original["lists"].values() for name in names)
    for images in data.splits.values():
        for image in images:
            assert image.image_id == listed.index(image.file_name) + 1
            i = original["names"].index(image.file_name)
            assert image.captions == tuple(f"Photo {i} , caption {n} ." for n in range(5))  # in #n order
    report = data.report()
    assert (report["images_in_file"], report["annotations"], report["unassigned_images"]) == (9, 45, 1)


def test_one_command_writes_the_data_set_and_its_pooled_layouts(original, encoded, tmp_path, capsys):
    out = tmp_path / "flickr8k_precomp"
    assert run(original, out, "--dtype", "float16", "--pool", "2x2,1x1") == 0, capsys.readouterr().err
    printed = capsys.readouterr()
    assert "1 images of Flickr8k.token.txt are in no split list" in printed.err
    assert "layout pool2x2/: 4 region(s)" in printed.out and "layout pool1x1/: 1 region(s)" in printed.out
    assert sum(encoded) == 8
    manifest = json.loads((out / "extract.json").read_text())
    assert manifest["source"]["flickr8k"] == str(original["root"].resolve())
    assert manifest["images_sha256"] == manifest["settings"]["images"]
    for split, n in SIZES.items():
        grid = open_precomp(out, split)
        assert grid.features.shape == (n, 49, 1280) and grid.features.dtype == np.float16
        names = original["lists"][split]
        i = original["names"].index(names[0])
        assert grid.captions[:5] == [f"Photo {i} , caption {k} ." for k in range(5)]
        for size in (2, 1):
            layout = open_precomp(out / f"pool{size}x{size}", split)
            assert layout.features.shape == (n, size * size, 1280) and layout.features.dtype == np.float16
            assert layout.captions == grid.captions
            expected = pool_regions(np.asarray(grid.features), size)
            np.testing.assert_allclose(np.asarray(layout.features, np.float32), expected, rtol=2e-3, atol=2e-3)
        assert (out / "pool1x1" / f"{split}_ids.txt").read_text() == (out / f"{split}_ids.txt").read_text()


def test_the_coco_form_of_the_same_photos_gives_the_same_files(original, encoded, tmp_path):
    data = read_flickr8k(original["root"])
    images = sorted((im for ims in data.splits.values() for im in ims), key=lambda im: im.image_id)
    doc = {
        "images": [{"id": im.image_id, "file_name": im.file_name} for im in images],
        "annotations": [{"image_id": im.image_id, "caption": c} for im in images for c in im.captions],
    }
    (tmp_path / "captions.json").write_text(json.dumps(doc))
    (tmp_path / "splits.txt").write_text(
        "".join(f"{im.file_name} {split}\n" for split, ims in data.splits.items() for im in ims)
    )
    assert run(original, tmp_path / "a") == 0
    assert (
        extract_main(
            [
                "--images",
                str(original["root"] / IMAGES_DIR),
                "--captions",
                str(tmp_path / "captions.json"),
                "--split-file",
                str(tmp_path / "splits.txt"),
                "--out",
                str(tmp_path / "b"),
                "--no-progress",
                "--chunk-size",
                "2",
                "--batch-size",
                "2",
            ]
        )
        == 0
    )
    for split in SIZES:
        for suffix in ("ims.npy", "global.npy", "caps.txt", "ids.txt"):
            assert (tmp_path / "a" / f"{split}_{suffix}").read_bytes() == (
                tmp_path / "b" / f"{split}_{suffix}"
            ).read_bytes()


def test_the_format_flag_is_what_flickr8k_stands_for(original, encoded, tmp_path, capsys):
    """``--flickr8k DIR`` is ``--format flickr8k --annotations DIR``: the same files; with --format beside it,
    refused."""
    assert run(original, tmp_path / "a") == 0
    assert (
        extract_main(
            [
                "--format",
                "flickr8k",
                "--annotations",
                str(original["root"]),
                "--out",
                str(tmp_path / "b"),
                "--no-progress",
                "--chunk-size",
                "2",
                "--batch-size",
                "2",
            ]
        )
        == 0
    )
    for split in SIZES:
        for suffix in ("ims.npy", "caps.txt", "ids.txt"):
            assert (tmp_path / "a" / f"{split}_{suffix}").read_bytes() == (
                tmp_path / "b" / f"{split}_{suffix}"
            ).read_bytes()
    assert (
        json.loads((tmp_path / "b" / "extract.json").read_text())["source"]
        == json.loads((tmp_path / "a" / "extract.json").read_text())["source"]
    )
    capsys.readouterr()
    assert run(original, tmp_path / "c", "--format", "coco") == 2
    assert "--flickr8k reads the images and captions of its folder; --format does not apply" in capsys.readouterr().err
    shown = " ".join(build_parser().format_help().split())
    assert f"choices: {', '.join(sorted(READERS))})" in shown and "--flickr8k PATH" in shown


def test_pooling_bins_are_adaptive_average_pooling():
    grid = torch.rand(3, 5, 7, 7, dtype=torch.float64)  # (N, D, 7, 7)
    regions = grid.flatten(2).transpose(1, 2).numpy()  # (N, 49, D), region = row * 7 + col
    for size in range(1, 7):
        expected = torch.nn.functional.adaptive_avg_pool2d(grid, size).flatten(2).transpose(1, 2).numpy()
        np.testing.assert_allclose(pool_regions(regions, size), expected, rtol=1e-6)
    assert pool_bins(3) == [(0, 3), (2, 5), (4, 7)] and pool_bins(2) == [(0, 4), (3, 7)]


# --- bad input: one line naming the file, exit 2, nothing written --------------------------------


def _drop_token_file(o: dict) -> tuple[Path, str]:
    (o["root"] / TOKEN_FILE).unlink()
    return o["root"] / TOKEN_FILE, "file not found; a Flickr8K folder holds Flicker8k_Dataset/"


def _drop_image(o: dict) -> tuple[Path, str]:
    name = o["lists"]["dev"][0]
    (o["root"] / IMAGES_DIR / name).unlink()
    return o[
        "root"
    ] / IMAGES_DIR / name, f"image missing: 1 image(s) listed in the split files are not in {IMAGES_DIR}/: {name}"


def _unknown_in_list(o: dict) -> tuple[Path, str]:
    path = o["root"] / SPLIT_FILES["test"]
    path.write_text(path.read_text() + "999_unknown.jpg\n")
    return path, f"1 listed image(s) have no caption in {TOKEN_FILE}: 999_unknown.jpg"


def _caption_count(drop: bool):
    def change(o: dict) -> tuple[Path, str]:
        path, name = o["root"] / TOKEN_FILE, o["lists"]["train"][1]
        lines = path.read_text().splitlines()
        lines = (
            [line for line in lines if line != f"{name}#2" and not line.startswith(f"{name}#2\t")]
            if drop
            else [*lines, f"{name}#5\tA sixth caption ."]
        )
        path.write_text("\n".join(lines) + "\n")
        return path, f"1 listed image(s) have a number of captions other than 5: {name} ({4 if drop else 6})"

    return change


def _outside(kind: str):
    """A photo outside the image folder (it exists, with its 5 captions), named in the test list by a path
    through '..', by its absolute path, or through a link inside the folder that leads to it."""

    def change(o: dict) -> tuple[Path, str]:
        elsewhere = o["root"].parent / "elsewhere"
        elsewhere.mkdir(exist_ok=True)
        write_jpeg(elsewhere / "x.jpg", seed=99)
        if kind == "..":
            name, how = "../../elsewhere/x.jpg", "a path through '..'"
        elif kind == "absolute":
            name, how = str(elsewhere / "x.jpg"), "an absolute path"
        else:
            (o["root"] / IMAGES_DIR / "linked.jpg").symlink_to(elsewhere / "x.jpg")
            name, how = "linked.jpg", f"a link to {elsewhere / 'x.jpg'}, outside it"
        with open(o["root"] / TOKEN_FILE, "a") as tokens:
            tokens.writelines(f"{name}#{n}\tA photo from elsewhere , caption {n} .\n" for n in range(5))
        path = o["root"] / SPLIT_FILES["test"]
        path.write_text(path.read_text() + name + "\n")
        line = len(path.read_text().splitlines())
        return Path(f"{path}:{line}"), (
            f"the image {name!r} is outside the image folder {o['root'] / IMAGES_DIR} ({how})"
        )

    return change


@pytest.mark.parametrize(
    "breaks",
    [
        _drop_token_file,
        _drop_image,
        _unknown_in_list,
        _caption_count(True),
        _caption_count(False),
        _outside(".."),
        _outside("absolute"),
        _outside("link"),
    ],
    ids=[
        "no token file",
        "image missing",
        "unknown image in a list",
        "4 captions",
        "6 captions",
        "a path through ..",
        "an absolute path",
        "a link leading out",
    ],
)
def test_bad_folder_is_one_line_exit_2_before_anything_is_written(original, tmp_path, capsys, breaks, monkeypatch):
    monkeypatch.setattr(job, "ImageEncoder", None)  # never reached
    path, problem = breaks(original)
    out = tmp_path / "out"
    assert run(original, out) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"itrlab: error: data error in {path}: {problem}" or (
        err.startswith(f"itrlab: error: data error in {path}") and problem in err
    ), err
    assert "\n" not in err and not out.exists()


def test_option_errors_with_flickr8k(original, tmp_path, capsys):
    out = tmp_path / "out"
    for extra, says in (
        (["--split-fractions", "0.5,0.25,0.25"], "--split-fractions does not apply"),
        (["--images", str(tmp_path)], "--images does not apply"),
        (["--pool", "3x2"], "--pool: got '3x2'"),
        (["--pool", "7x7"], "not smaller than the 7x7"),
    ):
        assert run(original, out, *extra) == 2
        err = capsys.readouterr().err.strip()
        assert says in err and "\n" not in err
    assert not out.exists()
    with pytest.raises(DataError, match="folder not found"):
        read_flickr8k(tmp_path / "nowhere")


# --- the cache -----------------------------------------------------------------------------------


def test_unchanged_inputs_are_reused_without_reading_the_images(original, encoded, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    assert run(original, out, "--pool", "1x1") == 0
    manifest = json.loads((out / "extract.json").read_text())
    layout_written = (out / "pool1x1" / LAYOUT_FILE).stat().st_mtime_ns
    hashed: list[Path] = []
    real_sha = digests.sha256_file
    monkeypatch.setattr(digests, "sha256_file", lambda path: hashed.append(path) or real_sha(path))
    encoded.clear()
    capsys.readouterr()
    assert run(original, out, "--pool", "1x1") == 0
    assert encoded == [] and hashed == []  # nothing encoded, no image read to check its digest
    assert "nothing to extract" in capsys.readouterr().out
    assert json.loads((out / "extract.json").read_text())["fingerprint"] == manifest["fingerprint"]
    assert (out / "pool1x1" / LAYOUT_FILE).stat().st_mtime_ns == layout_written  # the layout is reused too


def test_a_changed_image_is_extracted_again(original, encoded, tmp_path, capsys):
    out = tmp_path / "out"
    assert run(original, out, "--pool", "1x1") == 0
    before = np.load(out / "pool1x1" / "test_ims.npy")
    changed = original["root"] / IMAGES_DIR / original["lists"]["test"][1]
    write_jpeg(changed, seed=99)
    encoded.clear()
    capsys.readouterr()
    assert run(original, out, "--pool", "1x1") == 0
    err = capsys.readouterr().err
    assert f"1 image(s) changed since they were last read: {changed.name}" in err
    assert "the content of the images changed since it was extracted; extracting again" in err
    assert sum(encoded) == 8
    after = np.load(out / "pool1x1" / "test_ims.npy")
    np.testing.assert_array_equal(after[0], before[0])
    assert not np.allclose(after[1], before[1])  # the new photo's features, in the layout too


def test_a_changed_setting_is_extracted_again_or_refused(original, encoded, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    assert run(original, out) == 0
    real_info = plan.model_info
    monkeypatch.setattr(plan, "model_info", lambda: {**real_info(), "weights": "efficientnet-lite0 9.9"})
    encoded.clear()
    assert run(original, out) == 0  # the weights changed under the same command: extracted again
    assert sum(encoded) == 8 and "the model" in capsys.readouterr().err

    encoded.clear()
    assert run(original, out, "--dtype", "float16") == 2  # an option the user chose: not without --overwrite
    assert "other settings (dtype 'float32' -> 'float16'); pass --overwrite" in capsys.readouterr().err
    assert run(original, out, "--dtype", "float16", "--overwrite") == 0
    assert sum(encoded) == 8 and np.load(out / "train_ims.npy", mmap_mode="r").dtype == np.float16


def test_an_interrupted_extraction_resumes_without_reading_what_it_finished(original, encoded, tmp_path, monkeypatch):
    out = tmp_path / "out"
    written, restore = interrupt_after_shards(monkeypatch, 2)
    assert run(original, out) == 130
    assert written == ["train-00000", "train-00001"] and not (out / "extract.json").exists()

    restore()
    read: list[str] = []
    real_load, real_check, real_sha = shards.try_load_image, plan.check_image, digests.sha256_file
    monkeypatch.setattr(shards, "try_load_image", lambda source: read.append(source.file_name) or real_load(source))
    monkeypatch.setattr(plan, "check_image", lambda path: read.append(Path(path).name) or real_check(path))
    monkeypatch.setattr(digests, "sha256_file", lambda path: read.append(path.name) or real_sha(path))
    encoded.clear()
    assert run(original, out) == 0
    pending = original["lists"]["dev"] + original["lists"]["test"]
    assert sorted(set(read)) == sorted(pending) and sum(encoded) == 4  # each pending image scanned, decoded
    assert not (out / WORK_DIR).exists()


def test_an_image_touched_but_unchanged_is_hashed_again_not_extracted(original, encoded, tmp_path):
    out = tmp_path / "out"
    options = ExtractOptions(out=out, format="flickr8k", captions=original["root"], chunk_size=4, progress=False)
    first = job.extract_dataset(options)
    path = original["root"] / IMAGES_DIR / original["lists"]["train"][0]
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    encoded.clear()
    again = job.extract_dataset(options)
    assert again.get("up_to_date") and again["fingerprint"] == first["fingerprint"] and encoded == []


# --- real photos (slow) --------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(
    not (FLICKR8K / "images").is_dir(),
    reason=f"Flickr8K not found at {FLICKR8K}; it lives beside the checkout in ../shared/data/flickr8k",
)
def test_flickr8k_photos_extract_and_train_an_epoch(tmp_path, capsys, small_bert_dir):
    """36 real photos (24 / 6 / 6) laid out as the original download, one command for the image and text
    features, one epoch of VSE++ on them."""
    from itrlab.assembly import load_experiment
    from itrlab.train import run_experiment

    doc = json.loads((FLICKR8K / "captions_flickr8k.json").read_text(encoding="utf-8"))
    by_id = {im["id"]: im["file_name"] for im in doc["images"]}
    captions: dict[str, list[str]] = {}
    for a in doc["annotations"]:
        captions.setdefault(by_id[a["image_id"]], []).append(a["caption"])
    splits: dict[str, list[str]] = {}
    for line in (FLICKR8K / "splits.txt").read_text().splitlines():
        name, split = line.split()
        splits.setdefault(split, []).append(name)
    root = tmp_path / "Flickr8k"
    (root / IMAGES_DIR).mkdir(parents=True)
    chosen = {"train": splits["train"][:24], "dev": splits["dev"][:6], "test": splits["test"][:6]}
    for split, names in chosen.items():
        (root / SPLIT_FILES[split]).write_text("\n".join(names) + "\n")
        for name in names:  # copies: a link leading out of the image folder is refused
            shutil.copyfile(FLICKR8K / "images" / name, root / IMAGES_DIR / name)
    (root / TOKEN_FILE).write_text(
        "".join(
            f"{name}#{n}\t{text}\n"
            for names in chosen.values()
            for name in names
            for n, text in enumerate(captions[name])
        ),
        encoding="utf-8",
    )

    out = tmp_path / "flickr8k_precomp"
    assert (
        extract_main(
            [
                "--flickr8k",
                str(root),
                "--out",
                str(out),
                "--dtype",
                "float16",
                "--pool",
                "1x1",
                "--text",
                "--text-model",
                str(small_bert_dir),
                "--threads",
                "1",
                "--no-progress",
            ]
        )
        == 0
    ), capsys.readouterr().err
    printed = capsys.readouterr().out
    assert "images/s" in printed and "captions/s" in printed
    assert np.load(out / "test_ims.npy", mmap_mode="r").shape == (6, 49, 1280)
    assert np.load(out / "text" / "test_lengths.npy").shape == (30,)
    config = load_experiment(
        "vsepp_flickr8k",
        [
            f"dataset.root={out / 'pool1x1'}",
            "tracking.enabled=false",
            "train.epochs=1",
            "loss.warmup_epochs=0",
            "train.lr_decay_epochs=[]",
            "train.batch_size=24",
            "eval.test_protocol=all",
            "train.threads=1",
        ],
    )
    result = run_experiment(config, tmp_path / "run")
    assert result.test.n_images == 6 and np.isfinite(result.test.rsum)
