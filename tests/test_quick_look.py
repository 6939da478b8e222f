"""A newcomer's path: a short run refused with the settings that make one, a run at chance or on its
plateau said so in its last lines, the extraction's --out named by the data set, and a job run from another
folder says where its relative paths land."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import REPO
from itrlab.assembly import load_experiment
from itrlab.cli import main
from itrlab.errors import ConfigError, DataError
from itrlab.report.chance import chance_level
from itrlab.report.verdict import PLATEAU_SHARE, at_chance, on_plateau, verdicts
from itrlab.workdir import JOB_CONFIG_ENV, elsewhere_line, project_folder

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# -- a short run -----------------------------------------------------------------------------------------------


def test_a_run_shorter_than_its_warm_up_is_refused_with_the_settings_of_a_short_run():
    """``vsepp_flickr8k`` with ``train.epochs=1``: the warm-up takes epoch 1 and the decay after epoch 3 cannot
    fire; one sentence gives the epochs the schedule needs and the overrides of a short run, and those overrides
    pass."""
    with pytest.raises(ConfigError) as caught:
        load_experiment("vsepp_flickr8k", ["train.epochs=1"])
    err = caught.value
    assert err.field == "train.epochs" and err.value == 1
    message = str(err)
    assert "the warm-up loss 'vse' for the first epoch and the main loss 'vsepp' only after it" in message
    assert "3 can never fire with train.epochs=1" in message
    assert "set train.epochs=4 or more, or for a short run train.epochs=2 train.lr_decay_epochs=[]" in message
    short = re.search(r"for a short run (.*?) \(docs", message).group(1).split()
    assert load_experiment("vsepp_flickr8k", short).train.epochs == 2
    assert load_experiment("vsepp_flickr8k", ["train.epochs=4"]).loss.warmup_epochs == 1


@pytest.mark.parametrize(
    "overrides, field, says",
    [
        (
            ["loss.warmup_epochs=3", "train.epochs=3"],
            "loss.warmup_epochs",
            "the warm-up loss 'vse' for the first 3 epochs and the main loss 'vsepp' only after them; "
            "set train.epochs=4 or more (docs",
        ),
        (
            ["loss.warmup_epochs=2", "train.epochs=2", "train.lr_decay_epochs=[1]"],
            "loss.warmup_epochs",
            "train.epochs=3 or more",
        ),
        (
            ["loss.warmup_epochs=1", "train.epochs=1", "train.lr_decay_epochs=[5]"],
            "train.epochs",
            "set train.epochs=6 or more, or for a short run train.epochs=2 train.lr_decay_epochs=[]",
        ),
    ],
)
def test_the_refusal_names_every_setting_the_run_needs(overrides, field, says):
    with pytest.raises(ConfigError) as caught:
        load_experiment("vsepp_synthetic_tiny", overrides)
    assert caught.value.field == field and says in str(caught.value), str(caught.value)


def test_the_short_run_of_the_docs_is_the_one_the_refusal_gives():
    documented = (REPO / "docs" / "data.md").read_text()
    assert "python jobs/train.py -c vsepp_flickr8k train.epochs=2 'train.lr_decay_epochs=[]'" in documented
    assert "## A short run" in (REPO / "docs" / "training.md").read_text()


# -- at chance, on its plateau -------------------------------------------------------------------------------------


def test_a_test_rsum_within_chances_range_is_said_and_one_above_it_is_not():
    chance = chance_level(1000, 5, "f8k_1k")
    low, high = chance.rsum_band
    said = at_chance(high - 0.1, chance)
    assert said.startswith(f"at chance: test rsum {high - 0.1:.1f}") and f"{low:.1f} to {high:.1f}" in said
    assert at_chance(high + 0.1, chance) is None and at_chance(2.0, None) is None


def test_a_loss_that_does_not_move_after_its_warm_up_is_said_to_sit_on_its_plateau():
    flat = {"loss": [(1, 895.2), (2, 51.25), (3, 51.21), (4, 51.2)]}  # epoch 1: the warm-up's other loss
    said = on_plateau(flat, warmup_epochs=1)
    assert said == (
        f"on its plateau: the training loss went from 51.25 (epoch 2) to 51.2 (epoch 4), less than "
        f"{PLATEAU_SHARE:.0%} lower: it never left the value it started at"
    )
    assert on_plateau({"loss": [(1, 895.2), (2, 42.5)]}, warmup_epochs=1) is None  # one epoch after it: no telling
    assert on_plateau({"loss": [(1, 51.2), (2, 30.0)]}, warmup_epochs=0) is None  # it moved
    assert verdicts(250.0, chance_level(1000, 5, "all"), {"loss": [(1, 4.0), (2, 3.0)]}, 0) == []


def test_a_run_at_chance_says_so_in_its_last_lines_and_where_it_wrote(tmp_path, monkeypatch, capsys, tiny_root):
    """A real tiny training whose rate is too small to move its random initialisation: the recall table, then
    the run's verdicts, last; run from a folder that is not the project's, its first line says where it writes."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    code = main(
        [
            "train",
            "-c",
            "vsepp_synthetic_tiny",
            f"dataset.root={tiny_root}",
            "output.dir=runs",
            "tracking.enabled=false",
            "train.epochs=3",
            "train.lr=1e-12",
            "train.lr_decay_epochs=[]",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    lines = out.strip().splitlines()
    here = tmp_path.resolve()
    assert lines[0].startswith(
        f"itrlab: working in {here}, not in the project folder {REPO}: the run folder {here}/runs/vsepp_synthetic_tiny/"
    )
    assert lines[0].endswith(f"(relative paths are read from the working folder; cd {REPO} to use the project's)")
    assert lines[-4].startswith("itrlab: at chance: test rsum ")
    assert "random scores on 50 images x 5 captions" in lines[-4]
    table = lines.index("Chance (random scores on 50 images x 5 captions)")  # under the test table, its columns
    assert lines[table - 5].startswith("Recall (protocol all: 50 images") and lines[table + 2].split()[-3:] == [
        "2.00",
        "10.00",
        "20.00",
    ]
    assert lines[-3].startswith("itrlab: on its plateau: the training loss went from ")
    assert lines[-2].startswith("itrlab: collapsed: test MD ")  # random projections score every pair alike
    assert lines[-1] == (
        "itrlab: this run measured its settings, not the method: see docs/training.md#at-chance-or-on-a-plateau"
    )


# -- where paths land ---------------------------------------------------------------------------------------------


def test_relative_paths_are_said_only_outside_the_project(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert project_folder() == REPO
    monkeypatch.chdir(REPO)
    assert elsewhere_line([("data", "data/x")]) is None
    monkeypatch.chdir(tmp_path)
    here = tmp_path.resolve()
    assert elsewhere_line([("data", "data/x"), ("runs", "/abs/runs")]) == (
        f"working in {here}, not in the project folder {REPO}: data {here}/data/x, the MLflow store "
        f"{here}/mlflow.db (relative paths are read from the working folder; cd {REPO} to use the project's)"
    )
    assert elsewhere_line([("data", "/abs/data")], tracking=False) is None
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    assert elsewhere_line([("runs", "/abs/runs")]) is None


def test_a_ray_job_says_its_relative_paths_land_in_its_copy_and_which_it_was_shipped_with(tmp_path, monkeypatch):
    """Under `ray job submit --working-dir` the driver works in Ray's copy of the folder: `cd` is no remedy there,
    paths on the cluster are; a folder the job was shipped with is read from the copy."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv(JOB_CONFIG_ENV, json.dumps({"runtime_env": {"working_dir": "gcs://_ray_pkg_1.zip"}}))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data" / "mine").mkdir(parents=True)
    here = tmp_path.resolve()
    line = elsewhere_line([("data", "data/synthetic/smoke"), ("the sweep folders", "runs/sweeps")])
    assert line == (
        f"a Ray job: working in its copy of the submitted folder, {here}: data {here}/data/synthetic/smoke, the "
        f"sweep folders {here}/runs/sweeps, the MLflow store {here}/mlflow.db (relative paths are read in this "
        "copy, and what the job was not shipped with is made or looked for there: give them as paths on the "
        "cluster, an absolute dataset.root, --storage or output.dir and MLFLOW_TRACKING_URI in the job's runtime "
        "env; docs/sweeps.md#running-on-a-ray-cluster)"
    )
    assert elsewhere_line([("data", "data/mine")], tracking=False) == (
        f"a Ray job: working in its copy of the submitted folder, {here}: data {here}/data/mine (shipped with the job)"
    )
    assert elsewhere_line([("data", "/abs/data")], tracking=False) is None
    monkeypatch.setenv(JOB_CONFIG_ENV, json.dumps({"runtime_env": {}}))  # no --working-dir: the folder it started in
    assert elsewhere_line([("data", "data/mine")], tracking=False).endswith(f"cd {REPO} to use the project's)")


def test_an_error_about_a_relative_path_names_the_folder_it_was_resolved_from(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert str(DataError("data/x/train_caps.txt", "file not found")) == (
        f"data error in data/x/train_caps.txt (relative to {tmp_path}): file not found"
    )
    absolute = DataError(tmp_path / "a.txt", "file not found", line=3)
    assert str(absolute) == f"data error in {tmp_path}/a.txt:3: file not found"
    from itrlab.assembly import assemble

    with pytest.raises(ConfigError, match=re.escape(f"_caps.txt (relative to {tmp_path})")):
        assemble("vsepp_flickr8k", ["dataset.root=data/nowhere"])


# -- the extraction's output folder -----------------------------------------------------------------------------


def test_images_without_out_is_refused_with_the_folders_the_data_set_configs_read(capsys):
    from itrlab.extract.ray_tasks import main as extract_main

    code = extract_main(["--images", "photos", "--captions", "captions.json", "--split-file", "splits.txt"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("itrlab: error: --images needs --out: the precomp folder to write")
    assert "data/flickr8k_precomp with --pool 1x1 (flickr8k_precomp)" in err
    assert "data/coco_mini_precomp (coco_mini)" in err


def test_the_documented_flickr8k_command_writes_where_the_experiment_reads():
    """docs/data.md's one command for Flickr8K: the manifest it checks against names as its features' folder and
    layouts the folder and layout the data set config reads, and the stored text features vsepp_flickr8k reads."""
    from itrlab.acquire.manifest import find_manifest, read_manifest
    from test_cli_commands import documented_commands

    (line, *_) = [c for c in documented_commands(r"itrlab data flickr8k --from")]
    manifest = read_manifest(find_manifest(line.split()[2]))
    root = Path(load_experiment("vsepp_flickr8k").dataset.root)
    assert Path(manifest.precomp) == root.parent and root.name == "pool1x1"
    assert "1x1" in manifest.extract.pool.split(",") and manifest.extract.text == "tokens"
    assert load_experiment("vsepp_flickr8k").model.text.encoder == "precomp"


def test_a_sweep_names_the_data_folder_its_trials_read(tmp_path, monkeypatch):
    """What `jobs/sweep_dbl.py --preset smoke` started elsewhere lists: its base experiment's data folder as
    written (relative: read from the working folder), with the overrides given."""
    from itrlab.cli import sweep_data_root
    from itrlab.config.sweep import load_sweep, sweep_presets

    spec = load_sweep(sweep_presets()["dbl-smoke"], None)
    assert sweep_data_root(spec, []) == "data/synthetic/smoke"
    assert sweep_data_root(spec, ["dataset.root=/x"]) == "/x"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    here = tmp_path.resolve()
    assert elsewhere_line([("data", sweep_data_root(spec, [])), ("the sweep folders", "runs/sweeps")]) == (
        f"working in {here}, not in the project folder {REPO}: data {here}/data/synthetic/smoke, the sweep folders "
        f"{here}/runs/sweeps (relative paths are read from the working folder; cd {REPO} to use the project's)"
    )
