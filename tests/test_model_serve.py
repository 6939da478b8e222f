"""A served model (issue 43, item 4): ``mlflow models serve -m runs:/<id>/model --env-manager local`` on a loopback
port answers a request of captions with their embeddings, and a request of image features with theirs, equal to
``itrlab.load_model(...)``'s on the same input; the request is the one docs/models.md shows. What it cannot embed
(a caption that is not a non-empty string, features that are not finite numbers of the model's layout, a request
over its stated rows or bytes) is answered 400 with one line and no stack trace. One server for the module."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request

import numpy as np
import pytest

from servers import BIN, serve
from trained_runs import train

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


@pytest.fixture(scope="module")
def served(tmp_path_factory, one_torch_thread):
    """A tiny VSE++ run's model, served by ``mlflow models serve`` on a loopback port: (its URL, the model as
    ``itrlab.load_model`` opens it)."""
    import itrlab

    root = tmp_path_factory.mktemp("serve")
    store = f"sqlite:///{root / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        patch.setenv("MLFLOW_TRACKING_URI", store)
        run_id = train("vsepp_synthetic_tiny", root / "run", f"dataset.root={root / 'tiny'}")
        uri = f"runs:/{run_id}/model"
        model = itrlab.load_model(uri)
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
        with serve(
            command, root, "mlflow-models-serve", "/ping", timeout=180, env={"MLFLOW_TRACKING_URI": store, "PATH": path}
        ) as url:
            yield f"{url}/invocations", model


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
