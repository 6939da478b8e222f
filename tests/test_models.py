"""Trained models in MLflow, ``itrlab.load_model`` and ``itrlab evaluate``.

One module fixture trains each method once (1 epoch, tiny synthetic data, an SQLite MLflow store in its own
folder, in process); the tests load the logged models and evaluate them.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import write_precomp
from itrlab.tracking.chart_names import flat_metrics
from trained_runs import itrlab, rebind, train, work_in

pytestmark = pytest.mark.usefixtures("one_torch_thread")

METHODS = {
    "vsepp": "vsepp_synthetic_tiny",
    "dbl": "dbl_synthetic_tiny",
    "coder": "coder_synthetic_tiny",
    "ascl": "ascl_synthetic_tiny",
    "xattn": "xattn_synthetic_tiny",
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Each method's run folder and MLflow run id, and the folder and store they share."""
    folder = tmp_path_factory.mktemp("models")
    with pytest.MonkeyPatch.context() as patch:
        work_in(patch, folder)
        runs = {}
        for name, experiment in METHODS.items():
            run_dir = folder / "runs" / name
            runs[name] = (run_dir, train(experiment, run_dir, f"dataset.root={folder / 'tiny'}"))
        yield folder, runs


@pytest.fixture
def inside(trained, monkeypatch):
    folder, runs = trained
    work_in(monkeypatch, folder)
    return folder, runs


@pytest.mark.parametrize("method", list(METHODS))
def test_evaluate_reproduces_the_runs_test_table(inside, method, capsys):
    folder, runs = inside
    run_dir, run_id = runs[method]
    out = folder / f"{method}.json"
    assert itrlab("evaluate", f"runs:/{run_id}/model", "--out", out) == 0
    written = json.loads(out.read_text())
    logged = json.loads((run_dir / "test_recall.json").read_text())
    assert written["members"][f"runs:/{run_id}/model"] == logged  # every figure, to the digit
    assert written["protocol"] == "all" and "ensemble" not in written
    evaluation_run = capsys.readouterr().out.strip().splitlines()[-1].split()[2]
    from mlflow import MlflowClient

    run = MlflowClient().get_run(evaluation_run)
    assert run.data.tags["itrlab.source_run.1"] == run_id and run.info.status == "FINISHED"
    assert flat_metrics(run.data.metrics)["test_rsum"] == pytest.approx(logged["rsum"])


def test_a_loaded_model_embeds_and_scores(inside):
    import itrlab

    folder, runs = inside
    run_dir, run_id = runs["vsepp"]
    model = itrlab.load_model(f"runs:/{run_id}/model")
    from_folder = itrlab.load_model(run_dir)
    features = np.random.default_rng(0).standard_normal((3, model.info.n_regions, model.info.feature_dim))
    captions = ["a red cube left of a blue ball", "two green things", "zzz unknown words"]
    images, texts = model.embed_images(features), model.embed_captions(captions)
    assert images.shape == texts.shape == (3, 32)
    assert np.allclose(model.score(features, captions).numpy(), (images @ texts.T).numpy(), atol=1e-6)
    assert np.array_equal(from_folder.embed_captions(captions).numpy(), texts.numpy())
    coder = itrlab.load_model(f"runs:/{runs['coder'][1]}/model")
    assert coder.embed_captions(captions).shape[0] == 3

    xattn = itrlab.load_model(runs["xattn"][1])  # a bare run id
    assert xattn.score(features, captions).shape == (3, 3)
    from itrlab.errors import UserInputError

    with pytest.raises(UserInputError, match="no separate caption embeddings"):
        xattn.embed_captions(captions)


def test_the_pyfunc_flavor_embeds_captions_as_load_model_does(inside):
    import mlflow.pyfunc
    import pandas as pd

    import itrlab

    _, runs = inside
    uri = f"runs:/{runs['vsepp'][1]}/model"
    captions = ["a red cube", "a blue ball on the left"]
    embedder, model = mlflow.pyfunc.load_model(uri), itrlab.load_model(uri)
    served = embedder.predict(pd.DataFrame({"caption": captions}))
    assert np.array_equal(np.asarray(served), model.embed_captions(captions).numpy())
    features = np.random.default_rng(1).standard_normal((2, model.info.n_regions, model.info.feature_dim))
    served = embedder.predict(pd.DataFrame({"features": [image.tolist() for image in features]}))
    assert np.allclose(np.asarray(served), model.embed_images(features).numpy(), atol=1e-6)


class Planted:
    def __reduce__(self):
        return (print, ("unpickled",))


def test_a_model_file_that_is_not_what_it_claims_is_never_unpickled(inside, tmp_path, capsys):
    import pickle
    import shutil

    from itrlab.errors import UserInputError
    from itrlab.trained import bundle_from_run, open_bundle

    _, runs = inside
    folder = bundle_from_run(runs["vsepp"][0], tmp_path / "bundle")
    shutil.copytree(folder, tmp_path / "planted")
    (tmp_path / "planted" / "weights.pt").write_bytes(pickle.dumps({"model": Planted()}))
    rebind(tmp_path / "planted")  # its digest agrees: the weights-only load is what refuses it
    with pytest.raises(UserInputError, match="refused to load it"):
        open_bundle(tmp_path / "planted")
    assert "unpickled" not in capsys.readouterr().out
    assert open_bundle(folder).info.method == "vsepp"


def test_an_ensemble_is_one_command_and_one_run(inside, capsys):
    folder, runs = inside
    members = [f"runs:/{runs[name][1]}/model" for name in ("vsepp", "dbl")]
    out = folder / "ensemble.json"
    assert itrlab("evaluate", *members, "--out", out) == 0
    written = json.loads(out.read_text())
    for name, member in zip(("vsepp", "dbl"), members):
        assert written["members"][member] == json.loads((runs[name][0] / "test_recall.json").read_text())
    assert written["ensemble"]["rsum"] > 0
    run_id = capsys.readouterr().out.strip().splitlines()[-1].split()[2]
    from mlflow import MlflowClient

    run = MlflowClient().get_run(run_id)
    assert run.data.tags["itrlab.evaluation"] == "ensemble of 2"
    assert {run.data.tags["itrlab.source_run.1"], run.data.tags["itrlab.source_run.2"]} == {
        runs["vsepp"][1],
        runs["dbl"][1],
    }
    assert flat_metrics(run.data.metrics)["test_rsum"] == pytest.approx(written["ensemble"]["rsum"])
    assert flat_metrics(run.data.metrics)["member1_rsum"] == pytest.approx(written["members"][members[0]]["rsum"])


def refused(capsys, *argv) -> str:
    assert itrlab("evaluate", "--no-tracking", *argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_bad_inputs_are_one_line_and_exit_2(inside, capsys):
    folder, runs = inside
    vsepp = f"runs:/{runs['vsepp'][1]}/model"
    assert "coco_5k" in refused(capsys, vsepp, "--protocol", "coco_5k")
    assert "named twice" in refused(capsys, vsepp, vsepp)
    assert "unknown evaluation protocol" in refused(capsys, vsepp, "--protocol", "coco_9k")
    other = write_precomp(folder / "other", {"train": 20, "dev": 10, "test": 10}, regions=4, dim=8)
    assert "expects (N, " in refused(capsys, vsepp, "--data", other)
    assert f"holds no run {'0' * 32}: a run of another store" in refused(capsys, "runs:/" + "0" * 32 + "/model")
    assert "not a folder" in refused(capsys, "no-such-model")
    run_dir = folder / "runs" / "unlogged"
    unlogged = train("vsepp_synthetic_tiny", run_dir, f"dataset.root={folder / 'tiny'}", "output.log_model=none")
    capsys.readouterr()
    assert "no logged itrlab model" in refused(capsys, unlogged)
    small = folder / "runs" / "small"
    train(
        "vsepp_synthetic_tiny",
        small,
        f"dataset.root={other}",
        "dataset.kind=precomp",
        "train.batch_size=10",
        "tracking.enabled=false",
    )
    capsys.readouterr()
    assert "an ensemble's members read the same features" in refused(capsys, vsepp, small)


def test_log_model_is_a_typed_setting():
    from itrlab.assembly import load_experiment
    from itrlab.errors import ConfigError

    assert load_experiment("vsepp_synthetic_tiny").output.log_model == "best"
    with pytest.raises(ConfigError, match="output.log_model"):
        load_experiment("vsepp_synthetic_tiny", ["output.log_model=last"])
