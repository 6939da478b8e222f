"""A served model: ``mlflow models serve -m runs:/<id>/model --env-manager local`` on a loopback
port answers a request of captions with their embeddings, and a request of image features with theirs, equal to
``itrlab.load_model(...)``'s on the same input; the request is the one docs/models.md shows. What it cannot embed
(a caption that is not a non-empty string, features that are not finite numbers of the model's layout, a request
over its stated rows or bytes) is answered 400 with one line and no stack trace. A model trained on photos' features
(tests/photo_sets.py) answers JPEG and PNG photos sent as base64 with the embeddings that the extraction and the
model give them, and refuses what is no photo; a model of synthetic features refuses photos. One server for each
model."""

from __future__ import annotations

import base64
import io
import json
import os
import urllib.error
import urllib.request

import numpy as np
import pytest
from PIL import Image

from photo_sets import photo_model
from servers import BIN, serve
from trained_runs import train, work_in

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("one_torch_thread")]


def post(url: str, payload: dict) -> dict:
    request = urllib.request.Request(
        url, data=json.dumps(payload).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def refused(url: str, body: str) -> str:
    """``body`` (JSON text, NaN allowed) posted to ``url``: answered 400 with one line and no stack trace; the line."""
    request = urllib.request.Request(
        url, data=body.encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as answer:
        urllib.request.urlopen(request, timeout=120)
    assert answer.value.code == 400, answer.value.read()[:2000]
    text = answer.value.read().decode()
    payload = json.loads(text)
    assert set(payload) == {"error_code", "message"} and "Traceback" not in text, text[:2000]
    assert "\n" not in payload["message"], payload["message"][:2000]
    return payload["message"]


def serve_model(root, uri: str):
    """``mlflow models serve`` of the model ``uri`` of the store in ``root`` on a loopback port, until the block
    ends; yields its URL."""
    store = f"sqlite:///{root / 'mlflow.db'}"
    command = [
        str(BIN / "mlflow"),
        "models",
        "serve",
        "-m",
        uri,
        "--env-manager",
        "local",
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
    ]
    # the server's /ping answers once the model is loaded; a deadline, not a guess of how long that takes. It
    # starts `uvicorn` by name: the environment's bin folder on PATH, as in an activated virtual environment
    path = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    return serve(
        command, root, "mlflow-models-serve", "/ping", timeout=180, env={"MLFLOW_TRACKING_URI": store, "PATH": path}
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory, one_torch_thread):
    """A tiny VSE++ run's model, served by ``mlflow models serve`` on a loopback port: (its URL, the model as
    ``itrlab.load_model`` opens it)."""
    import itrlab

    root = tmp_path_factory.mktemp("serve")
    with pytest.MonkeyPatch.context() as patch:
        work_in(patch, root)
        run_id = train("vsepp_synthetic_tiny", root / "run", f"dataset.root={root / 'tiny'}")
        uri = f"runs:/{run_id}/model"
        model = itrlab.load_model(uri)
        with serve_model(root, uri) as url:
            yield f"{url}/invocations", model


@pytest.fixture(scope="module")
def served_photos(tmp_path_factory, one_torch_thread):
    """A tiny VSE++ model trained on generated photos' features (their 3x3 layout), served by ``mlflow models
    serve`` on a loopback port: (its URL, the model as ``itrlab.load_model`` opens it, the extraction's folder)."""
    import itrlab

    root = tmp_path_factory.mktemp("serve_photos")
    with pytest.MonkeyPatch.context() as patch:
        work_in(patch, root)
        run_id, out, _ = photo_model(root)
        uri = f"runs:/{run_id}/model"
        model = itrlab.load_model(uri)
        with serve_model(root, uri) as url:
            yield f"{url}/invocations", model, out


def test_mlflow_models_serve_answers_captions_and_features_with_embeddings(served):
    url, model = served
    captions = ["a dog runs on the beach", "a red cube left of a blue ball"]
    features = np.random.default_rng(0).standard_normal((2, model.info.n_regions, model.info.feature_dim))
    texts = post(url, {"dataframe_split": {"columns": ["caption"], "data": [[c] for c in captions]}})
    images = post(url, {"dataframe_records": [{"features": image.tolist()} for image in features]})
    expected = model.embed_captions(captions).numpy()
    assert np.allclose(np.asarray(texts["predictions"]), expected, atol=1e-6)
    assert np.asarray(texts["predictions"]).shape == (2, 32)
    assert np.allclose(np.asarray(images["predictions"]), model.embed_images(features).numpy(), atol=1e-5)


def captions(*rows) -> str:
    return json.dumps({"dataframe_split": {"columns": ["caption"], "data": [[row] for row in rows]}})


@pytest.mark.parametrize(
    "rows, line",
    [
        ((None,), "caption row 0 is null"),
        (("a dog", 12345), "caption row 1 is a number"),
        (({"a": 1},), "caption row 0 is an object"),
        (("",), "caption row 0 is empty"),
        (("a dog", "   "), "caption row 1 is empty"),
    ],
    ids=["null", "a number", "an object", "empty", "blank"],
)
def test_a_caption_that_is_not_a_non_empty_string_is_refused(served, rows, line):
    message = refused(served[0], captions(*rows))
    assert message.startswith(line) and "each caption is a non-empty string" in message, message


def test_features_that_are_not_finite_numbers_of_one_layout_are_refused(served):
    url, model = served
    image = np.zeros((model.info.n_regions, model.info.feature_dim)).tolist()
    with_nan = json.loads(json.dumps(image))
    with_nan[0][0] = float("nan")
    records = lambda *rows: json.dumps({"dataframe_records": [{"features": row} for row in rows]})  # noqa: E731
    assert refused(url, records(image, with_nan)).startswith("features row 1 holds NaN or infinity")
    assert "NaN" in records(with_nan)  # sent as JSON's NaN token, which MLflow's parser reads
    with_null = json.loads(json.dumps(image))
    with_null[2][1] = None
    assert refused(url, records(with_null)).startswith("features row 0 is not an (R, D) list")
    assert refused(url, records(image, image[:-1])).startswith("features row 1 is ")
    assert refused(url, records("a dog")).startswith("features row 0 is not an (R, D) list")
    wrong = np.zeros((model.info.n_regions, model.info.feature_dim + 1)).tolist()
    assert "features" in refused(url, records(wrong))  # the model's own layout check, one line


def test_a_request_over_its_rows_or_bytes_is_refused(served):
    from itrlab.tracking.serving_input import MAX_BYTES, MAX_ROWS

    url = served[0]
    line = refused(url, captions(*["a dog"] * (MAX_ROWS + 1)))
    assert line == f"the request holds {MAX_ROWS + 1:,} captions; at most {MAX_ROWS:,} rows per request"
    long = "a dog runs on the beach " * (MAX_BYTES // 24 // 2 + 1)  # two of them: just over the limit
    line = refused(url, captions(long, long))
    assert line.startswith("the request's captions come to 32.0 MiB") and "at most 32 MiB" in line, line
    assert len(post(url, json.loads(captions(*["a dog"] * MAX_ROWS)))["predictions"]) == MAX_ROWS


def photos_of(out):
    """The training split of the photo model's data (its 3x3 layout): its features and each row's photo."""
    from itrlab.data.precomp import open_precomp
    from itrlab.trained.photos import split_images

    split = open_precomp(out / "pool3x3", "train", 5)
    return np.asarray(split.features, dtype=np.float32), split_images(split).photos


def test_mlflow_models_serve_answers_photos_with_the_embeddings_of_extraction_and_model(served_photos):
    url, model, out = served_photos
    features, photos = photos_of(out)
    assert {photo.suffix for photo in photos} == {".jpg", ".png"}
    # the request docs/models.md shows: one record per photo, its file's bytes in base64
    answer = post(url, {"dataframe_records": [{"image": base64.b64encode(p.read_bytes()).decode()} for p in photos]})
    expected = model.embed_images(features).numpy()
    assert np.asarray(answer["predictions"]).shape == expected.shape == (len(photos), 32)
    assert np.allclose(np.asarray(answer["predictions"]), expected, atol=1e-5)


def test_what_is_no_photo_is_refused_by_the_served_model(served_photos):
    url, _, out = served_photos
    features, photos = photos_of(out)
    good = base64.b64encode(photos[0].read_bytes()).decode()
    records = lambda *rows: json.dumps({"dataframe_records": list(rows)})  # noqa: E731
    line = refused(url, records({"image": good}, {"image": "a dog runs on the beach"}))
    assert line.startswith("image row 1 is not base64 text"), line
    line = refused(url, records({"image": base64.b64encode(b"GIF89a not really").decode()}))
    assert line.startswith("image row 0: not a JPEG or PNG image"), line
    line = refused(url, records({"image": good, "features": features[0].tolist()}))
    assert line.startswith("row 0 holds both 'features' and 'image'"), line


def test_a_model_of_synthetic_features_refuses_photos(served):
    url, _ = served
    photo = io.BytesIO()
    Image.new("RGB", (64, 48), (200, 30, 30)).save(photo, format="PNG")
    line = refused(url, json.dumps({"dataframe_records": [{"image": base64.b64encode(photo.getvalue()).decode()}]}))
    assert "did not come from photos through itrlab's feature extraction" in line, line
