"""The sweep job as users run it, in subprocesses: interrupted and resumed, and through `ray job submit`."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

from conftest import REPO
from servers import free_port

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent


def job_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlflow.db'}", ITRLAB_CONFIG_DIR=str(REPO / "configs"),
               PYTHONUNBUFFERED="1", PATH=f"{BIN}:{env.get('PATH', '')}")
    return env


def sweep_runs(tmp_path: Path, name: str, polling: bool = False):
    """(parent runs, child runs) of a sweep. While polling, a read error counts as "nothing yet"."""
    try:
        client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
        experiment = client.get_experiment_by_name(name)
        if experiment is None:
            return [], []
        runs = client.search_runs([experiment.experiment_id])
    except Exception:
        if not polling:
            raise
        return [], []
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    return parents, [r for r in runs if "mlflow.parentRunId" in r.data.tags]


def test_interrupted_sweep_resumes_without_rerunning_or_duplicating(tmp_path):
    sweep = tmp_path / "resume.yaml"
    sweep.write_text(yaml.safe_dump({
        "name": "resume_sweep", "experiment": "dbl_synthetic_tiny",
        "overrides": [f"dataset.root={tmp_path / 'data'}", "train.epochs=3"],
        "grid": {"cooperative.strategy": ["A", "F", "G"]}, "seeds": [0], "resources": {"cpu": 2}}))
    command = [sys.executable, str(REPO / "jobs" / "sweep_dbl.py"), "--sweep", str(sweep), "--storage", str(tmp_path / "sweeps")]
    log = open(tmp_path / "first.log", "w")
    driver = subprocess.Popen(command, cwd=tmp_path, env=job_env(tmp_path), stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:  # until the first trial has finished (and the next started)
        # read the store only once the driver has created it (its first line names the parent
        # run): a second process initialising a fresh SQLite store at the same time races it
        if "MLflow parent run" not in (tmp_path / "first.log").read_text():
            time.sleep(0.5)
            continue
        _, children = sweep_runs(tmp_path, "resume_sweep", polling=True)
        if any(c.info.status == "FINISHED" for c in children) and len(children) >= 2:
            break
        assert driver.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
        time.sleep(0.5)
    else:
        pytest.fail("the first trial did not finish in time")
    os.killpg(driver.pid, signal.SIGKILL)  # the driver and the Ray it started
    driver.wait()
    log.close()
    _, before = sweep_runs(tmp_path, "resume_sweep")
    assert any(c.info.status == "RUNNING" for c in before)  # the interrupted trial

    done = subprocess.run([*command, "--resume"], cwd=tmp_path, env=job_env(tmp_path), capture_output=True,
                          text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    parents, children = sweep_runs(tmp_path, "resume_sweep")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert sorted(c.data.tags["param.cooperative.strategy"] for c in children) == ["A", "F", "G"]
    assert {c.info.status for c in children} == {"FINISHED"}
    assert len({c.data.tags["itrlab.trial_id"] for c in children}) == 3
    finished_first = [c for c in before if c.info.status == "FINISHED"]
    for run in finished_first:  # a finished trial is not trained again: its epochs were logged once
        history = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}").get_metric_history(run.info.run_id, "rsum")
        assert [m.step for m in history] == [1, 2, 3]


def test_ray_job_submit_against_a_local_head(tmp_path):
    env = job_env(tmp_path)
    env["RAY_AUTH_MODE"] = "token"  # Ray 2.60 clusters require the token; `ray start` writes it to ~/.ray
    gcs, dashboard = free_port(), free_port()
    started = subprocess.run([str(BIN / "ray"), "start", "--head", "--node-ip-address=127.0.0.1", f"--port={gcs}",
                              f"--dashboard-port={dashboard}", "--dashboard-host=127.0.0.1", "--num-cpus=2",
                              "--disable-usage-stats"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180)
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        runtime_env = f'{{"env_vars": {{"MLFLOW_TRACKING_URI": "sqlite:///{tmp_path / "mlflow.db"}"}}}}'
        submitted = subprocess.run(
            [str(BIN / "ray"), "job", "submit", "--address", f"http://127.0.0.1:{dashboard}", "--working-dir", str(REPO),
             "--runtime-env-json", runtime_env, "--", "python", "jobs/sweep_dbl.py", "--preset", "tiny",
             "--storage", str(tmp_path / "sweeps")],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
        assert submitted.returncode == 0, submitted.stdout[-4000:] + submitted.stderr[-2000:]
        assert "succeeded" in submitted.stdout + submitted.stderr
    finally:
        subprocess.run([str(BIN / "ray"), "stop", "--force"], env=env, capture_output=True, timeout=120)
    parents, children = sweep_runs(tmp_path, "dbl_tiny")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert len(children) == 2 and {c.info.status for c in children} == {"FINISHED"}
    assert all("test_rsum" in c.data.metrics for c in children)


def test_crashed_trial_is_retried_from_its_last_checkpoint(tmp_path):
    """Kill a trial's process mid-run: Tune retries it (max_failures: 1) from the checkpoint of its
    last reported epoch, into the same MLflow run, and the sweep finishes."""
    epochs = 6
    sweep = tmp_path / "crash.yaml"
    sweep.write_text(yaml.safe_dump({
        "name": "crash_sweep", "experiment": "dbl_synthetic_tiny",
        "overrides": [f"dataset.root={tmp_path / 'data'}", f"train.epochs={epochs}"],
        "grid": {"cooperative.strategy": ["F"]}, "seeds": [0], "resources": {"cpu": 2}, "max_failures": 1}))
    command = [sys.executable, str(REPO / "jobs" / "sweep_dbl.py"), "--sweep", str(sweep), "--storage", str(tmp_path / "sweeps")]
    log_path = tmp_path / "sweep.log"
    with open(log_path, "w") as log:
        driver = subprocess.Popen(command, cwd=tmp_path, env=job_env(tmp_path), stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        try:
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline:  # until the trial has reported (and checkpointed) two epochs
                results = list((tmp_path / "sweeps").glob("crash_sweep/*/tune/*/result.json"))
                lines = results[0].read_text().splitlines() if results else []
                if len(lines) >= 2:
                    break
                assert driver.poll() is None, log_path.read_text()[-3000:]
                time.sleep(0.2)
            else:
                pytest.fail("the trial did not report two epochs in time")
            trial_pid = json.loads(lines[-1])["pid"]
            os.kill(trial_pid, signal.SIGKILL)  # the trial's worker process, as the OOM killer would
            assert driver.wait(timeout=400) == 0, log_path.read_text()[-4000:]
        finally:
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)
    output = log_path.read_text()
    resumed = [int(m) for m in re.findall(r"resuming \S+ after epoch (\d+)", output)]
    assert len(resumed) == 1 and 2 <= resumed[0] < epochs, output[-4000:]  # from a checkpoint, not from scratch
    parents, children = sweep_runs(tmp_path, "crash_sweep")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert len(children) == 1 and children[0].info.status == "FINISHED"  # the retry reused the trial's run
    history = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}").get_metric_history(
        children[0].info.run_id, "rsum")
    steps = [m.step for m in history]
    assert sorted(set(steps)) == list(range(1, epochs + 1))
    assert all(steps.count(epoch) == 1 for epoch in range(1, resumed[0] + 1))  # checkpointed epochs not trained again
    assert "test_rsum" in children[0].data.metrics
