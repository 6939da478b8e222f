"""``jobs/train.py --resume``: a run folder is locked like a sweep folder (a second
resume of it is one line, exit 2, and the run's MLflow history holds one training), and a resume on other
data, or with another config, is refused with one line naming the difference before the MLflow run is
reopened, so a finished run keeps its result; ``--allow-changes`` trains so and records it on the run."""

from __future__ import annotations

import shutil
import signal
import subprocess

import pytest
from mlflow import MlflowClient

from held import process_held
from itrlab.tracking.chart_names import chart_name, flat_metrics
from test_faults_cli import ctrl_c_reaches_it, env_for, job, one_line_error
from test_faults_resume import (  # in this process: exit status and stderr
    finished_run,  # noqa: F401 - the module's finished one-epoch run
    refused_line,
)
from test_faults_resume import resume as resume_here

pytestmark = pytest.mark.e2e  # real processes, signals and servers


@pytest.fixture
def copy(finished_run, tmp_path):  # noqa: F811 - the imported fixture, requested by name
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
    line = refused_line(
        *resume_here(copy, capsys, "train.epochs=4", f"dataset.root={copy / 'other'}", "dataset.synthetic.seed=1")
    )
    assert "the config's dataset.root: recorded" in line and "(and 1 more)" in line and "--allow-changes" in line
    _, after = the_run(copy)
    assert after.info.status == "FINISHED"
    assert flat_metrics(after.data.metrics)["test_rsum"] == flat_metrics(before.data.metrics)["test_rsum"]
    assert not (copy / "other").exists()


def test_data_changed_under_the_same_folder_is_refused(copy, capsys):
    features = copy / "data" / "train_ims.npy"
    features.write_bytes(features.read_bytes()[:-4] + b"\x00\x00\x80\x3f")
    assert f"the data in {copy / 'data'}: recorded digest" in refused_line(*resume_here(copy, capsys))
    assert the_run(copy)[1].info.status == "FINISHED"


def recorded(root) -> dict:
    """What the run has recorded: its MLflow status, end, metrics (with their histories), params and tags, and
    the files of its folder that hold results."""
    client, run = the_run(root)
    histories = {
        key: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)] for key in run.data.metrics
    }
    return {
        "status": run.info.status,
        "end": run.info.end_time,
        "histories": histories,
        "params": run.data.params,
        "tags": run.data.tags,
        "files": {name: (root / "run" / name).read_bytes() for name in ("config.yaml", "test_recall.json")},
    }


def test_a_resume_of_a_finished_run_changes_nothing_recorded(copy, capsys):
    """Nothing left to train, so no second test evaluation, no new train_seconds or cpu_hours,
    no new end time; it says so and exits 0 (in this process: it stops before MLflow is opened)."""
    from itrlab.cli import main

    before = recorded(copy)
    assert "train_seconds" in before["histories"] and "cpu_hours" in before["histories"]
    capsys.readouterr()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(copy)
        patch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{copy / 'mlflow.db'}")
        assert main(["train", "--resume", "--run-dir", str(copy / "run")]) == 0
    out = capsys.readouterr().out
    assert f"itrlab: {copy / 'run'} finished after 1 epochs (test rsum " in out, out
    assert "nothing to train and changed nothing recorded" in out
    assert recorded(copy) == before


@pytest.mark.parametrize(
    "change",
    [
        ("dataset.splits.test=dev",),
        ("eval.test_protocol=5fold",),
        ("dataset.splits.test=dev", "eval.test_protocol=5fold"),
    ],
    ids=["another test split", "another test protocol", "both"],
)
def test_allow_changes_never_evaluates_a_run_on_other_test_data(copy, capsys, change):
    """An evaluation on other data, or under another protocol, is a new record: refused with
    one line even with --allow-changes (and with more epochs to train), the run's results and config kept."""
    before = recorded(copy)
    line = refused_line(*resume_here(copy, capsys, "--allow-changes", *change))
    assert f"the config's {change[0].split('=')[0]}: recorded " in line, line
    assert "an evaluation on other data or under another protocol is a new record" in line
    assert ("(and 1 more)" in line) == (len(change) == 2)
    assert recorded(copy) == before


def test_the_same_data_moved_to_another_folder_is_no_new_evaluation(copy, capsys):
    """The data's digest says it is the same data: a resume may follow it to its new folder (--allow-changes,
    recorded), which is not an evaluation on other data."""
    shutil.copytree(copy / "data", copy / "moved")
    code, err = resume_here(copy, capsys, f"dataset.root={copy / 'moved'}")
    line = refused_line(code, err)
    assert "the config's dataset.root: recorded" in line and "--allow-changes" in line
    assert "is a new record" not in line  # the ordinary refusal of a change, which --allow-changes accepts


def test_allow_changes_trains_on_and_records_the_change(copy):
    done = subprocess.run(
        resume(copy, "--allow-changes", "train.epochs=2", "train.lr=0.002"),
        cwd=copy,
        env=env_for(copy),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "epoch   2/2" in done.stdout and "lr 2.00e-03" in done.stdout, done.stdout[-2000:]  # trained so
    _, run = the_run(copy)
    assert run.info.status == "FINISHED"
    assert run.data.params.get("resume.1.changes") == "the config's train.lr: recorded 0.001, now 0.002", done.stdout[
        -3000:
    ]
    assert run.data.tags["itrlab.resume_changes"].startswith("resume 1: the config's train.lr")


def test_two_resumes_of_one_run_folder_train_once(copy):
    """The first resume trains on (500 epochs) while the second starts; then it is stopped with Ctrl-C."""
    env = env_for(copy)
    log = copy / "first.log"
    with open(log, "w") as out:
        first = subprocess.Popen(
            resume(copy, "train.epochs=500"),
            cwd=copy,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            preexec_fn=ctrl_c_reaches_it,
        )
    try:
        # it holds the folder and trained an epoch more, stopped: it cannot finish meanwhile
        with process_held(first, log, "epoch   2/500"):
            second = subprocess.run(
                resume(copy, "train.epochs=500"), cwd=copy, env=env, capture_output=True, text=True, timeout=300
            )
            assert first.poll() is None, log.read_text()[-3000:]  # still training while the second was refused
            first.send_signal(signal.SIGINT)  # delivered once it continues
        assert first.wait(timeout=300) == 130, log.read_text()[-3000:]
    finally:
        if first.poll() is None:
            first.kill()
    assert second.returncode == 2, second.stdout[-2000:] + second.stderr[-2000:]
    assert f"the run folder {copy / 'run'} is in use by another process" in one_line_error(second)
    client, run = the_run(copy)
    epochs = [m.step for m in client.get_metric_history(run.info.run_id, chart_name("rsum"))]
    assert epochs == list(range(1, len(epochs) + 1)) and len(epochs) >= 2, epochs  # each epoch once: one training
    assert run.info.status == "KILLED"
