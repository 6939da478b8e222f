"""Stages (itrlab.train.stages): a base network trained once per seed, config and data, shared by the
runs that start from it, checked before anything trains; ConVSE's recipe as the worked case."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import REPO
from itrlab.assembly import load_experiment, stage_configs
from itrlab.data.precomp import fingerprint
from itrlab.errors import ConfigError, UserInputError
from itrlab.methods import build_method
from itrlab.models.encoders import ProjectionHead
from itrlab.train import run_experiment
from itrlab.train.checkpoint import load_checkpoint
from itrlab.train.experiment import generate_if_synthetic
from itrlab.train.stages import TrainedStage, stage_key, start_from

pytestmark = pytest.mark.usefixtures("one_torch_thread")

BASE = (
    "{name: base, copy: [model.image_encoder, model.text_encoder], overrides: [method.name=vsepp, "
    "'loss={name: vsepp, margin: 0.2}', model.projection_hidden=null]}"
)
CONVSE = ["method.name=convse", "model.projection_hidden=16", "loss={name: convse, tau: 0.1}"]


def convse(root, *overrides, stages=f"[{BASE}]"):
    return load_experiment(
        "vsepp_synthetic_tiny",
        [f"dataset.root={root}", "tracking.enabled=false", "train.epochs=1", *CONVSE, f"stages={stages}", *overrides],
    )


def test_a_stage_is_the_experiment_with_its_overrides():
    config = convse("/data")
    (base,) = stage_configs(config)
    assert (base.method.name, base.loss.name, base.model.projection_hidden, base.stages) == ("vsepp", "vsepp", None, [])
    assert base.train == config.train and base.seed == config.seed
    # ConVSE and ConVSE++ rows need the same base: one key
    plus = convse("/data", "method.name=convsepp", "loss={name: convsepp, margin: 0.2, tau: 0.1}")
    assert stage_key(stage_configs(plus)[0], "d") == stage_key(base, "d") != stage_key(base, "other data")


@pytest.mark.parametrize(
    "stages, field, says",
    [
        (
            "[{name: base, copy: [model.image_encoder], overrides: [train.epochz=3]}]",
            "stages.base.train.epochz",
            "unknown key",
        ),
        ("[{name: base, copy: [model.image_encoder], overrides: ['stages=[]']}]", "stages", "cannot declare stages"),
        ("[{name: base, copy: [model.image_encoder], freeze: [model.text_encoder]}]", "stages", "only parts copied"),
        ("[{name: a, copy: [model.image_encoder]}, {name: a, copy: [model.image_encoder]}]", "stages", "appears more"),
        (
            "[{name: base, copy: [model.image_encoder.head], overrides: [model.projection_hidden=null]}]",
            "stages.base.copy",
            "stage base's model has no such part",
        ),
        ("[{name: base, copy: [model.image_encoder, model.fusion]}]", "stages.base.copy", "no such part"),
        ("[{name: base, copy: []}]", "stages", "at least 1"),
    ],
)
def test_bad_stages_are_one_clear_error_before_anything_trains(stages, field, says):
    with pytest.raises(ConfigError) as caught:
        convse("/data", stages=stages)
    assert caught.value.field.startswith(field) and says in str(caught.value), str(caught.value)


def test_the_next_model_starts_from_the_stage_with_new_heads(tmp_path):
    config = convse(tmp_path)
    (base,) = stage_configs(config)
    stage_model = build_method(base, vocab_size=30, feature_dim=32)
    folder = tmp_path / "base"
    folder.mkdir()
    torch.save({"model": stage_model.state_dict(), "state": {}, "rng": {}}, folder / "model.pt")
    method = build_method(config.model_copy(update={"stages": []}), vocab_size=30, feature_dim=32)
    fresh = {k: v.clone() for k, v in method.state_dict().items()}
    counts = start_from(method, TrainedStage("base", folder, None, 1.0), config.stages[0])
    after = method.state_dict()
    for key, value in stage_model.state_dict().items():  # every weight of the base network, as trained
        assert torch.equal(after[key], value), key
    heads = [key for key in after if ".head." in key]
    assert heads and all(torch.equal(after[key], fresh[key]) for key in heads)  # the projection heads: new
    assert counts == {"copied": len(stage_model.state_dict()), "fresh": len(heads)}
    frozen = config.stages[0].model_copy(update={"freeze": ["model.image_encoder"]})
    start_from(method, TrainedStage("base", folder, None, 1.0), frozen)
    assert all(not p.requires_grad for n, p in method.named_parameters() if n.startswith("model.image_encoder."))
    assert all(p.requires_grad for n, p in method.named_parameters() if n.startswith("model.text_encoder."))
    # weights of another shape: one line naming the stage and the weight
    small = build_method(
        base.model_copy(update={"model": base.model.model_copy(update={"embed_dim": 8})}), vocab_size=30, feature_dim=32
    )
    torch.save({"model": small.state_dict(), "state": {}, "rng": {}}, folder / "model.pt")
    with pytest.raises(UserInputError, match="stages.base.copy: 'model.image_encoder.fc.weight' is"):
        start_from(method, TrainedStage("base", folder, None, 1.0), config.stages[0])


def test_a_new_projection_head_keeps_distinct_inputs_apart():
    """The heads a ConVSE run adds to its base network start Xavier-uniform with zero biases: PyTorch's
    default biases map every unit-norm input to almost the same vector (mean cosine 0.79 here), from
    which ConVSE++'s hinge did not leave its plateau."""
    torch.manual_seed(0)
    head = ProjectionHead(128, 512)
    for layer in (head.net[0], head.net[2]):
        bound = (6 / (layer.in_features + layer.out_features)) ** 0.5
        assert torch.count_nonzero(layer.bias) == 0 and layer.weight.abs().max() <= bound
    inputs = torch.nn.functional.normalize(torch.randn(64, 128), dim=-1)
    outputs = torch.nn.functional.normalize(head(inputs), dim=-1)
    cosines = outputs @ outputs.T
    assert (cosines.sum() - cosines.trace()) / (64 * 63) < 0.5  # 0.30 with this init, 0.79 with the default


def test_a_stage_trains_once_and_a_run_that_finds_it_ends_the_same(tmp_path):
    config = convse(tmp_path / "data", "train.epochs=2")
    generate_if_synthetic(config)
    first = run_experiment(config, tmp_path / "runs" / "first")
    (folder,) = (tmp_path / "runs" / "stages").glob("base-seed0-*")
    record = json.loads((folder / "stage.json").read_text())
    assert record["config"]["method"]["name"] == "vsepp" and record["seconds"] > 0
    stamp = (folder / "model.pt").stat().st_mtime_ns
    second = run_experiment(config, tmp_path / "runs" / "second")  # finds the stage: trains only itself
    assert (folder / "model.pt").stat().st_mtime_ns == stamp
    assert second.test.to_dict() == first.test.to_dict()  # same seed, same result, stage trained or found
    # each run counts the stage it started from in its cost
    assert second.seconds >= record["seconds"]
    main = load_checkpoint(tmp_path / "runs" / "first" / "last.pt")["model"]
    assert any(".head." in key for key in main)
    # another seed: its own stage
    run_experiment(config.model_copy(update={"seed": 1}), tmp_path / "runs" / "third")
    assert len(list((tmp_path / "runs" / "stages").glob("base-seed1-*"))) == 1


def test_a_run_of_the_stages_recipe_is_kept_as_the_stage_and_nothing_trains_it_again(tmp_path, capsys):
    """A run that shares the stage folder and trains the stage's config from scratch (ConVSE's VSE++ row)
    keeps its best model as the stage: the ConVSE run starts from it and ends as if it had trained it."""
    data = tmp_path / "data"
    shared = convse(data, "train.epochs=2", f"output.stages={tmp_path / 'shared'}")
    generate_if_synthetic(shared)
    (base,) = stage_configs(shared)  # the VSE++ row: the stage's config, output.stages included
    base.output.keep_as_stage = True  # as a sweep sets it on such a row (tests/test_sweep_jobs.py)
    row = run_experiment(base, tmp_path / "runs" / "vsepp")
    (kept,) = (tmp_path / "shared").iterdir()
    assert kept.name == f"run-seed0-{stage_key(base, fingerprint(data))}"
    record = json.loads((kept / "stage.json").read_text())
    assert record["run_dir"] == str(row.run_dir) and 0 < record["seconds"] <= row.seconds
    assert (kept / "model.pt").read_bytes() == (row.run_dir / "model.pt").read_bytes()
    capsys.readouterr()
    found = run_experiment(shared, tmp_path / "runs" / "convse")
    out = capsys.readouterr().out
    assert f"stage base: trained already in {kept}" in out and "stage base: training in" not in out
    assert sorted(p.name for p in (tmp_path / "shared").iterdir()) == sorted([kept.name, f"base-{kept.name[4:]}"])
    assert not list((tmp_path / "shared" / f"base-{kept.name[4:]}").iterdir())  # its lock only: nothing trained
    # the same run with the stage trained for it: the same result
    own = convse(data, "train.epochs=2", f"output.stages={tmp_path / 'own'}")
    trained = run_experiment(own, tmp_path / "runs" / "own")
    assert found.test.to_dict() == trained.test.to_dict()
    # kept only when asked, from a run that trained from scratch: not the ConVSE runs (they start from a
    # stage, asked or not), not a run of the stage's recipe that was not asked
    asked = convse(data, "train.epochs=1", f"output.stages={tmp_path / 'own'}", "output.keep_as_stage=true")
    run_experiment(asked, tmp_path / "runs" / "asked")
    base.output.keep_as_stage, base.output.stages = False, tmp_path / "unasked"
    run_experiment(base, tmp_path / "runs" / "unasked")
    assert {p.name.split("-")[0] for p in (tmp_path / "own").iterdir()} == {"base"}  # its 2- and 1-epoch stages
    assert not (tmp_path / "unasked").exists()


@pytest.mark.e2e
def test_two_runs_started_at_once_train_the_stage_once(tmp_path):
    """Two `jobs/train.py` processes that need the same stage: one trains it, the other waits for it."""
    overrides = [
        f"dataset.root={tmp_path / 'data'}",
        "train.epochs=1",
        *CONVSE,
        f"stages=[{BASE}]",
        f"output.stages={tmp_path / 'stages'}",
    ]
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}", "OMP_NUM_THREADS": "1"}
    from itrlab.tracking import MlflowTracker

    generate_if_synthetic(convse(tmp_path / "data"))  # the data and the MLflow store exist before both start
    MlflowTracker("vsepp_synthetic_tiny", env["MLFLOW_TRACKING_URI"])
    runs = [
        subprocess.Popen(
            [
                sys.executable,
                str(REPO / "jobs" / "train.py"),
                "-c",
                "vsepp_synthetic_tiny",
                *overrides,
                f"--run-dir={tmp_path / f'run{i}'}",
            ],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    outputs = [run.communicate(timeout=300)[0] for run in runs]
    assert [run.returncode for run in runs] == [0, 0], outputs
    assert sum(output.count("stage base: training in") for output in outputs) == 1, outputs
    assert all("starting from stage base" in output for output in outputs)
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("vsepp_synthetic_tiny")
    runs = client.search_runs([experiment.experiment_id])
    stage_runs = [r for r in runs if r.data.tags.get("itrlab.stage") == "base"]
    assert len(stage_runs) == 1 and stage_runs[0].info.status == "FINISHED"
    users = [r for r in runs if "itrlab.stage.base" in r.data.tags]
    assert len(users) == 2 and {r.data.tags["itrlab.stage.base"] for r in users} == {stage_runs[0].info.run_id}
    assert all(
        r.data.metrics["stage_seconds"] == pytest.approx(stage_runs[0].data.metrics["stage_seconds"]) for r in users
    )


@pytest.mark.parametrize("experiment", ["vsepp_synthetic_tiny", "dbl_synthetic_tiny", "coder_synthetic_tiny"])
def test_a_stages_parts_are_read_from_the_meta_model_as_the_cpu_model_has_them(experiment):
    """The stage check reads a model's parameter names from it built on the meta device: the same names as the
    model built on the CPU has."""
    from itrlab.assembly import parameter_names
    from itrlab.methods import METHODS
    from itrlab.methods.context import BuildContext

    config = load_experiment(experiment)
    on_cpu = METHODS[config.method.name].from_config(config, BuildContext(feature_dim=8, vocab_size=8))
    assert parameter_names(config) == set(on_cpu.state_dict())
