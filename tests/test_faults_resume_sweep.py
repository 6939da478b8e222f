"""A sweep's --resume (issue #30 items 1, 3 and 4), on one tiny sweep interrupted with SIGINT: no file of its
storage that Ray Tune would unpickle is read unless this installation's key signed it (a planted tuner.pkl
whose pickle runs a command, a planted searcher state, a planted error.pkl); an edited sweep file, a new
override or changed data are refused with one line naming the difference (exit 2, before Ray or MLflow);
``--allow-changes`` runs them and records them on the parent run, while a second ``--resume`` of the same
sweep is refused at once. Once it finished (issue #45 item 1): its folder rolled back to the interrupted
state, or another sweep's signed state copied in, is refused with one line and its parent run stays
FINISHED. The refusals run in this process (they stop before Ray starts), the sweeps and the resume as the
job itself. Each moment a test acts on ("a trial trains", "the resume runs") is held: the trial's Ray
workers are stopped while the test acts (tests/held.py), so no trial outruns it."""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

from conftest import REPO
from held import notes_since, training, training_alone, trials_held
from test_faults_cli import ctrl_c_reaches_it, env_for, job

pytestmark = pytest.mark.e2e  # real processes, signals and servers


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """A two-trial sweep (A and F, 3 epochs) of a sweep file of its own, stopped with Ctrl-C once a trial
    reported: (its folder, the environment it ran in). Its signing key is under its HOME."""
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
        # trial A held while it trains (F cannot start before it ends): Ctrl-C cuts A short, F never started
        with trials_held(driver, lambda: training_alone(root / "sweeps"), log=log):
            driver.send_signal(signal.SIGINT)
            assert driver.wait(timeout=300) == 130, log.read_text()[-3000:]  # Tune ends the held trial itself
    finally:
        if driver.poll() is None:
            driver.kill()
    (folder,) = (root / "sweeps" / "dbl_tiny").iterdir()
    saved = root / "interrupted-state"  # what a rollback of the folder puts back (test_a_rolled_back_...)
    (saved / "tune").mkdir(parents=True)
    shutil.copy2(folder / "itrlab_signatures.json", saved)
    for path in (folder / "tune").iterdir():
        if path.is_file():
            shutil.copy2(path, saved / "tune")
    return root, env


@pytest.fixture
def here(interrupted, monkeypatch):
    """The sweep's environment in this process (its store, its HOME: its key)."""
    root, env = interrupted
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


@pytest.mark.parametrize("plant", ["tune/tuner.pkl", "tune/searcher-state-9999-12-31_23-59-59.pkl", "trial/error.pkl"])
def test_a_planted_pickle_in_the_storage_is_refused_and_never_run(here, capsys, plant):
    folder = the_sweep(here)
    trial = next(p for p in (folder / "tune").iterdir() if p.is_dir())
    path = trial / "error.pkl" if plant == "trial/error.pkl" else folder / plant
    marker = here / "pwned"
    saved = path.read_bytes() if path.exists() else None
    path.write_bytes(pickle.dumps(RunsACommand(f"touch {marker}")))
    try:
        line = refused(here, capsys, resume(here), "Ray Tune would unpickle it, which can run code: refused")
    finally:
        path.write_bytes(saved) if saved is not None else path.unlink()
    assert str(path) in line
    assert not marker.exists()


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
    """Last in this module: it finishes the sweep."""
    root, env = interrupted
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


def test_a_rolled_back_sweep_folder_is_refused_and_its_parent_stays_finished(here, capsys):
    """After the sweep finished: its Tune state and signature manifest put back as they were when it was
    interrupted (valid signatures of this sweep, of an older generation than its parent run recorded)."""
    folder = the_sweep(here)
    now = here / "finished-state"
    shutil.copytree(folder / "tune", now / "tune", ignore=lambda _, names: [n for n in names if n.startswith("run_")])
    shutil.copy2(folder / "itrlab_signatures.json", now)
    try:
        saved = {path.name for path in (here / "interrupted-state" / "tune").iterdir()}
        for path in (folder / "tune").iterdir():  # the folder's own files exactly as they were then
            if path.is_file() and path.name not in saved:
                path.unlink()
        for name in saved:
            shutil.copy2(here / "interrupted-state" / "tune" / name, folder / "tune" / name)
        shutil.copy2(here / "interrupted-state" / "itrlab_signatures.json", folder)
        line = refused(here, capsys, resume(here, folder.name), "is an older state of this sweep", parent="FINISHED")
    finally:
        shutil.copytree(now / "tune", folder / "tune", dirs_exist_ok=True)
        shutil.copy2(now / "itrlab_signatures.json", folder)
    assert "rolled back is refused" in line


def test_another_sweeps_signed_state_copied_in_is_refused_and_its_parent_stays_finished(interrupted, here, capsys):
    """Another sweep of this installation, finished: its signed tune/*.json, tuner.pkl and signature manifest
    copied into this sweep's folder. Its signatures name the other sweep: refused before Tune reads a byte."""
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
        env=interrupted[1],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert other.returncode == 0, other.stdout[-3000:] + other.stderr[-3000:]
    (theirs,) = (here / "sweeps" / "dbl_tiny_other").iterdir()
    folder = the_sweep(here)
    for path in (theirs / "tune").iterdir():
        if path.is_file() and path.suffix in (".json", ".pkl"):
            shutil.copy2(path, folder / "tune" / path.name)
    shutil.copy2(theirs / "itrlab_signatures.json", folder)
    line = refused(
        here, capsys, resume(here, folder.name), "are those of the sweep 'dbl_tiny_other/", parent="FINISHED"
    )
    assert f"not of this one (dbl_tiny/{folder.name} (parent run " in line and "copied from another sweep" in line
    shutil.rmtree(here / "sweeps", ignore_errors=True)
