"""Karpathy's split files (``--format karpathy``, docs/data.md#formats): a file written from the shipped Flickr8K
copy, extracted with the reader and the real EfficientNet, gives the COCO-format route's files on the same
images; the file's split names mapped and its captions chosen as COCO captions are; bad input one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import SHARED
from itrlab.extract.plan import ExtractOptions, plan_splits
from itrlab.extract.ray_tasks import main as extract_main
from itrlab.trained.photos import photo_names

FLICKR8K = SHARED / "data" / "flickr8k"
needs_flickr8k = pytest.mark.skipif(
    not (FLICKR8K / "images").is_dir(), reason=f"the Flickr8K copy is not at {FLICKR8K} (../shared beside the checkout)"
)
PER_SPLIT = {"train": 3, "dev": 2, "test": 2}  # the first images of each official split; train's last as restval
FILES = ("ims.npy", "global.npy", "caps.txt", "ids.txt")


def flickr8k_subset(tmp_path: Path) -> tuple[Path, Path]:
    """The same images twice: Karpathy's file (dataset_flickr8k.json) and the COCO route's split file."""
    coco = json.loads((FLICKR8K / "captions_flickr8k.json").read_text(encoding="utf-8"))
    by_name = {image["file_name"]: image for image in coco["images"]}
    captions: dict[int, list[str]] = {}
    for annotation in coco["annotations"]:
        captions.setdefault(annotation["image_id"], []).append(annotation["caption"])
    chosen: list[tuple[str, str]] = []
    for line in (FLICKR8K / "splits.txt").read_text(encoding="utf-8").splitlines():
        name, split = line.split()
        if sum(s == split for _, s in chosen) < PER_SPLIT[split]:
            chosen.append((name, split))
    images = []
    for name, split in chosen:
        image = by_name[name]
        named = {"dev": "val"}.get(split, split)
        if split == "train" and sum(s == "train" for _, s in chosen[: len(images) + 1]) == PER_SPLIT["train"]:
            named = "restval"
        images.append(
            {
                "filename": name,
                "imgid": image["id"],
                "split": named,
                "sentences": [{"raw": c, "tokens": c.lower().split()} for c in captions[image["id"]]],
            }
        )
    karpathy = tmp_path / "dataset_flickr8k.json"
    karpathy.write_text(json.dumps({"dataset": "flickr8k", "images": images}), encoding="utf-8")
    (tmp_path / "splits.txt").write_text("".join(f"{name} {split}\n" for name, split in chosen), encoding="utf-8")
    return karpathy, tmp_path / "splits.txt"


@needs_flickr8k
def test_karpathy_file_gives_the_coco_routes_files(tmp_path, capsys):
    karpathy, splits = flickr8k_subset(tmp_path)
    common = ["--images", str(FLICKR8K / "images"), "--no-progress", "--chunk-size", "4", "--batch-size", "4"]
    assert (
        extract_main(
            [
                "--captions",
                str(FLICKR8K / "captions_flickr8k.json"),
                "--split-file",
                str(splits),
                "--out",
                str(tmp_path / "coco"),
                *common,
            ]
        )
        == 0
    ), capsys.readouterr().err
    assert (
        extract_main(
            ["--format", "karpathy", "--annotations", str(karpathy), "--out", str(tmp_path / "karpathy"), *common]
        )
        == 0
    ), capsys.readouterr().err
    assert "splits: train 3, dev 2, test 2 images (train and restval -> train" in capsys.readouterr().err
    for split in PER_SPLIT:
        for suffix in FILES:
            assert (tmp_path / "karpathy" / f"{split}_{suffix}").read_bytes() == (
                tmp_path / "coco" / f"{split}_{suffix}"
            ).read_bytes(), f"{split}_{suffix}"
    manifest = tmp_path / "karpathy" / "extract.json"
    assert json.loads(manifest.read_text())["source"]["karpathy"] == str(karpathy.resolve())
    folder, names = photo_names(manifest)  # a trained model's photos, found again through the reader
    everything = photo_names(tmp_path / "coco" / "extract.json")[1]  # the COCO file names all 8,000
    assert folder.resolve() == (FLICKR8K / "images").resolve() and len(names) == sum(PER_SPLIT.values())
    assert names == {image_id: everything[image_id] for image_id in names}


def write(path: Path, images: list[dict], **doc) -> Path:
    path.write_text(json.dumps({"images": images, **doc}), encoding="utf-8")
    return path


def entry(i: int, split: str, n: int = 5, **extra) -> dict:
    return {
        "filename": f"{i}.jpg",
        "split": split,
        "imgid": i,
        "sentences": [
            {"raw": f"photo {i} , caption {k} .", "tokens": ["photo", str(i), "caption", str(k)]} for k in range(n)
        ],
        **extra,
    }


def test_split_names_ids_and_captions(tmp_path):
    images = [
        entry(0, "test"),
        entry(1, "restval", filepath="val2014", cocoid=4242),
        entry(2, "val", n=7),
        entry(3, "train", n=3),
        entry(4, "train"),
    ]
    images[4]["sentences"][1] = {"tokens": ["a", "tokenized", "caption"]}
    path = write(tmp_path / "dataset_coco.json", images, dataset="coco")
    for name in ("0.jpg", "val2014/1.jpg", "2.jpg", "3.jpg", "4.jpg", "extra.png"):  # the photos (never decoded here)
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).touch()
    options = ExtractOptions(out=tmp_path / "out", images=tmp_path, captions=path, format="karpathy")
    splits, report, messages = plan_splits(options)
    assert {s: [(im.image_id, im.file_name) for im in ims] for s, ims in splits.items()} == {
        "train": [(4242, "val2014/1.jpg"), (4, "4.jpg")],
        "dev": [(2, "2.jpg")],
        "test": [(0, "0.jpg")],
    }
    assert splits["train"][1].captions[1] == "a tokenized caption" and len(splits["dev"][0].captions) == 5
    assert [e["id"] for e in report["excluded_images"]] == [3] and report["dropped_captions"] == 2
    assert (report["photos"]["photos_without_captions"], report["photos"]["photos_without_captions_first"]) == (
        1,
        ["extra.png"],
    )
    assert (
        report["images_in_file"] == 5
        and report["split"]["dataset"] == "coco"
        and not any("does not apply" in m for m in messages)
    )
    padded, _, _ = plan_splits(
        ExtractOptions(out=tmp_path / "out", images=tmp_path, captions=path, format="karpathy", pad_captions=True)
    )
    assert [im.image_id for im in padded["train"]] == [4242, 3, 4]


@pytest.mark.parametrize(
    "change, says",
    [
        (lambda images: images.append(entry(9, "valid")), "images[2] (9.jpg): split 'valid'; allowed: train, restval"),
        (lambda images: images.append(entry(9, "train", filename="0.jpg")), "images[2]: 0.jpg is also images[0]"),
        (lambda images: images.append({**entry(9, "test"), "imgid": 0}), "image id 0 is also images[0]'s"),
        (lambda images: images[0].pop("sentences"), "images[0] (0.jpg): 'sentences' must be a list"),
        (lambda images: images[1]["sentences"].append({"raw": 5}), "sentences[5] has neither a 'raw' string"),
        (
            lambda images: images.append(entry(9, "test", filename="../9.jpg")),
            "the image '../9.jpg' is outside the image",
        ),
    ],
    ids=["unknown split", "a file twice", "an id twice", "no sentences", "a bad sentence", "outside the folder"],
)
def test_bad_file_is_one_line_exit_2_before_anything_is_written(tmp_path, capsys, change, says):
    images = [entry(0, "train"), entry(1, "test")]
    change(images)
    path = write(tmp_path / "dataset_flickr8k.json", images)
    assert (
        extract_main(
            [
                "--format",
                "karpathy",
                "--annotations",
                str(path),
                "--images",
                str(tmp_path),
                "--out",
                str(tmp_path / "out"),
                "--no-progress",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"itrlab: error: data error in {path}") and says in err and "\n" not in err, err
    assert not (tmp_path / "out").exists()


def test_options_the_file_decides_are_refused(tmp_path, capsys):
    path = write(tmp_path / "dataset_flickr8k.json", [entry(0, "train")])
    base = ["--format", "karpathy", "--annotations", str(path), "--images", str(tmp_path), "--out", str(tmp_path / "o")]
    assert extract_main([*base, "--split-fractions", "0.5,0.25,0.25"]) == 2
    assert "--format karpathy reads the split of its file" in capsys.readouterr().err
    assert extract_main(["--format", "karpathy", "--images", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "--format karpathy needs --images and --annotations (Karpathy's split file" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
