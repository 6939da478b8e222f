"""A trained model is what it says it is, and every bad model file is one line before any scoring.

One module fixture trains VSE++ twice (1 epoch, tiny synthetic data, an SQLite MLflow store in its own folder, in
process: two runs that logged models) and once without logging its model; each test takes a copy of a logged
model folder (``mlflow.artifacts.download_artifacts``, what a user who downloads a model has) and changes one
thing in it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import yaml

from trained_runs import itrlab, rebind, train, work_in

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Two logged VSE++ runs (``vsepp``, ``other``: another seed) and one that logged no model (``unlogged``): by
    name, each (run folder, run id); and the folder and store they share."""
    folder = tmp_path_factory.mktemp("integrity")
    with pytest.MonkeyPatch.context() as patch:
        work_in(patch, folder)
        runs = {}
        for name, overrides in {"vsepp": [], "other": ["seed=1"], "unlogged": ["output.log_model=none"]}.items():
            run_dir = folder / "runs" / name
            runs[name] = (
                run_dir,
                train("vsepp_synthetic_tiny", run_dir, f"dataset.root={folder / 'tiny'}", *overrides),
            )
        yield folder, runs


@pytest.fixture
def inside(trained, monkeypatch):
    folder, runs = trained
    work_in(monkeypatch, folder)
    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # the tests' downloads: no bars on stderr
    return folder, runs


def downloaded(run_id: str, where: Path) -> Path:
    """A copy of run ``run_id``'s logged MLflow model folder under ``where``."""
    import mlflow

    return Path(mlflow.artifacts.download_artifacts(artifact_uri=f"runs:/{run_id}/model", dst_path=str(where)))


def bundle(model_folder: Path) -> Path:
    return model_folder / "artifacts" / "bundle"


def edit_info(folder: Path, **changes) -> None:
    """Change keys of ``folder``'s ``model.json`` (a value None: the key removed)."""
    info = json.loads((folder / "model.json").read_text())
    for key, value in changes.items():
        if value is None:
            info.pop(key, None)
        else:
            info[key] = value
    (folder / "model.json").write_text(json.dumps(info))


def refused(capsys, *argv) -> str:
    """The one line on stderr of ``itrlab ARGV``, which must exit with status 2."""
    assert itrlab(*argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


# ---------------------------------------------------------------- a model is what it says it is


def test_a_planted_loader_in_mlmodel_runs_no_code_and_is_one_line(inside, tmp_path):
    """``mlflow.pyfunc.load_model`` (what ``mlflow models serve`` calls) of a model whose MLmodel names
    ``runpy:run_path`` as its loader, with a ``__main__.py`` planted in its bundle: refused in one line, the
    planted file never run."""
    import mlflow.pyfunc

    from itrlab.errors import UserInputError

    _, runs = inside
    model = downloaded(runs["vsepp"][1], tmp_path)
    marker = tmp_path / "planted-code-ran"
    (bundle(model) / "__main__.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    mlmodel = yaml.safe_load((model / "MLmodel").read_text())
    flavor = mlmodel["flavors"]["python_function"]
    assert flavor["loader_module"] == "itrlab.tracking.models"  # the line docs/models.md tells readers to check
    flavor["config"]["loader"] = "runpy:run_path"
    (model / "MLmodel").write_text(yaml.safe_dump(mlmodel))
    with pytest.raises(UserInputError) as refusal:
        mlflow.pyfunc.load_model(str(model))
    assert not marker.exists()
    message = str(refusal.value)
    assert len(message.splitlines()) == 1 and "'runpy:run_path'" in message and "nothing imported" in message


def test_model_json_records_the_digest_of_every_file(inside, tmp_path):
    from itrlab.files import sha256_file

    _, runs = inside
    folder = bundle(downloaded(runs["vsepp"][1], tmp_path))
    info = json.loads((folder / "model.json").read_text())
    assert set(info["files_sha256"]) == {"weights.pt", "config.yaml", "tokenizer.json", "test_recall.json"}
    assert all(sha256_file(folder / name) == digest for name, digest in info["files_sha256"].items())
    assert info["run_id"] == runs["vsepp"][1] and info["text_features_sha256"] is None  # a BiGRU model


def test_a_model_json_that_names_another_method_is_refused(inside, tmp_path, capsys):
    """A VSE++ model labelled ``xattn``: refused, not evaluated (and tagged) as xattn."""
    _, runs = inside
    folder = bundle(downloaded(runs["vsepp"][1], tmp_path))
    edit_info(folder, method="xattn", embeds_apart=False)
    line = refused(capsys, "evaluate", folder)
    assert "'method' is 'xattn', but its config.yaml builds 'vsepp'" in line


@pytest.mark.parametrize(
    "digests, says", [("kept", "not the"), ("agree", "is torch.int64, method 'vsepp' holds torch.float32")]
)
def test_weights_cast_to_int64_are_refused(inside, tmp_path, capsys, digests, says):
    """Weights cast to int64 load silently into float parameters (a broken model, R@1 0): refused by their digest,
    and by their dtype where the digest was forged to agree."""
    _, runs = inside
    folder = bundle(downloaded(runs["vsepp"][1], tmp_path))
    state = torch.load(folder / "weights.pt", weights_only=True)
    torch.save({key: value.to(torch.int64) for key, value in state.items()}, folder / "weights.pt")
    if digests == "agree":
        rebind(folder)
    line = refused(capsys, "evaluate", "--no-tracking", folder)
    assert "weights.pt" in line and says in line


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_weights_holding_nan_or_inf_are_refused_when_opened(inside, tmp_path, capsys, value):
    _, runs = inside
    folder = bundle(downloaded(runs["vsepp"][1], tmp_path))
    state = torch.load(folder / "weights.pt", weights_only=True)
    name = next(key for key, tensor in state.items() if tensor.is_floating_point())
    state[name].view(-1)[0] = value
    torch.save(state, folder / "weights.pt")
    rebind(folder)
    assert f"'{name}' holds NaN or infinite values" in refused(capsys, "evaluate", "--no-tracking", folder)


def test_a_model_bundled_before_the_digests_opens_with_one_warning(inside, tmp_path, capsys):
    _, runs = inside
    folder = bundle(downloaded(runs["vsepp"][1], tmp_path))
    edit_info(folder, files_sha256=None, text_features_sha256=None)
    assert itrlab("evaluate", "--no-tracking", folder) == 0
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "records no digests" in lines[0] and "weights, config, tokenizer, test table are not checked" in lines[0]


def test_an_ensemble_refuses_one_model_named_three_ways(inside, tmp_path, capsys):
    """Its runs:/ URI, its run folder and a downloaded copy of its model folder are one model."""
    _, runs = inside
    run_dir, run_id = runs["vsepp"]
    copy = downloaded(run_id, tmp_path)
    for pair in ([f"runs:/{run_id}/model", run_dir], [run_dir, copy], [f"runs:/{run_id}/model", copy]):
        assert "are one model (the same weights" in refused(capsys, "evaluate", "--no-tracking", *pair)
    assert itrlab("evaluate", "--no-tracking", f"runs:/{run_id}/model", f"runs:/{runs['other'][1]}/model") == 0


def test_a_model_read_from_its_run_names_that_run(inside, capsys):
    """A logged model whose model.json was edited in the artifact store to name another run: refused."""
    from mlflow import MlflowClient

    _, runs = inside
    run_id, other = runs["vsepp"][1], runs["other"][1]
    store = Path(MlflowClient().get_run(run_id).info.artifact_uri.removeprefix("file://"))
    info_file = store / "model" / "artifacts" / "bundle" / "model.json"
    original = info_file.read_bytes()
    try:
        edit_info(info_file.parent, run_id=other)
        line = refused(capsys, "evaluate", "--no-tracking", f"runs:/{run_id}/model")
    finally:
        info_file.write_bytes(original)
    assert f"names run {other}, but the model is run {run_id}'s" in line


def artifacts_and_tags(run_id: str) -> tuple[list[str], dict[str, str]]:
    from mlflow import MlflowClient

    client = MlflowClient()
    return [item.path for item in client.list_artifacts(run_id)], dict(client.get_run(run_id).data.tags)


def test_gallery_log_and_evaluation_tags_go_only_into_the_models_own_run(inside, tmp_path, capsys):
    """A downloaded model whose model.json names another existing run: ``gallery --log`` and ``evaluate`` refuse
    it, and nothing is written into that run; a run that does not exist: ``--log`` says so in one line,
    ``evaluate`` warns and tags no source run."""
    from mlflow import MlflowClient

    folder, runs = inside
    model = downloaded(runs["vsepp"][1], tmp_path)
    other = runs["other"][1]
    before = artifacts_and_tags(other)
    edit_info(bundle(model), run_id=other)
    line = refused(capsys, "gallery", model, "--out", tmp_path / "g.html", "--log")
    assert f"names run {other}, whose logged model is another" in line and "nothing written" in line
    line = refused(capsys, "evaluate", model)
    assert f"names run {other}, whose logged model is another" in line
    assert artifacts_and_tags(other) == before and not (tmp_path / "g.html").exists()

    missing = "f" * 32
    edit_info(bundle(model), run_id=missing)
    line = refused(capsys, "gallery", model, "--out", tmp_path / "g.html", "--log")
    assert f"holds no run {missing}" in line and "can no longer be written" not in line
    assert itrlab("evaluate", model) == 0
    captured = capsys.readouterr()
    assert len(captured.err.strip().splitlines()) == 1 and f"holds no run {missing}" in captured.err
    evaluation = captured.out.strip().splitlines()[-1].split()[2]
    assert "itrlab.source_run.1" not in MlflowClient().get_run(evaluation).data.tags


def test_evaluation_tags_the_source_run_of_a_downloaded_copy(inside, tmp_path, capsys):
    """A downloaded copy whose model.json is untouched: the run it names logged the same weights, so it is
    tagged."""
    from mlflow import MlflowClient

    _, runs = inside
    assert itrlab("evaluate", downloaded(runs["vsepp"][1], tmp_path)) == 0
    evaluation = capsys.readouterr().out.strip().splitlines()[-1].split()[2]
    assert MlflowClient().get_run(evaluation).data.tags["itrlab.source_run.1"] == runs["vsepp"][1]


# ---------------------------------------------------------------- every bad file one line before any scoring


@pytest.mark.parametrize(
    "key, value, says",
    [
        ("feature_dim", 2147483648, "'feature_dim': got 2147483648; Input should be less than or equal to 65536"),
        ("feature_dim", "36", "'feature_dim': got '36'; Input should be a valid integer"),
        ("n_regions", -1, "'n_regions': got -1; Input should be greater than or equal to 1"),
        ("n_train_captions", 10**12, "'n_train_captions': got 1000000000000"),
        ("embeds_apart", "yes", "'embeds_apart': got 'yes'"),
        ("run_id", "../../etc", "'run_id': got '../../etc'"),
        ("method", "vsepp\n<b>", "'method': got 'vsepp\\n<b>'"),
        ("files_sha256", {"weights.pt": "00"}, "'files_sha256.weights.pt': got '00'"),
        ("method", None, "lacks 'method'"),
    ],
)
def test_model_json_is_typed_and_bounded_before_anything_is_built(inside, tmp_path, capsys, key, value, says):
    """A size of 2**31 would allocate 256 GiB in the image projection: every key is checked first."""
    _, runs = inside
    folder = bundle(downloaded(runs["vsepp"][1], tmp_path))
    edit_info(folder, **{key: value})
    line = refused(capsys, "evaluate", "--no-tracking", folder)
    assert "model.json" in line and says in line


def test_a_size_in_model_json_that_its_weights_contradict_is_refused(inside, tmp_path, capsys):
    _, runs = inside
    folder = bundle(downloaded(runs["vsepp"][1], tmp_path))
    edit_info(folder, feature_dim=33)  # the data's regions are 32 wide: the image projection's weights say so
    line = refused(capsys, "evaluate", "--no-tracking", folder)
    assert "weights.pt does not fit method 'vsepp'" in line and "size mismatch" in line


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", ["weights.pt", "model.json", "config.yaml", "tokenizer.json", "test_recall.json"])
def test_a_model_file_that_is_a_fifo_is_refused_without_opening_it(inside, tmp_path, capsys, name):
    """A FIFO blocks whoever opens it until a writer comes: refused from its status alone."""
    _, runs = inside
    folder = bundle(downloaded(runs["vsepp"][1], tmp_path))
    (folder / name).unlink()
    os.mkfifo(folder / name)
    line = refused(capsys, "evaluate", "--no-tracking", folder)
    assert name in line and "is a FIFO, not a regular file" in line


@pytest.mark.parametrize(
    "text, says",
    [
        ("[1, 2]", "a JSON list, not an object"),
        ('{"protocol": "all"}', "recall table dict lacks n_images"),
        ("{not json", "not valid JSON"),
    ],
)
def test_a_malformed_test_table_in_a_model_is_one_line(inside, tmp_path, capsys, text, says):
    _, runs = inside
    folder = bundle(downloaded(runs["vsepp"][1], tmp_path))
    (folder / "test_recall.json").write_text(text)
    rebind(folder)
    line = refused(capsys, "evaluate", "--no-tracking", folder)
    assert "test_recall.json" in line and says in line


@pytest.mark.parametrize(
    "uri, scheme", [("http://example.com/model", "http"), ("s3://bucket/model", "s3"), ("gs://bucket/m", "gs")]
)
def test_a_model_uri_of_a_scheme_mlflow_cannot_fetch_here_names_it(inside, capsys, uri, scheme):
    line = refused(capsys, "evaluate", "--no-tracking", uri)
    assert f"itrlab does not fetch models by '{scheme}' URIs" in line and "runs:/<run id>/model" in line


def test_a_model_uri_that_does_not_exist_names_the_likely_cause(inside, capsys):
    _, runs = inside
    missing = "f" * 32
    line = refused(capsys, "evaluate", "--no-tracking", f"runs:/{missing}/model")
    assert f"holds no run {missing}" in line and "output.log_model" not in line
    line = refused(capsys, "evaluate", "--no-tracking", runs["unlogged"][1])
    assert f"run {runs['unlogged'][1]} logged no model" in line and "output.log_model is 'best'" in line


def test_gallery_out_onto_a_folder_is_refused_and_a_missing_folder_made_before_the_work(inside, tmp_path, capsys):
    """``--out`` is checked before the model is opened: a folder is refused; a missing folder is made (the
    synthetic data has no photos, the refusal that follows comes after it)."""
    _, runs = inside
    model = f"runs:/{runs['vsepp'][1]}/model"
    line = refused(capsys, "gallery", model, "--out", tmp_path)
    assert f"--out: {tmp_path} is a folder" in line
    out = tmp_path / "new" / "deeper" / "gallery.html"
    assert "its data has no photos" in refused(capsys, "gallery", model, "--out", out)
    assert out.parent.is_dir() and not out.exists()
    line = refused(capsys, "evaluate", "--no-tracking", model, "--out", tmp_path)
    assert f"--out: {tmp_path} is a folder" in line
