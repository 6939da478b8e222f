"""``jobs/train.py --resume`` (issue #30 items 2 and 3): a run folder is locked like a sweep folder (a second
resume of it is one line, exit 2, and the run's MLflow history holds one training), and a resume on other
data, or with another config, is refused with one line naming the difference before the MLflow run is
reopened, so a finished run keeps its result; ``--allow-changes`` trains so and records it on the run."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time

import pytest
from mlflow import MlflowClient

from test_faults_cli import ctrl_c_reaches_it, env_for, job, one_line_error
from test_faults_resume import finished_run  # noqa: F401 - the module's finished one-epoch run
from test_faults_resume import refused_line, resume as resume_here  # in this process: exit status and stderr

pytestmark = pytest.mark.e2e  # real processes, signals and servers


@pytest.fixture
def copy(finished_run, tmp_path):
    """The finished run's folder, data and store at the same paths as the original (the config records them):
    the module's fixture, restored after each test."""
    backup = tmp_path / "backup"
    shutil.copytree(finished_run, backup, symlinks=True)
    yield finished_run
    kept = {entry.name for entry in backup.iterdir()}
    for entry in finished_run.iterdir():
        if entry.name not in kept:
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
    for entry in backup.iterdir():
        target = finished_run / entry.name
        if entry.is_dir():
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(entry, target, symlinks=True)
        else:  # rewritten in place: MLflow's engine in this process keeps mlflow.db open (a new file unseen)
            shutil.copyfile(entry, target)


def the_run(root):
    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("vsepp_synthetic_tiny").experiment_id])
    return client, run


def resume(root, *args):
    return job("train.py", "--resume", "--run-dir", str(root / "run"), *args)


def test_a_resume_on_other_data_is_refused_and_the_result_kept(copy, capsys):
    _, before = the_run(copy)
    # in this process, as test_faults_resume.py's refusals: a refusal comes before any training
    line = refused_line(*resume_here(copy, capsys, "train.epochs=4", f"dataset.root={copy / 'other'}",
                                     "dataset.synthetic.seed=1"))
    assert "the config's dataset.root: recorded" in line and "(and 1 more)" in line and "--allow-changes" in line
    _, after = the_run(copy)
    assert after.info.status == "FINISHED" and after.data.metrics["test_rsum"] == before.data.metrics["test_rsum"]
    assert not (copy / "other").exists()


def test_data_changed_under_the_same_folder_is_refused(copy, capsys):
    features = copy / "data" / "train_ims.npy"
    features.write_bytes(features.read_bytes()[:-4] + b"\x00\x00\x80\x3f")
    assert f"the data in {copy / 'data'}: recorded digest" in refused_line(*resume_here(copy, capsys))
    assert the_run(copy)[1].info.status == "FINISHED"


def test_allow_changes_trains_on_and_records_the_change(copy):
    done = subprocess.run(resume(copy, "--allow-changes", "train.epochs=2", "train.lr=0.002"), cwd=copy,
                          env=env_for(copy), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "epoch   2/2" in done.stdout and "lr 2.00e-03" in done.stdout, done.stdout[-2000:]  # trained so
    _, run = the_run(copy)
    assert run.info.status == "FINISHED"
    assert run.data.params.get("resume.1.changes") == "the config's train.lr: recorded 0.001, now 0.002", done.stdout[-3000:]
    assert run.data.tags["itrlab.resume_changes"].startswith("resume 1: the config's train.lr")


def test_two_resumes_of_one_run_folder_train_once(copy):
    """The first resume trains on (500 epochs) while the second starts; then it is stopped with Ctrl-C."""
    env = env_for(copy)
    log = copy / "first.log"
    with open(log, "w") as out:
        first = subprocess.Popen(resume(copy, "train.epochs=500"), cwd=copy, env=env, stdout=out,
                                 stderr=subprocess.STDOUT, preexec_fn=ctrl_c_reaches_it)
    try:
        deadline = time.monotonic() + 300
        while "resuming" not in log.read_text():  # it holds the folder
            assert first.poll() is None and time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.2)
        second = subprocess.run(resume(copy, "train.epochs=500"), cwd=copy, env=env, capture_output=True, text=True,
                                timeout=300)
        assert first.poll() is None, log.read_text()[-3000:]  # still training while the second was refused
        first.send_signal(signal.SIGINT)
        assert first.wait(timeout=300) == 130, log.read_text()[-3000:]
    finally:
        if first.poll() is None:
            first.kill()
    assert second.returncode == 2, second.stdout[-2000:] + second.stderr[-2000:]
    assert f"the run folder {copy / 'run'} is in use by another process" in one_line_error(second)
    client, run = the_run(copy)
    epochs = [m.step for m in client.get_metric_history(run.info.run_id, "rsum")]
    assert epochs == list(range(1, len(epochs) + 1)) and len(epochs) >= 2, epochs  # each epoch once: one training
    assert run.info.status == "KILLED"
