"""Your own photos in two commands (docs/data.md#your-own-photos): the extraction of a folder of photos writes its
data set config beside the features and prints the command that trains on it; the photos the caption file does not
list, and the listed photos the folder lacks, are counted and named; bad input is one line, exit status 2, before
anything is extracted. End to end: the page's two commands, run as they are written on a clean copy of the project,
give a run, an MLflow experiment and a gallery named after the folder."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image, ImageDraw

from conftest import REPO
from itrlab.extract.dataset_config import split_roles
from itrlab.extract.plan import ExtractOptions, plan_splits
from itrlab.extract.ray_tasks import main as extract_main

COLOURS = ["red", "green", "blue", "yellow", "white", "black", "purple", "orange"]
RGB = {
    "red": (220, 30, 30),
    "green": (30, 180, 60),
    "blue": (30, 60, 220),
    "yellow": (240, 220, 40),
    "white": (245, 245, 245),
    "black": (15, 15, 15),
    "purple": (140, 40, 160),
    "orange": (250, 140, 20),
}
SHAPES = ["square", "circle"]


def photo(path: Path, index: int) -> tuple[str, str, str]:
    """A small photo of a shape of one colour on a background of another; (shape, colour, background)."""
    shape, colour = SHAPES[index % 2], COLOURS[index % len(COLOURS)]
    background = COLOURS[(index // len(COLOURS) + 3 + index) % len(COLOURS)]
    if background == colour:
        background = COLOURS[(COLOURS.index(colour) + 1) % len(COLOURS)]
    image = Image.new("RGB", (96, 72), RGB[background])
    draw = ImageDraw.Draw(image)
    box = (20 + index % 5 * 4, 12, 70, 60)
    (draw.rectangle if shape == "square" else draw.ellipse)(box, fill=RGB[colour])
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, quality=90)
    return shape, colour, background


def photo_folder(folder: Path, listed: int, unlisted: int = 0, missing: int = 0) -> Path:
    """``listed`` photos with five captions each in ``folder/captions.json`` (COCO format), ``unlisted`` photos it
    does not list, and ``missing`` listed photos that the folder lacks; the caption file's path."""
    images, annotations = [], []
    for i in range(listed + unlisted + missing):
        name = f"IMG_{i:04d}.jpg"
        shape, colour, background = photo(folder / name, i)
        if i >= listed and i < listed + unlisted:
            continue
        if i >= listed + unlisted:
            (folder / name).unlink()
        images.append({"id": 1000 + i, "file_name": name})
        annotations += [
            {"id": 5 * i + k, "image_id": 1000 + i, "caption": text}
            for k, text in enumerate(
                [
                    f"a {colour} {shape} on a {background} background",
                    f"a {shape} in {colour}",
                    f"{background} picture with a {colour} {shape}",
                    f"the {colour} {shape} sits on {background}",
                    f"one {colour} {shape}",
                ]
            )
        ]
    captions = folder / "captions.json"
    captions.write_text(json.dumps({"images": images, "annotations": annotations}), encoding="utf-8")
    return captions


def extract(capsys, *argv: str) -> tuple[int, str, str]:
    status = extract_main([*argv, "--no-progress", "--no-ray"])
    out, err = capsys.readouterr()
    return status, out, err


# -- what the caption file covers of the folder --------------------------------------------------------------------


def test_photos_without_captions_and_captions_without_photos_are_counted_and_named(tmp_path):
    captions = photo_folder(tmp_path / "holiday", listed=6, unlisted=8, missing=2)
    (tmp_path / "holiday" / "notes.txt").write_text("not a photo")
    options = ExtractOptions(
        out=tmp_path / "out", images=tmp_path / "holiday", captions=captions, split_fractions="0.6,0.2,0.2"
    )
    _, report, messages = plan_splits(options)
    assert report["photos"] == {
        "photos_in_folder": 14,
        "listed_images": 8,
        "photos_without_captions": 8,
        "photos_without_captions_first": [f"IMG_{i:04d}.jpg" for i in range(6, 11)],
        "captions_without_photos": 2,
        "captions_without_photos_first": ["IMG_0014.jpg", "IMG_0015.jpg"],
    }
    assert (
        f"photos: 14 in {tmp_path / 'holiday'}, 6 of them listed in the caption file; 8 not listed (no captions), "
        f"2 listed but not in the folder" in messages
    )
    assert (
        "8 photos without captions, left out (the caption file does not list them): IMG_0006.jpg, IMG_0007.jpg, "
        "IMG_0008.jpg, IMG_0009.jpg, IMG_0010.jpg and 3 more" in messages
    )
    assert any(line.startswith("2 captioned photos not in the folder") and "--skip-bad" in line for line in messages)


@pytest.mark.parametrize(
    "case, says",
    [
        ("no photo", "holds no photo (no file whose suffix Pillow opens: .jpg"),
        ("another folder's captions", "lists none of the 3 photos in"),
        (
            "a shipped data set's name, from --out",
            "the data set's name 'coco_mini' (the --out folder's): a shipped data set",
        ),
        ("a shipped data set's name", "--name 'flickr8k_precomp': a shipped data set has this name"),
        ("not a folder name", "--name 'my photos': a data set's name is one folder name"),
        ("--name without photos", "--name names the data set config an extraction of photos writes; --text-only"),
    ],
)
def test_bad_input_is_one_line_exit_2_before_anything_is_extracted(tmp_path, capsys, case, says):
    folder = tmp_path / "holiday"
    captions = photo_folder(folder, listed=3)
    out = tmp_path / "data" / "holiday"
    argv = ["--images", str(folder), "--captions", str(captions), "--out", str(out)]
    if case == "no photo":
        for path in folder.glob("*.jpg"):
            path.unlink()
    elif case == "another folder's captions":
        other = photo_folder(tmp_path / "other", listed=3)
        doc = json.loads(other.read_text())
        for image in doc["images"]:
            image["file_name"] = "elsewhere/" + image["file_name"]
        other.write_text(json.dumps(doc))
        argv[3] = str(other)
    elif case == "a shipped data set's name, from --out":
        out = tmp_path / "data" / "coco_mini"
        argv[5] = str(out)
    elif case == "a shipped data set's name":
        argv += ["--name", "flickr8k_precomp"]
    elif case == "not a folder name":
        argv += ["--name", "my photos"]
    else:
        argv = ["--text-only", "--out", str(out), "--name", "holiday"]
    status, _, err = extract(capsys, *argv)
    assert status == 2 and says in err and err.count("\n") == 1, err
    assert not out.exists()


def test_the_splits_of_the_written_config():
    assert split_roles(["train", "dev", "test"]) == {"train": "train", "val": "dev", "test": "test"}
    assert split_roles(["test", "val", "train"]) == {"train": "train", "val": "val", "test": "test"}
    assert split_roles(["a", "b", "c"]) == {"train": "a", "val": "b", "test": "c"}
    assert split_roles(["train", "test"]) is None


# -- the two commands, as the page writes them -----------------------------------------------------------------------

PAGE = REPO / "docs" / "data.md"
FOLDER_IN_PAGE = "~/holiday"  # where the page's commands read the photos


def page_commands() -> list[str]:
    """The shell block of docs/data.md's "Your own photos": its two commands."""
    section = PAGE.read_text(encoding="utf-8").split("\n## Your own photos\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def clean_copy(where: Path) -> Path:
    """The project as a clone holds it: its package, jobs and configs, nothing a run wrote."""
    for part in ("platform", "jobs", "configs"):
        shutil.copytree(REPO / part, where / part, ignore=shutil.ignore_patterns("__pycache__"))
    return where


def run(words: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """A command as a user runs it from the project folder: its ``python`` this venv's, the copy's package."""
    assert words[0] == "python"
    env = {key: value for key, value in os.environ.items() if key not in ("ITRLAB_CONFIG_DIR", "MLFLOW_TRACKING_URI")}
    env.update(PYTHONPATH=str(cwd / "platform"), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, *words[1:]], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


@pytest.mark.e2e
def test_a_folder_of_photos_goes_to_a_model_named_after_it_in_the_pages_two_commands(tmp_path):
    extraction, training = page_commands()
    photos = tmp_path / "home" / "holiday"
    photo_folder(photos, listed=20, unlisted=4)
    project = clean_copy(tmp_path / "itrlab")

    done = run(shlex.split(extraction.replace(FOLDER_IN_PAGE, str(photos))), project)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout.splitlines()
    assert out[-1] == f"  {training}"  # the page's second command, printed as the extraction's last line
    assert (
        "4 photos without captions, left out (the caption file does not list them): IMG_0020.jpg, IMG_0021.jpg, "
        "IMG_0022.jpg, IMG_0023.jpg" in out
    )
    assert (
        f"photos: 24 in {photos}, 20 of them listed in the caption file; 4 not listed (no captions), 0 listed "
        "but not in the folder" in out
    )
    manifest = json.loads((project / "data" / "holiday" / "extract.json").read_text())
    assert manifest["captions"]["photos"]["photos_without_captions"] == 4
    assert {split: n["images"] for split, n in manifest["splits"].items()} == {"train": 12, "dev": 4, "test": 4}
    written = (project / "data" / "holiday" / "holiday.yaml").read_text()
    assert "name: holiday\nkind: precomp\nroot: data/holiday\n" in written and f"#   {training}\n" in written

    done = run(shlex.split(training), project)
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    run_dir = re.search(r"^run directory: (runs/vsepp_holiday/\S+)$", out, re.M).group(1)
    run_id = re.search(r"^MLflow: run (\w+) in experiment 'vsepp_holiday' at sqlite:///(.+)$", out, re.M)
    assert "dataset holiday" in out and run_id and run_id.group(2) == str(project / "mlflow.db")
    chance = out.split("Chance (random scores on 4 images x 5 captions)\n", 1)[1].splitlines()
    assert chance[1].split()[-3:] == ["25.00", "100.00", "100.00"]  # text to image: R@1 1 in 4, R@5 and R@10 all
    assert chance[2].startswith("  rsum ") and "95% range" in chance[2]

    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    mlflow_run = client.get_run(run_id.group(1))
    assert client.get_experiment(mlflow_run.info.experiment_id).name == "vsepp_holiday"
    assert mlflow_run.info.run_name == f"vsepp_holiday-{Path(run_dir).name}"
    assert mlflow_run.data.tags["dataset"] == "holiday"
    assert mlflow_run.data.metrics["6_chance/t2i_R01"] == pytest.approx(25.0)  # two-digit K: the charts sort
    gallery = Path(client.download_artifacts(mlflow_run.info.run_id, "gallery.html", str(tmp_path / "got")))
    assert "<title>What vsepp retrieves: holiday test</title>" in gallery.read_text(encoding="utf-8")
