"""Storage that fails under a running sweep or training, on a real file system: a tmpfs mounted by
the test, turned read-only or filled mid-run. The job stops with one line and exit 1 (a full disk named:
"no space left on <folder>"), every MLflow run ends with a status and a reason, none
RUNNING, and the checkpoints stay whole. Each change comes while the job is held (its trial's Ray workers,
or the training process, stopped: tests/held.py), so it cannot finish first. Skipped where the test cannot
mount (not root)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from held import training_alone, training_held, trials_held
from test_sweep_jobs import start_driver, sweep_command, sweep_runs


@pytest.fixture
def tmpfs(tmp_path):
    mount = tmp_path / "store"
    mount.mkdir()
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256m", "itrlab-test", str(mount)], capture_output=True, text=True
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip() or result.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def sweep_broken_mid_trial(
    tmp_path: Path, tmpfs: Path, name: str, breaking, epochs: int = 40, log: str = "driver.log"
) -> tuple[int, str]:
    """A two-trial tiny sweep of ``epochs`` storing on ``tmpfs``; once its first checkpoint is stored, ``breaking()``
    runs while its trial is held (it cannot end first). The driver's exit status and log (``log``, under
    ``tmp_path``; the driver killed if it hangs)."""
    command = tiny_sweep_on(tmp_path, tmpfs, name, epochs)
    log_path = tmp_path / log
    driver = start_driver(command, tmp_path, log_path)
    try:

        def first_checkpoint_stored() -> bool:
            return training_alone(tmpfs / "sweeps") and any((tmpfs / "sweeps").rglob("last.pt"))

        with trials_held(driver, first_checkpoint_stored, log=log_path):
            breaking()
        code = driver.wait(timeout=240)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    return code, log_path.read_text()


def tiny_sweep_on(tmp_path: Path, tmpfs: Path, name: str, epochs: int) -> list[str]:
    """The command of a two-trial tiny sweep (DBL's strategies A and F, ``epochs`` each) storing on ``tmpfs``."""
    command = sweep_command(
        tmp_path,
        {
            "name": name,
            "experiment": "dbl_synthetic_tiny",
            "overrides": [f"dataset.root={tmp_path / 'data'}", f"train.epochs={epochs}"],
            "grid": {"cooperative.strategy": ["A", "F"]},
            "seeds": [0],
            "resources": {"cpu": 1},
        },
    )
    command[command.index("--storage") + 1] = str(tmpfs / "sweeps")
    return command


@pytest.mark.e2e
def test_storage_turned_read_only_mid_sweep_stops_it_with_one_line(tmp_path, tmpfs):
    code, text = sweep_broken_mid_trial(
        tmp_path, tmpfs, "ro_sweep", lambda: subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    )
    assert code == 1, text[-4000:]
    last = text.rstrip().splitlines()[-1]
    assert last.startswith("itrlab: run failed: the sweep's storage can no longer be written"), text[-4000:]
    assert "Traceback" not in text, text[-6000:]
    (parent,), children = sweep_runs(tmp_path, "ro_sweep")
    assert parent.info.status == "FAILED" and "storage" in parent.data.tags["itrlab.stop_reason"]
    assert children and all(c.info.status != "RUNNING" for c in children)
    assert all("itrlab.stop_reason" in c.data.tags for c in children if c.info.status != "FINISHED")
    assert len(children) <= 2  # the next trial did not start on storage that cannot be written


@pytest.mark.e2e
def test_extraction_to_a_read_only_folder_is_one_line_before_the_model_loads(tmp_path, tmpfs):
    import json
    import sys

    from conftest import REPO

    images = tmp_path / "images"
    images.mkdir()
    captions = tmp_path / "captions.json"
    captions.write_text(json.dumps({"images": [], "annotations": []}))
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "jobs" / "extract_features.py"),
            "--images",
            str(images),
            "--captions",
            str(captions),
            "--out",
            str(tmpfs / "out"),
            "--split-fractions",
            "0.6,0.2,0.2",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--out" in lines[0] and "Read-only file system" in lines[0], result.stderr


def fill(disk: Path, leave: int = 0) -> None:
    """Fill ``disk`` (a tmpfs), then free ``leave`` bytes: less than a checkpoint, which then fails part-way
    (torch's writer says "unexpected pos ..." of such a write)."""
    with open(disk / "filler", "wb") as filler:
        try:
            while True:
                filler.write(b"\0" * (1 << 20))
                filler.flush()
        except OSError:
            pass
    if leave:
        os.truncate(disk / "filler", max((disk / "filler").stat().st_size - leave, 0))


def train_until_the_disk_fills(tmp_path, full_disk, *args: str, leave: int = 0) -> tuple[subprocess.Popen, str]:
    """A long tiny training (``args`` added) whose ``full_disk`` (a tmpfs) is filled (:func:`fill`) once its
    first checkpoint exists, while the training is stopped; the process (ended) and its stderr."""
    import sys

    from conftest import REPO
    from test_faults_cli import env_for

    env = env_for(tmp_path)
    extra = [a for a in args if not a.startswith("MLFLOW_TRACKING_URI=")]
    env.update(a.split("=", 1) for a in args if a.startswith("MLFLOW_TRACKING_URI="))
    log = tmp_path / "train.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                str(REPO / "jobs" / "train.py"),
                "-c",
                "vsepp_synthetic_tiny",
                "train.epochs=500",
                f"dataset.root={tmp_path / 'data'}",
                *extra,
            ],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
        )
    try:
        with training_held(process, log, 240):  # the disk is full from here on
            fill(full_disk, leave)
        _, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    return process, err


@pytest.mark.e2e
def test_mlflow_store_on_a_disk_that_fills_mid_run_is_one_line(tmp_path, tmpfs):
    process, err = train_until_the_disk_fills(
        tmp_path, tmpfs, f"MLFLOW_TRACKING_URI=sqlite:///{tmpfs / 'mlflow.db'}", "--run-dir", str(tmp_path / "run")
    )
    assert process.returncode == 1, err[-3000:]
    lines = err.strip().splitlines()
    assert "Traceback" not in err and lines[-1].startswith("itrlab: run failed: the MLflow store"), err[-3000:]
    assert len([line for line in lines if line.startswith("itrlab:")]) == 1, err[-3000:]
    assert (tmp_path / "run" / "last.pt").is_file()


@pytest.mark.e2e
def test_a_run_folder_on_a_disk_that_fills_mid_run_is_one_line_and_keeps_the_last_checkpoint(tmp_path, tmpfs):
    from mlflow import MlflowClient

    run = tmpfs / "run"
    process, err = train_until_the_disk_fills(tmp_path, tmpfs, "--run-dir", str(run))
    assert process.returncode == 1, err[-3000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "cannot write the checkpoint" in lines[0] and "Traceback" not in err, err[-3000:]
    assert (run / "last.pt").stat().st_size > 0  # the previous checkpoint is intact
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    (record,) = client.search_runs([client.get_experiment_by_name("vsepp_synthetic_tiny").experiment_id])
    assert record.info.status == "FAILED" and "cannot write the checkpoint" in record.data.tags["itrlab.stop_reason"]


@pytest.mark.e2e
def test_a_checkpoint_that_no_longer_fits_says_no_space_left_and_the_checkpoints_stay_whole(tmp_path, tmpfs):
    """8 KiB left, less than a checkpoint: torch's writer fails part-way (its own text:
    "unexpected pos 48384 vs 48336", with a 40-line traceback); the job gives one line naming the full disk, the
    run FAILED with it, and every checkpoint of the folder loads whole."""
    from mlflow import MlflowClient

    from itrlab.train.checkpoint import BEST, LAST, load_checkpoint

    run = tmpfs / "run"
    process, err = train_until_the_disk_fills(tmp_path, tmpfs, "--run-dir", str(run), leave=8 << 10)
    assert process.returncode == 1, err[-3000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and "unexpected pos" not in err, err[-3000:]
    assert (
        lines[0].startswith("itrlab: run failed: cannot write the checkpoint ")
        and f": no space left on {run}; the previous one is kept" in lines[0]
    ), lines[0]
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    (record,) = client.search_runs([client.get_experiment_by_name("vsepp_synthetic_tiny").experiment_id])
    assert record.info.status == "FAILED" and f"no space left on {run}" in record.data.tags["itrlab.stop_reason"]
    for name in (LAST, BEST):
        assert load_checkpoint(run / name)["state"].epoch >= 1, name
    assert not list(run.glob("*.tmp"))  # no half-written file left behind


def test_a_data_error_found_when_a_split_is_read_leaves_no_run_folder(tmp_path):
    import numpy as np

    from conftest import write_precomp
    from itrlab.cli import main

    root = write_precomp(tmp_path / "precomp", {"train": 40, "dev": 10, "test": 10})
    features = np.load(root / "dev_ims.npy")
    features[3, 0, 0] = np.nan
    np.save(root / "dev_ims.npy", features)
    code = main(
        [
            "train",
            "-c",
            "vsepp_synthetic_tiny",
            "dataset.kind=precomp",
            f"dataset.root={root}",
            "dataset.synthetic=null",
            "tracking.enabled=false",
            f"output.dir={tmp_path / 'runs'}",
            "train.batch_size=8",
        ]
    )
    assert code == 2
    assert not [p for p in (tmp_path / "runs").rglob("*") if p.is_file() or p.name[0].isdigit()], list(
        (tmp_path / "runs").rglob("*")
    )


@pytest.mark.e2e
def test_a_sweep_whose_storage_fills_stops_on_one_line_and_resumes_once_space_is_freed(tmp_path, tmpfs):
    """The sweep's storage full while a trial trains: one line naming the full disk, exit 1,
    the parent and the trial FAILED with it, the progress line's trial failed, not done. Once the space is freed,
    ``--resume`` continues each trial from its newest whole saved epoch (a copy the full disk cut short is never
    named), finishes every trial, and leaves what each trial logged before the stop as it was: every epoch once, at
    its own step."""
    from mlflow import MlflowClient

    from itrlab.tracking.chart_names import chart_name

    epochs = 6
    code, text = sweep_broken_mid_trial(tmp_path, tmpfs, "refill", lambda: fill(tmpfs), epochs=epochs)
    (folder,) = (tmpfs / "sweeps" / "refill").iterdir()
    assert code == 1, text[-4000:]
    last = text.rstrip().splitlines()[-1]
    assert (
        last.startswith("itrlab: run failed: the sweep's storage can no longer be written: ")
        and f"no space left on {folder}" in last
    ), text[-4000:]
    assert "Traceback" not in text, text[-6000:]
    assert re.search(r"^0/2 trials done · 0 running · 1 failed · took ", text, re.M), text[-4000:]
    (parent,), (stopped,) = sweep_runs(tmp_path, "refill")
    assert parent.info.status == "FAILED" and f"no space left on {folder}" in parent.data.tags["itrlab.stop_reason"]
    assert stopped.info.status == "FAILED" and f"no space left on {folder}" in stopped.data.tags["itrlab.stop_reason"]
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    before = {m.step: m.value for m in client.get_metric_history(stopped.info.run_id, chart_name("rsum"))}
    assert before, "the trial logged no epoch before its storage filled"

    (tmpfs / "filler").unlink()
    log = tmp_path / "resume.log"
    resumed = start_driver([*tiny_sweep_on(tmp_path, tmpfs, "refill", epochs), "--resume"], tmp_path, log)
    try:
        assert resumed.wait(timeout=600) == 0, log.read_text()[-4000:]
    finally:
        if resumed.poll() is None:
            os.killpg(resumed.pid, signal.SIGKILL)
    text = log.read_text()
    assert "Traceback" not in text, text[-4000:]
    (parent,), children = sweep_runs(tmp_path, "refill")
    assert parent.info.status == "FINISHED", parent.data.tags.get("itrlab.stop_reason")
    assert len(children) == 2 and {c.info.status for c in children} == {"FINISHED"}
    for child in children:
        for key in ("rsum", "loss", "lr", "epoch_seconds"):
            steps = [m.step for m in client.get_metric_history(child.info.run_id, chart_name(key))]
            assert sorted(steps) == list(range(1, epochs + 1)), (child.info.run_name, key, sorted(steps))
    after = {m.step: m.value for m in client.get_metric_history(stopped.info.run_id, chart_name("rsum"))}
    assert {step: after[step] for step in before} == before
