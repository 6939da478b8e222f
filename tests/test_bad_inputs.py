"""Bad input, one table: each case exits 2 with one line that names the field, before anything starts.

Config overrides go through ``itrlab check-config`` (the same assembly every command uses); sweep
files through ``load_sweep``. Each row: the overrides (or the sweep file's text) and the field the
message must name.
"""

from __future__ import annotations

import pytest

from itrlab.cli import main
from itrlab.config.sweep import load_sweep
from itrlab.errors import ConfigError

CONFIG_CASES = [
    # non-finite and absurd numbers, and truth values where numbers belong (every section, by type)
    (["train.lr=.inf"], "train.lr"),
    (["train.lr=1e999"], "train.lr"),
    (["train.lr=.nan"], "train.lr"),
    (["train.lr=true"], "train.lr"),
    (["train.weight_decay=.inf"], "train.weight_decay"),
    (["train.grad_clip=.inf"], "train.grad_clip"),
    (["train.epochs=true"], "train.epochs"),
    (["seed=true"], "seed"),
    (["seed=100000000000000000000"], "seed"),
    (["seed=-1"], "seed"),
    (["dataset.synthetic.seed=100000000000000000000"], "dataset.synthetic.seed"),
    (["model.embed_dim=1000000000"], "model.embed_dim"),
    (["train.loader_workers=100000"], "train.loader_workers"),
    (["loss.margin=.inf"], "loss.margin"),
    # a learning-rate decay that can never fire: at or after the last epoch
    (["train.epochs=4", "train.lr_decay_epochs=[4]"], "train.lr_decay_epochs"),
    (["train.epochs=1", "train.lr_decay_epochs=[1]"], "train.lr_decay_epochs"),
    # names are one folder name
    (["name=../../../../x"], "name"),
    (["name=a/b"], "name"),
    (["name="], "name"),
    (["name=.hidden"], "name"),
    # a loss the method cannot feed, a method's own keys
    (["defaults.method=mvn", "loss={name: ascl}"], "loss.name"),
    (["method.name=nope"], "method.name"),
    (["method.nope=1"], "method.nope"),
    (["defaults.method=ascl", "train.lr_decay_epochs=[]", "method.cutoff_rows=1000"], "method.cutoff_rows"),
    # a loss's typed settings: one it does not take, a value it refuses, a truth value for a number
    (["loss.tau=0.1"], "loss.tau"),
    (["loss.margin=true"], "loss.margin"),
    (["defaults.method=coder", "loss.div=var"], "loss.div"),
    # a scheme's section: settings its strategy or loss does not use (DBL's alpha for RM, anything for A)
    (["cooperative={strategy: F, alpha: 0.9}"], "cooperative.alpha"),
    (["cooperative={strategy: A, gamma: 0.2}"], "cooperative.gamma"),
    (["cooperative={strategy: F, soft: true}"], "cooperative.soft"),
    (["cooperative={loss: rm, hardest: violation}"], "cooperative.hardest"),
    (["cooperative={strategy: G, alpha: -.inf}"], "cooperative.alpha"),
    (["cooperative={strategy: G, ema: {start: 0.9}}"], "cooperative.ema"),
    (["cooperative={scenario: oas, strategy: G, branches: 3}"], "cooperative.branches"),
    (["cooperative={loss: dml, tau: 0}"], "cooperative.tau"),
    (["cooperative={strategy: J}"], "cooperative.strategy"),
]


@pytest.mark.parametrize("overrides, field", CONFIG_CASES, ids=[" ".join(c[0]) for c in CONFIG_CASES])
def test_bad_config_exits_2_with_one_line(overrides, field, capsys):
    assert main(["check-config", "-c", "vsepp_synthetic_tiny", "--no-data", *overrides]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"config error at '{field}'" in err, err


DATA_CASES = [
    (["dataset.synthetic.knobs={n_train: 1000000000}"], "dataset.synthetic"),  # ~770 GB of features
    (["dataset.synthetic.knobs={feature_dim: 100000000}"], "dataset.synthetic"),
]


@pytest.mark.parametrize("overrides, field", DATA_CASES, ids=[" ".join(c[0]) for c in DATA_CASES])
def test_data_that_cannot_fit_this_machine_exits_2_with_one_line(tmp_path, overrides, field, capsys):
    root = tmp_path / "never-written"
    assert main(["check-config", "-c", "vsepp_synthetic_tiny", f"dataset.root={root}", *overrides]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"config error at '{field}'" in err and " GB " in err, err
    assert not root.exists()


def test_a_method_settings_number_that_is_a_truth_value_names_the_key(capsys):
    assert main(["check-config", "-c", "coder_synthetic_tiny", "--no-data", "method.K=true"]) == 2
    assert "config error at 'method.K'" in capsys.readouterr().err


SWEEP_CASES = [
    ("grid: {cooperative.strategy: [A, B]}\ngrid: {cooperative.strategy: [F]}", "written twice"),
    ("grid: {cooperative.strategy: [A, A]}", "lists the values A twice"),
    ("grid: {cooperative.strategy: [A, F]}\nseeds: [0, 0]", "repeat a seed"),
    ("grid: {variant: [{name: x, train.lr: 0.001}, {name: x, train.lr: 0.01}]}", "lists the names x twice"),
    ("grid: {}", "the grid is empty"),
    ("grid: {cooperative.strategy: [A]}\nname: ../../x", "name"),
]


@pytest.mark.parametrize("text, message", SWEEP_CASES, ids=[c[1] for c in SWEEP_CASES])
def test_bad_sweep_file_is_refused(tmp_path, text, message):
    body = text if text.startswith("grid: {cooperative.strategy: [A]}\nname") else f"name: bad\n{text}"
    path = tmp_path / "bad.yaml"
    path.write_text(f"experiment: dbl_synthetic_tiny\n{body}\n")
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        load_sweep(path)


def test_a_split_whose_features_have_another_width_is_one_line(tmp_path, capsys):
    import numpy as np

    from conftest import write_precomp

    root = write_precomp(tmp_path / "precomp", {"train": 40, "dev": 10, "test": 10})
    np.save(root / "dev_ims.npy", np.zeros((10, 4, 12), dtype=np.float32))  # train's are 8 wide
    assert (
        main(
            [
                "check-config",
                "-c",
                "vsepp_synthetic_tiny",
                "dataset.kind=precomp",
                f"dataset.root={root}",
                "dataset.synthetic=null",
                "train.batch_size=8",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "dev_ims.npy" in err and "width 12" in err, err


@pytest.mark.parametrize("flag", ["--epochs", "--floor-steps", "--max-steps", "--repeats"])
def test_a_benchmark_count_below_one_is_one_line_and_exit_2(flag, capsys):
    """A count of 0 steps once divided by zero after the model was built; now argparse refuses it."""
    from conftest import benchmark

    bench_cli = benchmark("train").main

    with pytest.raises(SystemExit) as exited:
        bench_cli([flag, "0"])
    assert exited.value.code == 2 and f"argument {flag}: 0 is less than 1" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["train", "check-config"])
def test_a_config_that_is_a_folder_says_so(tmp_path, monkeypatch, capsys, command):
    """``-c <folder>`` names the folder as a folder, not as a file that does not exist."""
    monkeypatch.chdir(tmp_path)
    assert main([command, "-c", str(tmp_path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and f"got '{tmp_path}'; it is a folder; name a YAML file" in lines[0], lines
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "runs").exists()
