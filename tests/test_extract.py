"""Feature extraction: COCO captions -> 5 per image and splits; images -> EfficientNet-Lite0 precomp."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, SHARED, interrupt_after_shards
from itrlab.data import open_precomp
from itrlab.errors import DataError, UserInputError
from itrlab.extract import job as extract
from itrlab.extract.captions import (
    CocoImage,
    assign_fractions,
    assign_from_file,
    load_coco_captions,
    select_captions,
    split_sizes,
)
from itrlab.extract.image_encoder import ImageEncoder
from itrlab.extract.images import BadImagesError, load_image
from itrlab.extract.job import extract_dataset
from itrlab.extract.plan import WORK_DIR, ExtractOptions
from itrlab.extract.ray_tasks import main as extract_main

COCO_MINI = SHARED / "data" / "coco_mini"
needs_coco_mini = pytest.mark.skipif(
    not (COCO_MINI / "train2017").is_dir(), reason=f"coco_mini images not found at {COCO_MINI}"
)
N_IMAGES = 8


def write_json(path: Path, doc) -> Path:
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def coco_doc(n_captions: dict[int, int]) -> dict:
    """A caption document: image id -> how many captions."""
    images = [{"id": i, "file_name": f"{i:012d}.jpg"} for i in n_captions]
    annotations = [
        {"image_id": i, "id": 100 * i + k, "caption": f"caption {k} of image {i}"}
        for i, n in n_captions.items()
        for k in range(n)
    ]
    return {"images": images, "annotations": annotations}


def make_mini(tmp_path: Path) -> dict:
    """8 coco_mini photos in tmp_path; image 0 has 7 captions, image 1 only 3, the others 5."""
    if not (COCO_MINI / "train2017").is_dir():
        pytest.skip(f"coco_mini not found at {COCO_MINI}")
    doc = json.loads((COCO_MINI / "annotations" / "captions_train2017.json").read_text(encoding="utf-8"))
    images = sorted(doc["images"], key=lambda im: im["file_name"])[:N_IMAGES]
    ids = [im["id"] for im in images]
    annotations = [a for a in doc["annotations"] if a["image_id"] in ids]
    annotations += [
        {"image_id": ids[0], "id": -1, "caption": "An extra\ncaption, sixth."},
        {"image_id": ids[0], "id": -2, "caption": "  a seventh caption "},
    ]
    dropped = [a for a in annotations if a["image_id"] == ids[1]][3:]
    annotations = [a for a in annotations if a not in dropped]
    image_dir = tmp_path / "images"
    image_dir.mkdir()
    for im in images:
        shutil.copy(COCO_MINI / "train2017" / im["file_name"], image_dir / im["file_name"])
    captions = write_json(tmp_path / "captions.json", {"images": images, "annotations": annotations})
    return {
        "images": image_dir,
        "captions": captions,
        "ids": ids,
        "files": [im["file_name"] for im in images],
        "annotations": annotations,
        "tmp": tmp_path,
    }


@pytest.fixture
def mini(tmp_path: Path) -> dict:
    """A fresh copy that a test may change."""
    return make_mini(tmp_path)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict:
    """The 7 usable images of a mini set extracted once (float32, chunks and batches of 2): out/."""
    mini = make_mini(tmp_path_factory.mktemp("reference"))
    mini["manifest"] = extract_dataset(options(mini, "out"))
    mini["out"] = mini["tmp"] / "out"
    return mini


def options(mini: dict, out: str, **kwargs) -> ExtractOptions:
    kwargs = {"split_fractions": "0.5,0.25,0.25", "chunk_size": 2, "batch_size": 2, "progress": False, **kwargs}
    return ExtractOptions(images=mini["images"], captions=mini["captions"], out=mini["tmp"] / out, **kwargs)


class CountingEncoder(ImageEncoder):
    images: list[int] = []  # images encoded by every instance, one entry per batch

    def __call__(self, pixels):
        CountingEncoder.images.append(len(pixels))
        return super().__call__(pixels)


@pytest.fixture
def counting(monkeypatch):
    CountingEncoder.images = []
    monkeypatch.setattr(extract, "ImageEncoder", CountingEncoder)
    return CountingEncoder.images


# --- captions and splits (no images, no model) --------------------------------------------------


def test_captions_truncated_excluded_padded(tmp_path):
    coco = load_coco_captions(write_json(tmp_path / "c.json", coco_doc({1: 7, 2: 3, 3: 5, 4: 0})))
    selection = select_captions(coco)
    assert [im.image_id for im in selection.images] == [1, 3]
    assert selection.images[0].captions == tuple(f"caption {k} of image 1" for k in range(5))
    assert (selection.truncated_images, selection.dropped_captions) == (1, 2)
    assert [(im.image_id, n) for im, n in selection.excluded] == [(2, 3), (4, 0)]
    assert "dropped 2 captions" in " ".join(selection.summary())

    padded = select_captions(coco, pad=True)
    assert [im.image_id for im in padded.images] == [1, 2, 3]  # an image without captions stays out
    assert padded.images[1].captions == tuple(f"caption {k} of image 2" for k in (0, 1, 2, 0, 1))
    assert [(im.image_id, n) for im, n in padded.padded] == [(2, 3)]


def test_malformed_json_names_file_and_line(tmp_path):
    path = tmp_path / "c.json"
    path.write_text('{"images": [\n {"id": 1, "file_name": "a.jpg"},\n ]}', encoding="utf-8")
    with pytest.raises(DataError, match=r"c\.json:3: malformed JSON") as info:
        load_coco_captions(path)
    assert info.value.path == path and info.value.line == 3
    with pytest.raises(DataError, match="no 'annotations' list"):
        load_coco_captions(write_json(tmp_path / "d.json", {"images": []}))
    with pytest.raises(DataError, match=r"images\[0\] \(id 1\): 'file_name' must be"):
        load_coco_captions(write_json(tmp_path / "e.json", {"images": [{"id": 1}], "annotations": []}))
    with pytest.raises(DataError, match="file not found"):
        load_coco_captions(tmp_path / "missing.json")


def test_unknown_image_ids_are_listed(tmp_path):
    doc = coco_doc({1: 5})
    doc["annotations"] += [
        {"image_id": 999, "caption": "x"},
        {"image_id": 998, "caption": "y"},
        {"image_id": 999, "caption": "z"},
    ]
    with pytest.raises(DataError, match=r"3 annotations refer to 2 image ids that are not in 'images': 998, 999"):
        load_coco_captions(write_json(tmp_path / "c.json", doc))


def test_fraction_split_is_seeded_and_complete():
    images = [CocoImage(i, f"{i}.jpg", ("c",) * 5) for i in range(80)]
    splits = assign_fractions(images, (0.6, 0.2, 0.2), seed=0)
    assert {k: len(v) for k, v in splits.items()} == {"train": 48, "dev": 16, "test": 16}
    assert sorted(im.image_id for v in splits.values() for im in v) == list(range(80))
    assert assign_fractions(images[::-1], "0.6,0.2,0.2", seed=0) == splits  # the file's order does not matter
    assert assign_fractions(images, (0.6, 0.2, 0.2), seed=1) != splits
    assert split_sizes(7, (0.5, 0.25, 0.25)) == [3, 2, 2]  # largest remainder
    with pytest.raises(UserInputError, match="split 'test' would get no image"):
        assign_fractions(images[:3], (0.8, 0.15, 0.05))
    with pytest.raises(UserInputError, match="must sum to 1"):
        assign_fractions(images, (0.6, 0.2, 0.3))


def test_split_files(tmp_path):
    coco = load_coco_captions(write_json(tmp_path / "c.json", coco_doc({1: 5, 2: 5, 3: 5, 4: 2})))
    selected = select_captions(coco).images
    text = tmp_path / "split.txt"
    text.write_text("# file or id, split\n000000000001.jpg train\n2,test\n4 train\n", encoding="utf-8")
    splits, unassigned = assign_from_file(selected, text, coco.images)
    assert {k: [im.image_id for im in v] for k, v in splits.items()} == {"train": [1], "test": [2]}
    assert unassigned == 1  # image 3 (image 4 is listed but has too few captions)

    karpathy = write_json(
        tmp_path / "dataset_coco.json",
        {"images": [{"filename": "000000000003.jpg", "split": "val"}, {"cocoid": 1, "split": "train"}]},
    )
    splits, _ = assign_from_file(selected, karpathy, coco.images)
    assert {k: [im.image_id for im in v] for k, v in splits.items()} == {"val": [3], "train": [1]}

    text.write_text("000000000001.jpg train\nnope.jpg test\n77 dev\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"2 entries name no image of the caption file: 'nope.jpg', '77'"):
        assign_from_file(selected, text, coco.images)
    text.write_text("1 train\n000000000001.jpg test\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"split\.txt:2: .* assigned to both 'train' and 'test'"):
        assign_from_file(selected, text, coco.images)


# --- extraction on real photos -------------------------------------------------------------------


def test_layout_shapes_global_and_captions(reference):
    mini, manifest, out = reference, reference["manifest"], reference["out"]
    # image 1 has 3 captions: excluded; image 0 keeps its first 5 of 7
    assert manifest["captions"]["dropped_captions"] == 2 and manifest["captions"]["truncated_images"] == 1
    assert [e["id"] for e in manifest["captions"]["excluded_images"]] == [mini["ids"][1]]
    assert {s: c["images"] for s, c in manifest["splits"].items()} == {"train": 3, "dev": 2, "test": 2}
    assert not (out / WORK_DIR).exists()  # shards removed after assembly

    by_id = {}
    for a in mini["annotations"]:
        by_id.setdefault(a["image_id"], []).append(" ".join(a["caption"].split()))
    seen = []
    for split in ("train", "dev", "test"):
        data = open_precomp(out, split)  # the layout itrlab trains on
        n = data.n_images
        assert data.features.shape == (n, 49, 1280) and data.features.dtype == np.float32
        pooled = np.load(out / f"{split}_global.npy")
        assert pooled.shape == (n, 1280)
        np.testing.assert_allclose(pooled, np.asarray(data.features).mean(axis=1), rtol=1e-4, atol=1e-5)
        assert np.all(np.asarray(data.features) >= 0) and np.all(np.asarray(data.features) <= 6)  # ReLU6
        ids = [int(line) for line in (out / f"{split}_ids.txt").read_text().split()]
        assert len(ids) == n
        assert data.captions == [c for i in ids for c in by_id[i][:5]]
        seen += ids
    assert sorted(seen) == sorted(i for i in mini["ids"] if i != mini["ids"][1])
    assert "An extra caption, sixth." not in (out / "train_caps.txt").read_text() + (out / "dev_caps.txt").read_text()

    # each row is that image's own features: encoding it alone gives the same grid
    first = int((out / "train_ids.txt").read_text().split()[0])
    pixels = load_image(mini["images"] / mini["files"][mini["ids"].index(first)])
    regions, pooled = ImageEncoder()(pixels[None])
    np.testing.assert_allclose(np.load(out / "train_ims.npy")[0], regions[0], rtol=1e-3, atol=1e-4)


def test_float16_halves_the_file_and_needs_overwrite(reference, tmp_path):
    f32, f16 = reference["out"], tmp_path / "f16"
    shutil.copytree(f32, f16)
    opts = dict(
        images=reference["images"],
        captions=reference["captions"],
        out=f16,
        dtype="float16",
        split_fractions="0.5,0.25,0.25",
        chunk_size=2,
        batch_size=2,
        progress=False,
    )
    with pytest.raises(UserInputError, match=r"other settings \(dtype 'float32' -> 'float16'\); pass --overwrite"):
        extract_dataset(ExtractOptions(**opts))
    assert extract_dataset(ExtractOptions(**opts, overwrite=True))["dtype"] == "float16"
    for split in ("train", "dev", "test"):
        size32, size16 = (f32 / f"{split}_ims.npy").stat().st_size, (f16 / f"{split}_ims.npy").stat().st_size
        assert abs(size16 / size32 - 0.5) < 0.01
        a16 = open_precomp(f16, split).features
        assert a16.dtype == np.float16 and np.load(f16 / f"{split}_global.npy").dtype == np.float16
        np.testing.assert_allclose(np.asarray(a16, np.float32), np.load(f32 / f"{split}_ims.npy"), rtol=1e-2, atol=1e-2)
        assert (f16 / f"{split}_caps.txt").read_text() == (f32 / f"{split}_caps.txt").read_text()


def test_resume_skips_finished_chunks(mini, counting, monkeypatch, reference):
    written, restore = interrupt_after_shards(monkeypatch, 2)
    with pytest.raises(KeyboardInterrupt):
        extract_dataset(options(mini, "out"))
    out = mini["tmp"] / "out"
    assert not (out / "extract.json").exists()
    stored = sum(len(json.loads((out / WORK_DIR / f"{name}.json").read_text())["kept"]) for name in written)
    assert written == ["train-00000", "train-00001"] and stored == 3  # train: 3 images in chunks of 2
    assert counting == [2, 1, 2]  # the third chunk was computed, then interrupted before it was stored

    restore()
    counting.clear()
    manifest = extract_dataset(options(mini, "out"))
    assert sum(counting) == 7 - stored  # only the images of the unfinished chunks
    assert manifest["run"]["images_this_run"] == 7 - stored
    assert not (out / WORK_DIR).exists()

    counting.clear()
    assert extract_dataset(options(mini, "out"))["fingerprint"] == manifest["fingerprint"]
    assert counting == []  # finished: nothing to do

    for split in ("train", "dev", "test"):  # the same files as an uninterrupted run
        for name in (f"{split}_ims.npy", f"{split}_global.npy"):
            np.testing.assert_array_equal(np.load(out / name), np.load(reference["out"] / name))
        for name in (f"{split}_caps.txt", f"{split}_ids.txt"):
            assert (out / name).read_text() == (reference["out"] / name).read_text()
    assert manifest["splits"] == reference["manifest"]["splits"]


def test_bad_images_stop_the_job_before_the_model_loads(mini, monkeypatch):
    (mini["images"] / mini["files"][2]).write_bytes(b"\xff\xd8 these are not JPEG bytes" * 20)
    (mini["images"] / mini["files"][3]).unlink()
    data = (mini["images"] / mini["files"][4]).read_bytes()
    (mini["images"] / mini["files"][4]).write_bytes(data[: len(data) // 2])  # truncated

    def no_model(*args, **kwargs):
        raise AssertionError("the model must not load")

    monkeypatch.setattr(extract, "ImageEncoder", no_model)
    with pytest.raises(BadImagesError) as info:
        extract_dataset(options(mini, "out"))
    message = str(info.value)
    assert "3 bad image(s)" in message and "--skip-bad" in message
    problems = dict(info.value.bad)
    assert set(problems) == {mini["files"][2], mini["files"][3], mini["files"][4]}
    assert problems[mini["files"][3]] == "file not found"
    assert "truncated" in problems[mini["files"][4]]


def test_skip_bad_and_pad_captions(mini, capsys):
    bad = mini["files"][2]
    (mini["images"] / bad).write_bytes(b"garbage" * 100)
    code = extract_main(
        [
            "--images",
            str(mini["images"]),
            "--captions",
            str(mini["captions"]),
            "--out",
            str(mini["tmp"] / "out"),
            "--split-fractions",
            "0.5,0.25,0.25",
            "--skip-bad",
            "--pad-captions",
            "--dtype",
            "float16",
            "--no-progress",
            "--chunk-size",
            "4",
            "--batch-size",
            "4",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert f"skipping 1 bad image(s): {bad} (not an image" in captured.err
    assert f"bad images skipped (1): {bad}" in captured.out and "images/s" in captured.out
    assert "1 padded" in captured.out
    out = mini["tmp"] / "out"
    manifest = json.loads((out / "extract.json").read_text())
    assert [(b["file_name"], b["id"]) for b in manifest["bad_images"]] == [(bad, mini["ids"][2])]
    assert [e["id"] for e in manifest["captions"]["padded_images"]] == [mini["ids"][1]]
    ids = [int(x) for s in ("train", "dev", "test") for x in (out / f"{s}_ids.txt").read_text().split()]
    assert len(ids) == 7 and mini["ids"][2] not in ids and mini["ids"][1] in ids  # 8 - bad (image 1 padded)
    assert sum(open_precomp(out, s).n_images for s in ("train", "dev", "test")) == 7
    lines = (
        (out / "train_caps.txt").read_text().splitlines()
        + (out / "dev_caps.txt").read_text().splitlines()
        + (out / "test_caps.txt").read_text().splitlines()
    )
    padded_at = ids.index(mini["ids"][1]) * 5
    first3 = [" ".join(a["caption"].split()) for a in mini["annotations"] if a["image_id"] == mini["ids"][1]]
    assert lines[padded_at : padded_at + 5] == [first3[0], first3[1], first3[2], first3[0], first3[1]]


def test_cli_input_errors_exit_2_with_one_line(mini, capsys):
    broken = mini["tmp"] / "broken.json"
    broken.write_text('{"images": [}', encoding="utf-8")
    base = ["--images", str(mini["images"]), "--out", str(mini["tmp"] / "out"), "--no-progress"]
    assert extract_main([*base, "--captions", str(broken)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"itrlab: error: data error in {broken}:1: malformed JSON") and "\n" not in err
    assert not (mini["tmp"] / "out").exists()  # nothing written for bad input

    doc = json.loads(mini["captions"].read_text())
    doc["annotations"].append({"image_id": 4242, "caption": "who am I"})
    unknown = write_json(mini["tmp"] / "unknown.json", doc)
    assert extract_main([*base, "--captions", str(unknown)]) == 2
    assert "not in 'images': 4242" in capsys.readouterr().err

    assert extract_main([*base, "--captions", str(mini["captions"]), "--split-fractions", "0.5,0.5"]) == 2
    assert "2 fractions for 3 splits" in capsys.readouterr().err

    assert extract_main([*base, "--annotations", str(mini["captions"]), "--format", "cocoa"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err.startswith("itrlab: error: --format: got 'cocoa'; known formats: coco, ")
        and err.endswith("(did you mean 'coco'?)")
        and "\n" not in err
    )


@needs_coco_mini
@pytest.mark.parametrize("kind", ["..", "absolute", "link"])
def test_an_image_named_outside_the_image_folder_is_one_line_before_anything_is_read(mini, capsys, kind):
    """A COCO caption file whose file_name leaves --images: through '..', as an absolute
    path, or through a link inside the folder; the photo exists out there, and is never read."""
    outside = mini["tmp"] / "elsewhere.jpg"
    shutil.copy(mini["images"] / mini["files"][0], outside)
    name = {"..": "../elsewhere.jpg", "absolute": str(outside), "link": "linked.jpg"}[kind]
    if kind == "link":
        (mini["images"] / "linked.jpg").symlink_to(outside)
    doc = json.loads(mini["captions"].read_text())
    doc["images"][0]["file_name"] = name
    captions = write_json(mini["tmp"] / "outside.json", doc)
    assert (
        extract_main(
            [
                "--images",
                str(mini["images"]),
                "--captions",
                str(captions),
                "--out",
                str(mini["tmp"] / "out"),
                "--no-progress",
                "--split-fractions",
                "0.5,0.25,0.25",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert (
        err.startswith(
            f"itrlab: error: data error in {captions}: the image {name!r} is outside the image folder {mini['images']}"
        )
        and "\n" not in err
    ), err
    assert not (mini["tmp"] / "out").exists()


@pytest.mark.e2e
def test_job_script_reports_bad_input_without_loading_the_model(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "jobs" / "extract_features.py"),
            "--images",
            str(tmp_path),
            "--captions",
            str(tmp_path / "none.json"),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip() == f"itrlab: error: data error in {tmp_path / 'none.json'}: file not found"


@pytest.mark.e2e
def test_ray_tasks_give_the_same_files(reference, tmp_path, monkeypatch):
    ray = pytest.importorskip("ray")
    from itrlab.extract.ray_tasks import extract_dataset as extract_on_cluster

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR")
    try:
        opts = ExtractOptions(
            images=reference["images"],
            captions=reference["captions"],
            out=tmp_path / "out",
            split_fractions="0.5,0.25,0.25",
            chunk_size=2,
            batch_size=2,
            progress=False,
        )
        manifest = extract_on_cluster(opts, use_ray=True)
    finally:
        ray.shutdown()
    assert manifest["run"]["backend"] == "ray" and manifest["splits"] == reference["manifest"]["splits"]
    for split in ("train", "dev", "test"):
        np.testing.assert_allclose(
            np.load(tmp_path / "out" / f"{split}_ims.npy"),
            np.load(reference["out"] / f"{split}_ims.npy"),
            rtol=1e-3,
            atol=1e-4,
        )  # 1 thread vs 2
        assert (tmp_path / "out" / f"{split}_ids.txt").read_text() == (
            reference["out"] / f"{split}_ids.txt"
        ).read_text()
