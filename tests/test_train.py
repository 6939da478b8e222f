"""Training on the tiny synthetic data: determinism, checkpoints, resume, the CLI and local MLflow."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from conftest import REPO, tiny_config
from itrlab.tracking.chart_names import chart_name, flat_metrics
from itrlab.train import run_experiment
from itrlab.train.checkpoint import BEST, LAST, load_checkpoint


def test_same_seed_same_recall_table(tmp_path, tiny_root):
    first = run_experiment(tiny_config(tiny_root), tmp_path / "a")
    second = run_experiment(tiny_config(tiny_root), tmp_path / "b")
    other = run_experiment(tiny_config(tiny_root, "seed=1"), tmp_path / "c")
    assert first.test == second.test
    assert first.test != other.test


def test_best_checkpoint_is_the_one_tested(tmp_path, tiny_root):
    result = run_experiment(tiny_config(tiny_root, "train.epochs=3"), tmp_path / "run")
    best = load_checkpoint(tmp_path / "run" / BEST)["state"]
    last = load_checkpoint(tmp_path / "run" / LAST)["state"]
    assert last.epoch == 3 and best.epoch == best.best_epoch == result.best_epoch
    assert best.best_rsum == max(entry["rsum"] for entry in last.history) == result.best_val_rsum


def test_resume_continues_epochs_schedule_and_results(tmp_path, tiny_root):
    overrides = ("train.lr_decay_epochs=[2]", "train.warmup_steps=3")
    straight = run_experiment(tiny_config(tiny_root, "train.epochs=4", *overrides), tmp_path / "straight")

    interrupted = tmp_path / "interrupted"
    run_experiment(tiny_config(tiny_root, "train.epochs=3", *overrides), interrupted)
    resumed = run_experiment(tiny_config(tiny_root, "train.epochs=4", *overrides), interrupted)

    a = load_checkpoint(tmp_path / "straight" / LAST)
    b = load_checkpoint(interrupted / LAST)
    assert b["state"].epoch == 4 and b["state"].step == a["state"].step
    assert [h["epoch"] for h in b["state"].history] == [1, 2, 3, 4]
    assert b["state"].history == a["state"].history  # same losses and validation tables per epoch
    assert b["optimizer"]["param_groups"][0]["lr"] == pytest.approx(a["optimizer"]["param_groups"][0]["lr"])
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    assert resumed.test == straight.test


@pytest.mark.e2e
def test_train_job_end_to_end_with_local_mlflow(tmp_path, tiny_root):
    """`python jobs/train.py` in a fresh directory: progress, table, local SQLite MLflow, resume."""
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["ITRLAB_CONFIG_DIR"] = str(REPO / "configs")
    command = [
        sys.executable,
        str(REPO / "jobs" / "train.py"),
        "-c",
        "vsepp_synthetic_tiny",
        f"dataset.root={tiny_root}",
    ]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "epoch   1/2" in out and "epoch   2/2" in out
    assert "rsum" in out and "protocol" in out.lower()
    assert f"sqlite:///{tmp_path / 'mlflow.db'}" in out and "mlflow ui" in out
    assert (tmp_path / "mlflow.db").is_file()

    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("vsepp_synthetic_tiny")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED" and "test_rsum" in flat_metrics(run.data.metrics)

    # resuming with more epochs reuses the same MLflow run and continues at epoch 3
    more = subprocess.run(
        [*command, "--resume", "train.epochs=3"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert more.returncode == 0, more.stderr
    assert "after epoch 2" in more.stdout and "epoch   3/3" in more.stdout and "epoch   1/" not in more.stdout
    (again,) = client.search_runs([experiment.experiment_id])
    assert again.info.run_id == run.info.run_id and again.info.status == "FINISHED"
    assert [m.step for m in client.get_metric_history(run.info.run_id, chart_name("rsum"))] == [1, 2, 3]
    # final values sit at step 0, which MLflow's chart view draws as one bar per run, not a lone dot
    for key in ("test_rsum", "best_epoch", "cpu_hours"):
        assert {m.step for m in client.get_metric_history(run.info.run_id, chart_name(key))} == {0}, key
    # the run trained further: its cost is both trainings', never the second's alone
    first, both = [m.value for m in client.get_metric_history(run.info.run_id, "train_seconds")]
    assert both > first > 0
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    mlflow.set_experiment("vsepp_synthetic_tiny")
    table = mlflow.load_table("recall/test_table.json", run_ids=[run.info.run_id])
    assert list(zip(table["epoch"], table["direction"])) == [(2, "i2t"), (2, "t2i"), (3, "i2t"), (3, "t2i")]


def test_warmup_loss_trains_the_first_epochs_then_switches(tmp_path, tiny_root):
    """loss.warmup_epochs=1: epoch 1 is exactly a VSE (sum of hinges) epoch, epoch 2 is VSE++ again."""
    overrides = ("train.epochs=2", "train.lr_decay_epochs=[]")
    warm = run_experiment(tiny_config(tiny_root, *overrides, "loss.warmup_epochs=1"), tmp_path / "warm")
    vse = run_experiment(tiny_config(tiny_root, *overrides, "loss.name=vse"), tmp_path / "vse")
    warm_history = load_checkpoint(tmp_path / "warm" / LAST)["state"].history
    vse_history = load_checkpoint(tmp_path / "vse" / LAST)["state"].history
    assert warm_history[0] == vse_history[0]  # same batches, same loss, same weights after epoch 1
    # epoch 2 runs VSE++ from VSE's epoch-1 weights: the max of hinges is far below the sum over all negatives
    assert warm_history[1]["loss"] < 0.5 * vse_history[1]["loss"]
    assert warm.test != vse.test


def test_one_seed_gives_two_rows_that_differ_in_the_loss_the_same_batches_and_initial_weights(tmp_path, tiny_root):
    """Why the report pairs two rows by seed (itrlab.report.stats.paired_interval): runs of one seed
    that differ only in the loss start from the same weights of every part they share (here the whole
    model) and read the same batches in the same order; another seed changes both."""
    from itrlab.train.experiment import start_run

    def first_steps(name: str, *overrides: str):
        run = start_run(tiny_config(tiny_root, *overrides), tmp_path / name)
        batches = iter(run.trainer.epoch_batches(1))
        first, second = next(batches), next(batches)
        weights = {key: value.clone() for key, value in run.trainer.method.state_dict().items()}
        return (first.caption_ids, second.caption_ids), weights

    order, weights = first_steps("max", "loss.name=vsepp")
    other_order, other_weights = first_steps("sum", "loss.name=vse")
    assert all(torch.equal(a, b) for a, b in zip(order, other_order))
    assert weights.keys() == other_weights.keys() and all(torch.equal(weights[k], other_weights[k]) for k in weights)
    (seed_order, seed_weights) = first_steps("seed1", "loss.name=vsepp", "seed=1")
    assert not torch.equal(order[0], seed_order[0])
    assert any(not torch.equal(weights[k], seed_weights[k]) for k in weights if weights[k].is_floating_point())


def test_the_epoch_line_goes_to_the_stdout_of_the_moment_it_is_printed(monkeypatch):
    """A second training in one process printed to the stream that was sys.stdout when the class was defined,
    closed since by pytest's capture of an earlier test ("I/O operation on closed file")."""
    import io

    from itrlab.eval.recall import RecallTable
    from itrlab.train import ConsoleProgress
    from itrlab.train.loop import EpochReport

    first, second = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stdout", first)
    progress = ConsoleProgress()
    first.close()
    monkeypatch.setattr(sys, "stdout", second)
    val = RecallTable("all", 50, 1, 10.0, 20.0, 30.0, 5.0, 15.0, 25.0, 105.0, 3.0, 4.0, 5.0, 6.0, 0.1)
    progress.on_epoch_end(EpochReport(1, 2, 10, 1e-3, 2.5, {}, val, True, 105.0, 1.5))
    assert second.getvalue().startswith("epoch   1/2  loss    2.5000")
