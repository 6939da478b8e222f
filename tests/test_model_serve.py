"""A served model (issue 43, item 4): ``mlflow models serve -m runs:/<id>/model --env-manager local`` on a loopback
port answers a request of captions with their embeddings, and a request of image features with theirs, equal to
``itrlab.load_model(...)``'s on the same input; the request is the one docs/models.md shows."""

from __future__ import annotations

import json
import os
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


def test_mlflow_models_serve_answers_captions_and_features_with_embeddings(tmp_path, monkeypatch):
    import itrlab

    monkeypatch.chdir(tmp_path)
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    run_id = train("vsepp_synthetic_tiny", tmp_path / "run", f"dataset.root={tmp_path / 'tiny'}")
    uri = f"runs:/{run_id}/model"
    model = itrlab.load_model(uri)
    captions = ["a dog runs on the beach", "a red cube left of a blue ball"]
    features = np.random.default_rng(0).standard_normal((2, model.info.n_regions, model.info.feature_dim))
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
        command, tmp_path, "mlflow-models-serve", "/ping", timeout=180, env={"MLFLOW_TRACKING_URI": store, "PATH": path}
    ) as url:
        texts = post(
            f"{url}/invocations", {"dataframe_split": {"columns": ["caption"], "data": [[c] for c in captions]}}
        )
        images = post(f"{url}/invocations", {"dataframe_records": [{"features": image.tolist()} for image in features]})
    expected = model.embed_captions(captions).numpy()
    assert np.allclose(np.asarray(texts["predictions"]), expected, atol=1e-6)
    assert np.asarray(texts["predictions"]).shape == (2, 32)
    assert np.allclose(np.asarray(images["predictions"]), model.embed_images(features).numpy(), atol=1e-5)
