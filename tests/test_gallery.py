"""Retrieval you can look at: ``itrlab retrieve`` on a typed caption and on an image id, and the
gallery of a model whose data came from photos, logged by its training run and written by ``itrlab gallery``,
rendered by headless Chromium with its thumbnails.

The data: 40 real COCO photos of ``../shared/data/coco_mini`` with their captions, one caption of each photo
carrying markup (a caption is user data: it must read as text), through the real feature extraction (pooled to
one region, ``pool1x1/``: the photos are found through the grid's manifest one folder up); one short training
in process logs the model and the gallery to an SQLite MLflow store.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from browser import CHROMIUM, NEEDS_CHROMIUM, browser_dom
from conftest import SHARED
from photo_sets import extract_photos
from trained_runs import itrlab, train, work_in

COCO_MINI = SHARED / "data" / "coco_mini"
MARKUP = '<img src=x onerror="document.body.dataset.pwned=1"> & <b>bold</b>'
N_PHOTOS = 40

pytestmark = [
    pytest.mark.usefixtures("one_torch_thread"),
    pytest.mark.skipif(not (COCO_MINI / "train2017").is_dir(), reason=f"coco_mini not found at {COCO_MINI}"),
]


def photo_set(folder: Path) -> tuple[Path, Path]:
    """The first 40 coco_mini photos and their captions, each photo's first caption ending in MARKUP."""
    doc = json.loads((COCO_MINI / "annotations" / "captions_train2017.json").read_text(encoding="utf-8"))
    images = sorted(doc["images"], key=lambda image: image["file_name"])[:N_PHOTOS]
    ids = {image["id"] for image in images}
    annotations, marked = [], set()
    for annotation in doc["annotations"]:
        if annotation["image_id"] in ids:
            if annotation["image_id"] not in marked:
                annotation = {**annotation, "caption": f"{annotation['caption'].strip()} {MARKUP}"}
                marked.add(annotation["image_id"])
            annotations.append(annotation)
    (folder / "images").mkdir()
    for image in images:
        shutil.copy(COCO_MINI / "train2017" / image["file_name"], folder / "images" / image["file_name"])
    captions = folder / "captions.json"
    captions.write_text(json.dumps({"images": images, "annotations": annotations}), encoding="utf-8")
    return folder / "images", captions


@pytest.fixture(scope="module")
def photo_run(tmp_path_factory):
    """A model trained on features of photos (its run logs the model and the gallery), and a model trained on
    synthetic data (no photos); the folder and store they share."""
    folder = tmp_path_factory.mktemp("gallery")
    images, captions = photo_set(folder)
    extract_photos(images, captions, folder / "precomp")
    with pytest.MonkeyPatch.context() as patch:
        work_in(patch, folder)
        run_id = train(
            "vsepp_synthetic_tiny",
            folder / "runs" / "photos",
            "dataset.kind=precomp",
            f"dataset.root={folder / 'precomp' / 'pool1x1'}",
            "train.batch_size=16",
        )
        train(
            "vsepp_synthetic_tiny",
            folder / "runs" / "synthetic",
            f"dataset.root={folder / 'tiny'}",
            "tracking.enabled=false",
        )
        yield folder, run_id


@pytest.fixture
def inside(photo_run, monkeypatch):
    folder, run_id = photo_run
    work_in(monkeypatch, folder)
    return folder, run_id


def test_a_training_on_photos_logs_its_gallery_and_tags_its_model(inside, tmp_path):
    from mlflow import MlflowClient

    _, run_id = inside
    client = MlflowClient()
    tags = client.get_run(run_id).data.tags
    assert tags["itrlab.model"] == f"runs:/{run_id}/model" and tags["itrlab.gallery"] == "gallery.html"
    page = Path(client.download_artifacts(run_id, "gallery.html", str(tmp_path))).read_text(encoding="utf-8")
    assert page.count('<figure class="truth">') >= 1 and page.count("data:image/jpeg;base64,") >= 8 * 5
    assert "&lt;img src=x onerror=&#34;document.body.dataset.pwned=1&#34;&gt; &amp; &lt;b&gt;bold&lt;/b&gt;" in page
    assert "<img src=x" not in page and "<b>bold" not in page  # every caption escaped
    assert f"<li>model runs:/{run_id}/model (vsepp, " in page and "itrlab_bundle_" not in page  # not its scratch copy


def test_retrieve_answers_a_typed_caption_and_an_image(inside, capsys):
    folder, run_id = inside
    root = folder / "precomp" / "pool1x1"
    test_ids = [int(line) for line in (root / "test_ids.txt").read_text().split()]
    assert itrlab("retrieve", f"runs:/{run_id}/model", "--caption", "a man riding a horse", "-k", 3) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("top 3 images for 'a man riding a horse'") and len(lines) == 4
    for line in lines[1:]:
        image_id, photo = re.fullmatch(r"\s+\d\s+-?\d+\.\d{4}  image (\d+)  (\S+\.jpg)", line).groups()
        assert int(image_id) in test_ids and Path(photo).is_file() and Path(photo).parent == folder / "images"
    query = test_ids[0]
    assert itrlab("retrieve", run_id, "--image", query, "-k", 40, "--data", root) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 41 and str(folder / "images") in lines[0]
    own = [line for line in lines[1:] if re.match(r"\s+\d+\s+-?\d+\.\d{4} \* ", line)]
    assert len(own) == 5 and all(line.endswith(f"(image {query})") for line in own)  # all 40 captions ranked


@pytest.mark.parametrize(
    "argv, says",
    [
        (["retrieve", "{model}", "--image", "-1"], "--image -1: no such image in split test"),
        (["retrieve", "{model}", "--caption", "  "], "--caption: an empty caption"),
        (["retrieve", "{model}", "--caption", "a dog", "-k", "0"], "-k 0: the number of results to show is 1 to"),
        (["gallery", "{synthetic}", "--out", "g.html"], "its data has no photos"),
        (["gallery", "{model}", "--out", "g.html", "-n", "0"], "-n 0: a gallery shows 1 to 100"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(inside, capsys, argv, says):
    folder, run_id = inside
    argv = [arg.format(model=f"runs:/{run_id}/model", synthetic=folder / "runs" / "synthetic") for arg in argv]
    assert itrlab(*argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    assert not (folder / "g.html").exists()


def test_gallery_log_writes_only_into_the_models_own_run(inside, tmp_path, capsys, monkeypatch):
    """A downloaded copy of the model whose model.json names another FINISHED run of the store (an evaluation's):
    ``--log`` refuses in one line and writes nothing there, nor the page; the model's own run takes it, into an
    ``--out`` folder made first."""
    import mlflow
    from mlflow import MlflowClient

    _, run_id = inside
    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    assert itrlab("evaluate", f"runs:/{run_id}/model") == 0
    printed = capsys.readouterr().out.strip().splitlines()
    unrelated = printed[-1].split()[2]
    client = MlflowClient()
    assert client.get_run(unrelated).info.status == "FINISHED"
    # the evaluation's table has a random ranking's beside it, printed and in its run
    chance = printed.index(next(line for line in printed if line.startswith("Chance (random scores on ")))
    assert printed[chance + 3].startswith("  rsum ") and "95% range" in printed[chance + 3]
    assert {"6_chance/rsum", "6_chance/rsum_high"} <= set(client.get_run(unrelated).data.metrics)
    copy = Path(mlflow.artifacts.download_artifacts(artifact_uri=f"runs:/{run_id}/model", dst_path=str(tmp_path)))
    info_file = copy / "artifacts" / "bundle" / "model.json"
    info_file.write_text(json.dumps({**json.loads(info_file.read_text()), "run_id": unrelated}))
    assert itrlab("gallery", copy, "--out", tmp_path / "gallery.html", "--log") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"names run {unrelated}, but run {unrelated} logged no model" in err[0], err
    assert "itrlab.gallery" not in client.get_run(unrelated).data.tags
    assert "gallery.html" not in [item.path for item in client.list_artifacts(unrelated)]
    assert not (tmp_path / "gallery.html").exists()
    out = tmp_path / "pages" / "new" / "gallery.html"
    assert itrlab("gallery", f"runs:/{run_id}/model", "--out", out, "-n", 2, "--log") == 0
    assert out.is_file() and f"gallery.html of run {run_id}" in capsys.readouterr().out


@pytest.mark.e2e
@pytest.mark.skipif(CHROMIUM is None, reason=NEEDS_CHROMIUM)
def test_the_gallery_renders_its_thumbnails_in_a_browser(inside, capsys):
    """``itrlab gallery`` over the whole test split (8 photos, 40 captions), logged to the run too, loaded by
    headless Chromium: every thumbnail decoded (no broken image), small, the true images framed, no caption's
    markup run."""
    from mlflow import MlflowClient

    folder, run_id = inside
    out = folder / "out" / "gallery.html"
    out.parent.mkdir(exist_ok=True)
    assert itrlab("gallery", f"runs:/{run_id}/model", "--out", out, "-n", 40, "--log") == 0
    assert f"gallery.html of run {run_id}" in capsys.readouterr().out
    assert MlflowClient().get_run(run_id).data.tags["itrlab.gallery"] == "gallery.html"
    probe = out.with_name("probe.html")
    probe.write_text(
        out.read_text(encoding="utf-8").replace(
            "</body>",
            """<script>
const images = [...document.images];
document.body.setAttribute("data-total", images.length);
document.body.setAttribute("data-loaded", images.filter(i => i.complete && i.naturalWidth > 0).length);
document.body.setAttribute("data-widest", Math.max(...images.map(i => i.getBoundingClientRect().width)));
const truths = [...document.querySelectorAll("section.query:not(.image) figure.truth img")];
document.body.setAttribute("data-truths", truths.length);
const green = truths.filter(i => getComputedStyle(i).borderTopColor === "rgb(42, 157, 58)");
document.body.setAttribute("data-framed", green.length);
</script></body>""",
        ),
        encoding="utf-8",
    )
    dom = browser_dom(probe.as_uri(), width=1200, budget_ms=5000, timeout=120)
    found = {key: float(value) for key, value in re.findall(r'data-(\w+)="([\d.]+)"', dom)}
    assert found["total"] == 40 * 5 + 8 and found["loaded"] == found["total"], found
    assert 0 < found["widest"] <= 118  # 112 px and the frame
    assert found["framed"] == found["truths"] >= 1  # each caption's true image, where it made the top 5, framed
    assert "data-pwned" not in dom and "&lt;b&gt;bold&lt;/b&gt;" in dom
