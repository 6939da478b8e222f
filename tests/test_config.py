"""Config composition, overrides and the user-facing errors (exit status 2, one clear message)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from itrlab.assembly import check_experiment, load_experiment
from itrlab.cli import main
from itrlab.config import compose
from itrlab.errors import ConfigError


def write_experiment(tmp_path: Path, precomp: Path, **sections) -> Path:
    tree = {
        "defaults": {"method": "vsepp"},
        "name": "cfgtest",
        "dataset": {"name": "toy", "kind": "precomp", "root": str(precomp)},
        "model": {"embed_dim": 16, "text": {"word_dim": 8}},
        "train": {"epochs": 2, "batch_size": 16},
        "output": {"dir": str(tmp_path / "runs")},
    }
    for key, value in sections.items():
        tree[key] = {**tree.get(key, {}), **value} if isinstance(value, dict) else value
    path = tmp_path / "experiment.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().err


def test_composition_merges_method_dataset_experiment_and_overrides():
    tree = compose("vsepp_synthetic_small", ["train.epochs=3", "loss.margin=0.1", "train.lr_decay_epochs=[2]"])
    assert tree["method"] == {"name": "vsepp"}
    assert tree["dataset"]["kind"] == "synthetic"
    config = load_experiment(
        "vsepp_synthetic_small", ["train.epochs=3", "loss.margin=0.1", "train.lr_decay_epochs=[2]"]
    )
    assert config.train.epochs == 3 and config.loss.params() == {"margin": 0.1}
    assert config.train.lr_decay_epochs == [2]


def test_defaults_override_swaps_files():
    config = load_experiment("vsepp_synthetic_small", ["defaults.method=convsepp", "defaults.dataset=synthetic_tiny"])
    assert config.dataset.name == "synthetic_tiny"
    assert config.loss.name == "convsepp" and config.loss.params() == {"margin": 0.2, "tau": 0.1}
    assert config.model.projection_hidden == 512


def test_every_shipped_experiment_validates():
    """Each experiment as it is; a recipe that names no data set of its own (vsepp_photos: the data set config an
    extraction writes) with one, and without one it says how to name it."""
    from itrlab.config import config_dir

    names = [p.stem for p in (config_dir() / "experiments").glob("*.yaml")]
    assert len(names) >= 6
    recipes = [name for name in names if "dataset" not in compose(name)]
    assert recipes == ["vsepp_photos"]
    for name in names:
        load_experiment(name, ["defaults.dataset=synthetic_tiny"] if name in recipes else [])
    with pytest.raises(ConfigError) as err:
        load_experiment("vsepp_photos")
    assert err.value.field == "defaults.dataset" and "the experiment names no data set" in str(err.value)


def test_defaults_dataset_takes_a_data_set_configs_path(tmp_path):
    """A data set config outside configs/datasets/ (the one an extraction writes beside its features) by its path;
    a path to no file is one config error naming it."""
    written = tmp_path / "holiday" / "holiday.yaml"
    written.parent.mkdir()
    written.write_text(
        f"name: holiday\nkind: precomp\nroot: {tmp_path / 'holiday'}\nsplits: {{train: train, val: dev, test: test}}\n"
    )
    config = load_experiment("vsepp_photos", [f"defaults.dataset={written}", "name=vsepp_holiday"])
    assert (config.name, config.dataset.name, config.dataset.root) == ("vsepp_holiday", "holiday", tmp_path / "holiday")
    assert config.model.text.encoder == "precomp" and config.experiment_name == "vsepp_holiday"
    with pytest.raises(ConfigError) as err:
        load_experiment("vsepp_photos", [f"defaults.dataset={tmp_path / 'gone.yaml'}"])
    assert err.value.field == "defaults.dataset" and "does not exist" in str(err.value)


def test_flat_params_use_dotted_keys():
    flat = load_experiment("vsepp_synthetic_tiny").flat()
    assert flat["loss.margin"] == "0.2" and flat["train.epochs"] == "2"


# (overrides, field named in the message, fragments that must appear)
CASES = [
    (["method.name=vsep"], "method.name", ["'vsep'", "did you mean 'vsepp'"]),
    (["loss.name=convse_pp"], "loss.name", ["known losses", "convsepp"]),
    (["trian.epochs=3"], "trian", ["unknown key", "did you mean 'train'"]),
    (["train.epoch=3"], "train.epoch", ["unknown key", "did you mean 'epochs'"]),
    (["loss.tua=0.1"], "loss.tua", ["unknown key for loss 'vsepp'", "margin"]),
    (["train.epochs=ten"], "train.epochs", ["'ten'", "integer"]),
    (["loss.margin=-0.1"], "loss.margin", ["-0.1", ">= 0"]),
    (["defaults.method=convse", "loss.tau=0"], "loss.tau", ["0", "> 0"]),
    (["defaults.method=convse", "loss.tau=hot"], "loss.tau", ["'hot'", "> 0"]),
    (["train.lr=0"], "train.lr", ["greater than 0"]),
    (["train.batch_size=100000"], "train.batch_size", ["100000", "at most the number of training captions (200)"]),
    (["dataset.captions_per_image=4"], "dataset.captions_per_image", ["4", "5 per image"]),
    (["eval.test_protocol=coco1k"], "eval.test_protocol", ["known protocols", "did you mean 'coco_1k'"]),
    (["eval.test_protocol=coco_5k"], "eval.test_protocol", ["coco_5k", "test split"]),
    (["model.image.pooling=max"], "model.image.pooling", ["'max'", "mean", "gpo"]),
    (["train.lr_decay_epochs=[5,0]"], "train.lr_decay_epochs", ["[5, 0]", "increasing epoch numbers >= 1"]),
    # a decay chosen on validation: empty, one choice, out of the epochs, beside a fixed schedule, a decay of 1
    (["train.lr_decay_choices=[]"], "train.lr_decay_choices", ["[]", "chooses nothing", "two or more"]),
    (["train.lr_decay_choices=[3]"], "train.lr_decay_choices", ["no choice", "train.lr_decay_epochs=[3]"]),
    (["train.lr_decay_choices=[3,2]"], "train.lr_decay_choices", ["increasing epoch numbers >= 1"]),
    (["train.lr_decay_choices=[0,2]"], "train.lr_decay_choices", ["increasing epoch numbers >= 1"]),
    (
        ["train.epochs=6", "train.lr_decay_choices=[3,6]"],
        "train.lr_decay_choices",
        ["6 can never fire with train.epochs=6", "allowed: 1 to 5"],
    ),
    (
        ["train.epochs=6", "train.lr_decay_choices=[1,3]", "train.lr_decay_epochs=[2]"],
        "train.lr_decay_choices",
        ["cannot be combined with train.lr_decay_epochs=[2]", "set train.lr_decay_epochs=[]"],
    ),
    (
        ["train.epochs=6", "train.lr_decay_choices=[1,3]", "train.lr_decay=1"],
        "train.lr_decay_choices",
        ["decays nothing"],
    ),
    (["train.epochs"], "override", ["section.key=value"]),
    (["defaults.dataset=f30k"], "defaults.dataset", ["f30k_precomp"]),
    (["dataset.root=/nonexistent/itrlab"], "dataset.root", ["/nonexistent/itrlab", "existing directory"]),
    (["dataset.kind=folder"], "dataset.kind", ["'folder'", "precomp", "synthetic"]),
    (["loss.warmup_epochs=1", "loss.warmup_loss=vse_sum"], "loss.warmup_loss", ["'vse_sum'", "known losses"]),
    (["loss.warmup_epochs=50"], "loss.warmup_epochs", ["50", "too short for this schedule", "train.epochs=51 or more"]),
    (["loss.warmup_epochs=-1"], "loss.warmup_epochs", ["-1", "greater than or equal to 0"]),
    (["train.device=gpu"], "train.device", ["'gpu'", "auto|cpu|cuda"]),
]


@pytest.mark.parametrize("overrides, field, fragments", CASES, ids=[c[1] + ":" + c[0][-1] for c in CASES])
def test_bad_input_exits_2_with_one_clear_message(
    tmp_path, monkeypatch, capsys, precomp_dir, overrides, field, fragments
):
    monkeypatch.chdir(tmp_path)
    experiment = write_experiment(tmp_path, precomp_dir)
    code, err = run_cli(capsys, "train", "-c", str(experiment), *overrides)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert f"'{field}'" in lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    # nothing expensive started: no MLflow store, no run directory
    assert not (tmp_path / "mlflow.db").exists()
    assert not (tmp_path / "runs").exists()


def test_missing_split_file_names_the_file(tmp_path, monkeypatch, capsys, precomp_dir):
    monkeypatch.chdir(tmp_path)
    (precomp_dir / "test_caps.txt").unlink()
    code, err = run_cli(capsys, "train", "-c", str(write_experiment(tmp_path, precomp_dir)))
    assert code == 2 and "test_caps.txt" in err


def test_unknown_experiment_suggests_closest(capsys):
    code, err = run_cli(capsys, "train", "-c", "vsepp_synthetic_smal")
    assert code == 2 and "did you mean 'vsepp_synthetic_small'" in err


def test_invalid_yaml_names_file_and_line(tmp_path, capsys):
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\ntrain: {epochs: 3\nloss: [\n")
    code, err = run_cli(capsys, "train", "-c", str(path))
    assert code == 2 and "broken.yaml" in err and "line" in err


def test_synthetic_size_is_checked():
    config = load_experiment("vsepp_synthetic_tiny", ["dataset.synthetic.size=huge"])
    with pytest.raises(ConfigError) as err:
        check_experiment(config)
    assert err.value.field == "dataset.synthetic.size" and "tiny" in str(err.value)


def test_check_config_prints_resolved_config(tmp_path, monkeypatch, capsys, precomp_dir):
    monkeypatch.chdir(tmp_path)
    code = main(["check-config", "-c", str(write_experiment(tmp_path, precomp_dir)), "train.epochs=1"])
    out = capsys.readouterr().out
    assert code == 0
    assert yaml.safe_load(out)["train"]["epochs"] == 1


def test_a_decay_chosen_on_validation_counts_every_schedule_it_trains_once():
    """``train.trained_epochs``: the undecayed epochs up to the latest choice once, then each choice's own."""
    from itrlab.config.schema import TrainConfig

    assert TrainConfig(epochs=30, lr_decay_epochs=[15]).trained_epochs == 30
    assert TrainConfig(epochs=30, lr_decay_choices=[3, 9, 15]).trained_epochs == 15 + 27 + 21 + 15
    assert TrainConfig(epochs=5, lr_decay_choices=[1, 3]).trained_epochs == 3 + 4 + 2
