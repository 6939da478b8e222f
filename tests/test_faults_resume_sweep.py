"""A sweep's --resume, on one tiny sweep stopped with SIGTERM (what Kubernetes, systemd and ``timeout`` send):
the stop ends the sweep as Ctrl-C does (tests/test_faults_jobs.py): one line, exit 143, the parent KILLED with its
reason; an edited sweep file, a new override or changed data are refused with one line naming the difference
(exit 2, before Ray or MLflow); ``--allow-changes`` runs them and records them on the parent run, while a second
``--resume`` of the same sweep is refused at once, and no file of the storage is unpickled (a tuner.pkl, a searcher
state and an error.pkl planted there, each a pickle that runs a command, never run). Once it finished: its folder
rolled back to the interrupted state, or a state naming another sweep's parent run, is refused with one line and
its parent run stays FINISHED. The refusals run in this process (they stop before Ray starts), the sweeps and the
resume as the job itself. Each moment a test acts on ("a trial trains", "the resume runs") is held: the trial's Ray
workers are stopped while the test acts (tests/held.py), so no trial outruns it."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

from conftest import REPO
from held import notes_since, training, training_alone, trials_held
from itrlab.sweep.resume import STATE_FILE
from itrlab.sweep.trial_store import TRIALS_FOLDER
from test_faults_cli import ctrl_c_reaches_it, env_for, job
from test_sweep_jobs import sweep_runs

pytestmark = pytest.mark.e2e  # real processes, signals and servers


@dataclass
class Interrupted:
    root: Path  # the sweep's folder: its sweep file, data, storage, MLflow store and the driver's log, first.log
    env: dict[str, str]  # the environment it ran in
    runs: tuple[list, list]  # its (parent, child) MLflow runs as the stop left them


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory) -> Interrupted:
    """A two-trial sweep (A and F, 3 epochs) of a sweep file of its own, stopped with SIGTERM while a trial
    trains."""
    root = tmp_path_factory.mktemp("interrupted")
    spec = yaml.safe_load((REPO / "configs" / "sweeps" / "dbl_tiny.yaml").read_text())
    spec.pop("aliases")
    spec["overrides"] = [f"dataset.root={root / 'data'}", "train.epochs=3"]
    (root / "sweep.yaml").write_text(yaml.safe_dump(spec))
    env = env_for(root)
    log = root / "first.log"
    with open(log, "w") as out:
        driver = subprocess.Popen(
            job("sweep.py", "--sweep", str(root / "sweep.yaml"), "--storage", str(root / "sweeps")),
            cwd=root,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=ctrl_c_reaches_it,
        )
    try:
        # trial A held while it trains (F cannot start before it ends): SIGTERM, to the driver only as a pod's
        # container runtime sends it, cuts A short, F never started
        with trials_held(driver, lambda: training_alone(root / "sweeps"), log=log):
            driver.send_signal(signal.SIGTERM)
            assert driver.wait(timeout=300) == 143, log.read_text()[-3000:]  # Tune ends the held trial itself
    finally:
        if driver.poll() is None:
            driver.kill()
    (folder,) = (root / "sweeps" / "dbl_tiny").iterdir()
    saved = root / "interrupted-state"  # what a rollback of the folder puts back (test_a_rolled_back_...)
    shutil.copytree(folder / TRIALS_FOLDER, saved / TRIALS_FOLDER)
    shutil.copy2(folder / STATE_FILE, saved)
    return Interrupted(root, env, sweep_runs(root, "dbl_tiny"))


@pytest.fixture
def here(interrupted, monkeypatch):
    """The sweep's environment in this process (its store, its HOME)."""
    root, env = interrupted.root, interrupted.env
    monkeypatch.chdir(root)
    for key in ("MLFLOW_TRACKING_URI", "HOME", "ITRLAB_CONFIG_DIR"):
        monkeypatch.setenv(key, env[key])
    return root


def resume(root: Path, *extra: str) -> list[str]:
    return ["sweep", "--sweep", str(root / "sweep.yaml"), "--storage", str(root / "sweeps"), "--resume", *extra]


def refused(root: Path, capsys, argv: list[str], fragment: str, parent: str = "KILLED") -> str:
    """``itrlab argv`` exits 2 with one line holding ``fragment``; no run changed (the parent stays ``parent``),
    Ray never started."""
    from itrlab.cli import main

    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    before = {run.info.run_id: (run.info.status, run.info.end_time, run.data.tags) for run in all_runs(client)}
    code = main(argv)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert code == 2, out[-2000:] + err[-2000:]
    assert len(lines) == 1 and fragment in lines[0], err[-3000:]
    assert {run.info.run_id: (run.info.status, run.info.end_time, run.data.tags) for run in all_runs(client)} == before
    assert parent in {status for status, _, tags in before.values() if "mlflow.parentRunId" not in tags}
    import ray

    assert not ray.is_initialized()
    return lines[0]


def all_runs(client: MlflowClient) -> list:
    return client.search_runs([e.experiment_id for e in client.search_experiments()])


class RunsACommand:
    """A pickle that runs a shell command when it is loaded."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def the_sweep(root: Path) -> Path:
    (folder,) = (root / "sweeps" / "dbl_tiny").iterdir()
    return folder


def plant_pickles(folder: Path, marker: Path) -> list[Path]:
    """Pickles that run ``touch marker`` when loaded, where Ray Tune keeps what ``Tuner.restore`` unpickles: its
    tuner, a searcher's state, a trial's error."""
    trial = next(p for p in (folder / "tune").iterdir() if p.is_dir())
    paths = [folder / "tune" / "tuner.pkl", folder / "tune" / "searcher-state-9999-12-31_23-59-59.pkl"]
    for path in [*paths, trial / "error.pkl"]:
        path.write_bytes(pickle.dumps(RunsACommand(f"touch {marker}")))
    return [*paths, trial / "error.pkl"]


def test_sigterm_to_the_sweep_driver_ends_it_like_ctrl_c(interrupted):
    text = (interrupted.root / "first.log").read_text()
    assert text.rstrip().splitlines()[-1].startswith("itrlab: sweep terminated (SIGTERM);"), text[-3000:]
    assert "SIGTERM received" not in text and "Traceback" not in text, text[-3000:]
    (parent,), children = interrupted.runs
    assert parent.info.status == "KILLED" and "SIGTERM" in parent.data.tags["itrlab.stop_reason"]
    assert children and all(c.info.status in ("FINISHED", "KILLED") for c in children), [
        (c.info.status, c.data.tags.get("itrlab.stop_reason")) for c in children
    ]


def test_an_edited_sweep_file_is_refused_with_what_differs(here, capsys):
    path = here / "sweep.yaml"
    text = path.read_text()
    try:
        spec = yaml.safe_load(text)
        path.write_text(yaml.safe_dump({**spec, "grid": {"cooperative.strategy": ["A", "F", "C"]}, "seeds": [0, 1]}))
        line = refused(here, capsys, resume(here), "the sweep file's grid: recorded")
        assert "cannot change on --resume" in line
        path.write_text(yaml.safe_dump({**spec, "overrides": [*spec["overrides"][:1], "train.epochs=30"]}))
        line = refused(here, capsys, resume(here), "differs from what its first invocation recorded")
        assert "train.epochs=3" in line and "train.epochs=30" in line and "--allow-changes" in line
    finally:
        path.write_text(text)


def test_a_new_override_is_refused_not_dropped(here, capsys):
    line = refused(
        here, capsys, resume(here, "train.lr=0.005"), "the resolved config's train.lr: recorded 0.001, now 0.005"
    )
    assert "--allow-changes" in line


def test_changed_data_is_refused_by_its_digest(here, capsys):
    features = here / "data" / "train_ims.npy"
    saved = features.read_bytes()
    try:
        features.write_bytes(saved[:-4] + b"\x00\x00\x80\x3f")  # one feature value changed in place
        line = refused(here, capsys, resume(here), f"the data in {here / 'data'}: recorded digest")
    finally:
        features.write_bytes(saved)
    assert "now" in line


def test_allow_changes_runs_them_records_them_and_a_second_resume_waits_for_none(interrupted):
    """It finishes the sweep, over pickles planted in its storage that would run a command if loaded."""
    root, env = interrupted.root, interrupted.env
    marker = root / "pwned"
    planted = plant_pickles(the_sweep(root), marker)
    log = root / "resume.log"
    with open(log, "w") as out:
        first = subprocess.Popen(
            job("sweep.py", *resume(root, "--allow-changes", "train.lr=0.005")[1:]),
            cwd=root,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    began = time.time()
    try:
        # the resume held while its first trial trains: the second --resume comes while it runs, by construction
        with trials_held(
            first, lambda: any(training(note) for note in notes_since(root / "sweeps", began).values()), log=log
        ):
            second = subprocess.run(
                job("sweep.py", *resume(root)[1:]), cwd=root, env=env, capture_output=True, text=True, timeout=300
            )
        assert first.wait(timeout=900) == 0, log.read_text()[-3000:]
    finally:
        if first.poll() is None:
            first.kill()
    assert "--allow-changes: resuming with" in log.read_text()
    assert second.returncode == 2, second.stderr[-2000:]
    assert len(second.stderr.strip().splitlines()) == 1 and "is in use by another process" in second.stderr
    client = MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"])
    runs = client.search_runs([client.get_experiment_by_name("dbl_tiny").experiment_id])
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    kids = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert parent.info.status == "FINISHED" and all(k.info.status == "FINISHED" for k in kids)
    assert parent.data.params["resume.1.changes"] == "the resolved config's train.lr: recorded 0.001, now 0.005"
    assert parent.data.tags["itrlab.resume_changes"].startswith("resume 1: the resolved config's train.lr")
    assert "0.005" in {k.data.params.get("train.lr") for k in kids}  # the trial that had not started ran it
    assert not marker.exists() and all(path.is_file() for path in planted)  # never loaded


def test_a_rolled_back_sweep_folder_is_refused_and_its_parent_stays_finished(here, capsys):
    """After the sweep finished: its state file and trials' saved states put back as they were when it was
    interrupted. Its parent run in MLflow, which the storage's writers cannot change, says FINISHED: refused."""
    folder = the_sweep(here)
    now = here / "finished-state"
    shutil.copytree(folder / TRIALS_FOLDER, now / TRIALS_FOLDER)
    shutil.copy2(folder / STATE_FILE, now)
    try:
        shutil.rmtree(folder / TRIALS_FOLDER)
        shutil.copytree(here / "interrupted-state" / TRIALS_FOLDER, folder / TRIALS_FOLDER)
        shutil.copy2(here / "interrupted-state" / STATE_FILE, folder)
        line = refused(
            here, capsys, resume(here, folder.name), "ended FINISHED but the folder's state says", "FINISHED"
        )
    finally:
        shutil.rmtree(folder / TRIALS_FOLDER)
        shutil.copytree(now / TRIALS_FOLDER, folder / TRIALS_FOLDER)
        shutil.copy2(now / STATE_FILE, folder)
    assert "the folder was rolled back; nothing was run" in line


def test_a_state_naming_another_sweeps_parent_run_is_refused_and_its_parent_stays_finished(interrupted, here, capsys):
    """Another sweep, finished: this sweep's state file made to name its parent run (a state copied from it). The
    parent run belongs to another sweep's folder: refused before anything runs."""
    spec = yaml.safe_load((here / "sweep.yaml").read_text())
    (here / "other.yaml").write_text(
        yaml.safe_dump(
            {
                **spec,
                "name": "dbl_tiny_other",
                "grid": {"cooperative.strategy": ["A"]},
                "overrides": [*spec["overrides"][:1], "train.epochs=1"],
            }
        )
    )
    other = subprocess.run(
        job("sweep.py", "--sweep", str(here / "other.yaml"), "--storage", str(here / "sweeps")),
        cwd=here,
        env=interrupted.env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert other.returncode == 0, other.stdout[-3000:] + other.stderr[-3000:]
    (theirs,) = (here / "sweeps" / "dbl_tiny_other").iterdir()
    folder = the_sweep(here)
    ours = json.loads((folder / STATE_FILE).read_text())
    theirs_parent = json.loads((theirs / STATE_FILE).read_text())["parent_run_id"]
    (folder / STATE_FILE).write_text(json.dumps({**ours, "parent_run_id": theirs_parent}))
    line = refused(here, capsys, resume(here, folder.name), f"names the parent run {theirs_parent}", parent="FINISHED")
    assert "which belongs to the sweep folder" in line and "dbl_tiny_other" in line
    shutil.rmtree(here / "sweeps", ignore_errors=True)
