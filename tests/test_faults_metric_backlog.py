"""Nothing of a run's per-epoch metrics is lost or doubled when its MLflow store fails or its process stops: a
SQLite store locked by another process mid-training stops the run after its epoch is checkpointed, the epoch's
metrics stay in the run folder's backlog, and ``--resume`` logs them at their own step (or, the backlog lost,
names the epochs that are missing); an epoch trained again after a restore from an older checkpoint (a sweep
trial stopped between logging an epoch and storing its checkpoint) is logged once."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from mlflow import MlflowClient

from held import training_held
from itrlab.tracking.chart_names import chart_name
from test_faults_cli import env_for, job

EPOCHS = 4
PER_EPOCH = ("loss", "lr", "epoch_seconds", "rsum", "i2t_R1")  # every epoch logs these


def steps_of(client: MlflowClient, run_id: str, key: str) -> list[int]:
    return sorted(m.step for m in client.get_metric_history(run_id, chart_name(key)))


def only_run(root: Path) -> tuple[MlflowClient, object]:
    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("vsepp_synthetic_tiny").experiment_id])
    return client, run


def resume(run: Path, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``jobs/train.py --resume`` of ``run``, ended."""
    return subprocess.run(
        job("train.py", "--resume", "--run-dir", str(run)),
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.e2e
def test_a_store_locked_for_an_epoch_loses_no_metrics_after_resume(tmp_path):
    """The store is locked (an exclusive SQLite transaction of this process) while the training is held after
    epoch 1: epoch 2 trains and is checkpointed, its logging finds the store locked and the run stops on one
    line. Once the lock is gone, ``--resume`` finishes the run with every epoch at steps 1..4, epoch 2's values
    those the run trained. The stopped state (run folder and store) put back as it was and its backlog lost,
    ``--resume`` finishes it too, and its warning names epoch 2."""
    from itrlab.train.checkpoint import LAST, load_checkpoint

    run = tmp_path / "run"
    env = {**env_for(tmp_path), "ITRLAB_WATCHDOG": "0"}
    log = tmp_path / "train.log"
    command = [f"train.epochs={EPOCHS}", f"dataset.root={tmp_path / 'data'}", "--run-dir", str(run)]
    with open(log, "w") as out:
        process = subprocess.Popen(
            job("train.py", "-c", "vsepp_synthetic_tiny", *command),
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
        )
    holder = sqlite3.connect(tmp_path / "mlflow.db", isolation_level=None)
    try:
        with training_held(process, log):  # epoch 1 logged; nothing else written until it continues
            holder.execute("BEGIN EXCLUSIVE")
        _, err = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
        holder.close()  # the lock goes with the transaction
    assert process.returncode == 1, err[-3000:]
    lines = err.strip().splitlines()
    assert "Traceback" not in err and lines[-1].startswith("itrlab: run failed: the MLflow store"), err[-3000:]
    assert "can no longer be written: database is locked" in lines[-1], err[-3000:]
    assert load_checkpoint(run / LAST)["state"].epoch == 2  # epoch 2 trained and checkpointed, not logged
    client, stopped = only_run(tmp_path)
    assert steps_of(client, stopped.info.run_id, "loss") == [1]
    assert (run / "metrics_backlog.json").is_file()  # epoch 2's metrics, beside its checkpoint
    saved = tmp_path / "stopped"  # the stopped state, as a backup holds it
    shutil.copytree(run, saved / "run")
    shutil.copy2(tmp_path / "mlflow.db", saved / "mlflow.db")

    kept = resume(run, tmp_path, env)
    assert kept.returncode == 0, kept.stderr[-3000:]
    client, finished = only_run(tmp_path)
    assert finished.info.status == "FINISHED"
    assert not (run / "metrics_backlog.json").exists()
    history = {entry["epoch"]: entry for entry in load_checkpoint(run / LAST)["state"].history}
    logged = {m.step: m.value for m in client.get_metric_history(finished.info.run_id, chart_name("loss"))}
    for key in PER_EPOCH:
        assert steps_of(client, finished.info.run_id, key) == list(range(1, EPOCHS + 1)), key
    assert logged[2] == pytest.approx(history[2]["loss"], rel=1e-5)
    assert "has no metrics" not in kept.stderr

    shutil.rmtree(run)  # the stopped state put back, its backlog lost
    shutil.copytree(saved / "run", run)
    shutil.copy2(saved / "mlflow.db", tmp_path / "mlflow.db")
    (run / "metrics_backlog.json").unlink()
    lost = resume(run, tmp_path, env)
    assert lost.returncode == 0, lost.stderr[-3000:]
    client, finished = only_run(tmp_path)
    assert finished.info.status == "FINISHED"
    assert not (run / "metrics_backlog.json").exists()
    assert steps_of(client, finished.info.run_id, "loss") == [1, 3, 4]
    warning = [line for line in lost.stderr.splitlines() if "has no metrics" in line]
    assert len(warning) == 1 and "epoch(s) 2:" in warning[0], lost.stderr[-3000:]


def test_an_epoch_trained_again_after_a_restore_is_logged_once(tmp_path, monkeypatch):
    """A run folder whose checkpoint is older than its MLflow run (what a sweep trial resumes from when it stopped
    between logging epoch 2 and Tune storing epoch 2's checkpoint, SIGTERM or a full disk): the resume trains
    epoch 2 again, and the run holds each epoch once, epoch 2 with the values it logged first."""
    from itrlab.assembly import load_experiment
    from itrlab.tracking import MlflowTracker
    from itrlab.train import run_experiment
    from itrlab.train.checkpoint import LAST

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    overrides = [f"dataset.root={tmp_path / 'data'}", "train.epochs=2"]
    run = tmp_path / "run"
    saved = tmp_path / "epoch1.pt"

    class KeepEpochOne:
        def on_epoch_end(self, report) -> None:
            if report.epoch == 1:
                shutil.copyfile(run / LAST, saved)

    run_experiment(
        load_experiment("vsepp_synthetic_tiny", overrides),
        run,
        callbacks=[KeepEpochOne()],
        tracker=MlflowTracker("vsepp_synthetic_tiny", uri),
    )
    client, first = only_run(tmp_path)
    before = {m.step: m.value for m in client.get_metric_history(first.info.run_id, chart_name("rsum"))}
    shutil.copyfile(saved, run / LAST)  # the folder as Tune's checkpoint of epoch 1 restores it
    (run / "test_recall.json").unlink()

    run_experiment(
        load_experiment("vsepp_synthetic_tiny", overrides), run, tracker=MlflowTracker("vsepp_synthetic_tiny", uri)
    )
    client, again = only_run(tmp_path)
    assert again.info.run_id == first.info.run_id
    for key in PER_EPOCH:
        assert steps_of(client, again.info.run_id, key) == [1, 2], key
    assert {m.step: m.value for m in client.get_metric_history(again.info.run_id, chart_name("rsum"))} == before
