"""Training devices: ``train.device`` and the sweep's ``--gpus-per-trial``.

This machine and CI have no GPU: the CPU tests check what a user without one sees (one clear error,
nothing started); the CUDA test runs only where torch sees a GPU.
"""

from __future__ import annotations

import os

import pytest
import torch

from conftest import tiny_config
from itrlab.cli import main
from itrlab.errors import ConfigError
from itrlab.train import run_experiment
from itrlab.train.checkpoint import BEST, load_checkpoint
from itrlab.train.device import device_label, resolve_device

needs_no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only behaviour")
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU visible")


@needs_no_gpu
def test_auto_is_the_cpu_without_a_gpu():
    assert resolve_device("auto") == resolve_device("cpu") == torch.device("cpu")
    assert device_label(torch.device("cpu")) == f"cpu ({torch.get_num_threads()} threads)"
    with pytest.raises(ConfigError, match="no CUDA GPU is visible"):
        resolve_device("cuda:1")


def test_an_experiment_is_placed_once_and_carries_its_device(tiny_root, monkeypatch):
    """A run's device and torch's threads are set once, where it starts: the placed experiment carries its device
    (a given one, a Ray Train worker's, before train.device), and placing it again changes nothing."""
    from itrlab import threads
    from itrlab.assembly import check_experiment
    from itrlab.train.device import place

    applied, apply = [], threads.apply
    monkeypatch.setattr(threads, "apply", lambda asked: applied.append(asked) or apply(asked))
    experiment = check_experiment(tiny_config(tiny_root, "train.threads=1", "train.device=cpu"))
    placed = place(experiment)
    assert experiment.device is None and placed.device == torch.device("cpu") and applied == [1]
    assert place(placed) is placed and place(placed, torch.device("meta")) is placed and applied == [1]
    given = place(experiment, torch.device("meta"))
    assert given.device == torch.device("meta") and given.config is experiment.config and applied == [1, 1]


@needs_no_gpu
def test_train_on_cuda_without_a_gpu_exits_2_before_anything_starts(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = main(["train", "-c", "vsepp_synthetic_tiny", f"dataset.root={tmp_path / 'tiny'}", "train.device=cuda"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "'train.device'" in err[0] and "no CUDA GPU is visible" in err[0]
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "runs").exists()


@needs_no_gpu
def test_sweep_asking_for_gpus_a_local_machine_lacks_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    code = main(
        [
            "sweep",
            "--preset",
            "tiny",
            "--gpus-per-trial",
            "1",
            "--storage",
            str(tmp_path / "sweeps"),
            f"dataset.root={tmp_path / 'tiny'}",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "--gpus-per-trial" in err[0] and "asks for 1 GPU(s)" in err[0] and "has 0" in err[0]
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "sweeps").exists()


def test_sweep_resource_flags_are_validated(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for flags, fragment in [
        (["--cpus-per-trial", "0"], "resources.cpu"),
        (["--gpus-per-trial", "-1"], "resources.gpu"),
        (["--concurrency", "0"], "concurrency"),
    ]:
        code = main(["sweep", "--preset", "tiny", *flags, f"dataset.root={tmp_path / 'tiny'}"])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and f"'{flags[0]} ({fragment})'" in err[0], (flags, err)
    assert not (tmp_path / "mlflow.db").exists()


def test_with_settings_replaces_only_what_is_given():
    from itrlab.sweep import load_sweep

    spec = load_sweep("dbl_smoke")
    assert spec.with_settings({"resources.gpu": None}) is spec
    changed = spec.with_settings({"resources.gpu": 0.5, "concurrency": 4, "resources.cpu": None})
    assert (changed.resources.cpu, changed.resources.gpu, changed.concurrency) == (spec.resources.cpu, 0.5, 4)
    assert changed.grid == spec.grid and spec.resources.gpu == 0


@needs_gpu
def test_training_on_cuda_matches_the_cpu_run(tmp_path, tiny_root):
    """Same seed on both devices: the test tables agree up to float differences of the kernels."""
    cpu = run_experiment(tiny_config(tiny_root, "train.device=cpu"), tmp_path / "cpu")
    gpu = run_experiment(tiny_config(tiny_root, "train.device=cuda"), tmp_path / "gpu")
    assert abs(gpu.test.rsum - cpu.test.rsum) < 15.0, (gpu.test.rsum, cpu.test.rsum)
    weights = load_checkpoint(tmp_path / "gpu" / BEST)["model"]  # loads on a CPU-only machine too
    assert all(tensor.device.type == "cpu" for tensor in weights.values())


@needs_gpu
def test_cooperative_mss_trains_on_cuda(tmp_path, tiny_root):
    """The EMA anchor lives on the target's device (no device mismatch in after_step)."""
    result = run_experiment(
        tiny_config(tiny_root, "train.device=cuda", "cooperative={scenario: mss, strategy: F}"), tmp_path / "mss"
    )
    assert result.test.rsum > 0 and os.path.isfile(tmp_path / "mss" / BEST)


def test_a_trial_asking_for_several_gpus_trains_one_ddp_worker_per_gpu():
    from itrlab.sweep import load_sweep

    spec = load_sweep("dbl_smoke").with_settings({"resources.cpu": 2})
    assert spec.workers == (1, 2.0, 0.0)
    assert spec.with_settings({"resources.gpu": 0.5}).workers == (1, 2.0, 0.5)  # two trials share a GPU
    assert spec.with_settings({"resources.gpu": 2, "resources.cpu": 8}).workers == (2, 4.0, 1.0)
    assert spec.with_settings({"num_workers": 3, "resources.gpu": 1}).workers == (3, 2.0, 1.0)
    for settings in ({"resources.gpu": 1.5}, {"num_workers": 2, "resources.gpu": 0.5}):
        with pytest.raises(ConfigError, match="fractional GPUs"):
            spec.with_settings(settings)
