"""The sweep job as users run it, in subprocesses: a crashed trial retried, the progress line's ETA (interrupted and
resumed: tests/test_faults_jobs.py; through `ray job submit`: tests/test_ray_job_documented.py)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

from conftest import REPO
from held import board_notes, trial_processes, trials_held
from held import training as in_training
from itrlab.sweep import console
from itrlab.tracking.chart_names import chart_name, flat_metrics

pytestmark = pytest.mark.e2e
BIN = Path(sys.executable).parent


def job_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(
        MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlflow.db'}",
        ITRLAB_CONFIG_DIR=str(REPO / "configs"),
        PYTHONUNBUFFERED="1",
        PATH=f"{BIN}:{env.get('PATH', '')}",
    )
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


def sweep_command(tmp_path: Path, spec: dict) -> list[str]:
    """Write ``spec`` as a sweep file; the command that runs it as users do."""
    sweep = tmp_path / f"{spec['name']}.yaml"
    sweep.write_text(yaml.safe_dump(spec))
    return [
        sys.executable,
        str(REPO / "jobs" / "sweep_dbl.py"),
        "--sweep",
        str(sweep),
        "--storage",
        str(tmp_path / "sweeps"),
    ]


def start_driver(
    command: list[str], tmp_path: Path, log_path: Path, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """The sweep driver in a session of its own (so that killing the group takes its Ray along), in
    ``env`` (default: :func:`job_env`)."""
    with open(log_path, "w") as log:
        return subprocess.Popen(
            command,
            cwd=tmp_path,
            env=env or job_env(tmp_path),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


@pytest.mark.slow
def test_a_crashed_trial_is_retried_from_its_checkpoint_and_the_eta_never_says_0_s(tmp_path):
    """One trial at a time: a 1-epoch trial, then a 4-epoch one of small batches whose process is killed
    once it has checkpointed two epochs. Tune retries it (max_failures: 1) from the checkpoint of its last
    reported epoch, into the same MLflow run, and the sweep finishes.

    Meanwhile the progress line: the old ETA (the mean of the ended trials less the running one's time)
    said "ETA 0 s" through the slow trial's last epochs; now every line while a trial has steps left gives a
    time from the step rate, the lines say what the trials do (pending while Ray starts the worker,
    starting, epoch e/E step s/S), and the last line gives this invocation's wall time."""
    epochs = 4
    spec = {
        "name": "slow_after_fast",
        "experiment": "dbl_synthetic_tiny",
        "overrides": [f"dataset.root={tmp_path / 'data'}", "train.batch_size=8", "train.threads=1"],
        "grid": {"variant": [{"name": "fast", "train.epochs": 1}, {"name": "slow", "train.epochs": epochs}]},
        "seeds": [0],
        "concurrency": 1,
        "resources": {"cpu": 1},
        "max_failures": 1,
        "table": {"rows": ["variant"]},
    }
    env = job_env(tmp_path) | {console.PROGRESS_ENV: "0.3", "ITRLAB_STEP_PROGRESS_S": "0"}
    log_path = tmp_path / "sweep.log"
    driver = start_driver(sweep_command(tmp_path, spec), tmp_path, log_path, env)

    def slow_trial_past_two_epochs() -> bool:  # it trains its third epoch or later: two reported and checkpointed
        return any(
            note.get("epochs") == epochs and in_training(note) and note.get("epoch", 0) >= 3
            for note in board_notes(tmp_path / "sweeps").values()
        )

    try:
        with trials_held(driver, slow_trial_past_two_epochs, log=log_path) as workers:  # it cannot end first
            for pid in trial_processes(workers):
                os.kill(pid, signal.SIGKILL)  # as the OOM killer would
        assert driver.wait(timeout=400) == 0, log_path.read_text()[-4000:]
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    output = log_path.read_text()
    resumed = [int(m) for m in re.findall(r"resuming \S+ after epoch (\d+)", output)]
    assert len(resumed) == 1 and 2 <= resumed[0] < epochs, output[-4000:]  # from a checkpoint, not from scratch
    parents, children = sweep_runs(tmp_path, "slow_after_fast")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert len(children) == 2 and {c.info.status for c in children} == {"FINISHED"}  # the retry reused its run
    (slow,) = [c for c in children if c.data.tags["param.variant"] == "slow"]
    steps = [
        m.step
        for m in MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}").get_metric_history(
            slow.info.run_id, chart_name("rsum")
        )
    ]
    assert sorted(set(steps)) == list(range(1, epochs + 1))
    assert all(steps.count(epoch) == 1 for epoch in range(1, resumed[0] + 1))  # checkpointed epochs not trained again
    assert "test_rsum" in flat_metrics(slow.data.metrics)

    lines = [line for line in output.splitlines() if re.match(r"\d/2 trials done · ", line)]
    assert lines and all("ETA 0 s" not in line for line in lines), "\n".join(lines)
    training = [line for line in lines if re.search(r"running: epoch \d/\d step \d+/\d+", line)]
    # the slow trial past the fast one's whole time (its epochs 2-4), with an ETA from its step rate
    assert any(re.match(r"1/2 trials done · 1 running: epoch [234]/4 step ", line) for line in training), "\n".join(
        lines
    )
    assert all(re.search(r"ETA (\d+ s|\d+ min|unknown)$", line) for line in training)
    assert any("pending (Ray is starting a worker" in line or "running: starting" in line for line in lines)
    assert any("1 queued (1 at a time)" in line for line in lines)  # the slow trial behind the fast one
    assert re.search(r"^2/2 trials done · 0 running · 0 failed · took .+ \(this invocation\)$", lines[-1]), lines[-1]
