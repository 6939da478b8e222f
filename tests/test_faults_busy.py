"""Busy is not broken, and a clock that was ahead, with real servers and processes:
an MLflow server that answers 503 for a while is waited for, one that stays busy past the limit is one line
(exit status 1), a server that turns busy during a run ends it on one line within the client's bounded
retries (a local Ray whose node start times out is started again: tests/test_faults_dying.py). A run whose recorded
start lies in the future gets a warning and a duration that is not negative."""

from __future__ import annotations

import itertools
import re
import subprocess
import threading
import time

import pytest
from mlflow import MlflowClient

from held import training_held
from servers import busy_proxy, mlflow_server
from test_faults_cli import env_for, job, one_line_error, run

pytestmark = pytest.mark.e2e  # real processes, signals and servers

TRAIN = ("train.py", "-c", "vsepp_synthetic_tiny", "train.epochs=1")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One real ``mlflow server`` for the module's tests (each logs to an experiment of its own, through a
    proxy of its own that answers 503 when the test says so)."""
    with mlflow_server(tmp_path_factory.mktemp("mlflow")) as uri:
        yield uri


def test_a_busy_mlflow_server_is_waited_for_and_then_used(tmp_path, server):
    """The first three requests answered 503 (by count, not time: a loaded machine imports for longer)."""
    answered = itertools.count()
    with busy_proxy(server, busy=lambda: next(answered) < 3) as busy:
        done, _ = run(
            job(
                *TRAIN,
                f"dataset.root={tmp_path / 'data'}",
                f"output.dir={tmp_path / 'runs'}",
                "tracking.experiment=busy_waited",
            ),
            tmp_path,
            env_for(tmp_path, busy),
            timeout=600,
        )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert f"MLflow tracking store {busy} is busy (it answers HTTP 503); asking again" in done.stdout
    client = MlflowClient(tracking_uri=server)
    (finished,) = client.search_runs([client.get_experiment_by_name("busy_waited").experiment_id])
    assert finished.info.status == "FINISHED"


def test_a_server_busy_past_the_limit_is_one_line_and_exit_1(tmp_path):
    with busy_proxy("http://127.0.0.1:9", busy=lambda: True) as busy:
        env = {**env_for(tmp_path, busy), "ITRLAB_MLFLOW_WAIT_S": "6"}
        done, seconds = run(
            job(*TRAIN, f"dataset.root={tmp_path / 'data'}", f"output.dir={tmp_path / 'runs'}"),
            tmp_path,
            env,
            timeout=300,
        )
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    line = one_line_error(done)
    assert f"MLflow tracking store {busy} stayed busy for 6 s" in line and "ITRLAB_MLFLOW_WAIT_S" in line, line
    assert not (tmp_path / "runs").exists()


def test_a_server_that_turns_busy_during_a_run_ends_it_on_one_line(tmp_path, server):
    """MLflow's own retries are bounded (here 2, the test's setting of MLFLOW_HTTP_REQUEST_MAX_RETRIES; itrlab's
    default 5 with back-off, about a minute of 503s): then one line, exit status 1, no traceback."""
    turned = threading.Event()
    with busy_proxy(server, busy=turned.is_set) as proxy:
        env = {**env_for(tmp_path, proxy), "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "ITRLAB_WATCHDOG": "0"}
        log = tmp_path / "train.log"
        with open(log, "w") as out:
            process = subprocess.Popen(
                job(
                    "train.py",
                    "-c",
                    "vsepp_synthetic_tiny",
                    "train.epochs=400",
                    f"dataset.root={tmp_path / 'data'}",
                    f"output.dir={tmp_path / 'runs'}",
                    "tracking.experiment=busy_during",
                ),
                cwd=tmp_path,
                env=env,
                stdout=out,
                stderr=subprocess.PIPE,
                text=True,
            )
        try:
            with training_held(process, log):  # the server turns busy before the training can end
                turned.set()
            _, err = process.communicate(timeout=300)
        finally:
            if process.poll() is None:
                process.kill()
    assert process.returncode == 1, err[-3000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    assert "can no longer be written: it answers HTTP 503" in lines[0], lines[0]


@pytest.mark.usefixtures("workdir")
def test_a_start_in_the_future_is_warned_about_and_never_a_negative_duration(capsys):
    from itrlab.tracking import MlflowTracker

    tracker = MlflowTracker("clock")
    ahead_ms = int((time.time() + 400 * 86400) * 1000)  # started under a clock 400 days ahead
    run_id = tracker.client.create_run(tracker.experiment_id, start_time=ahead_ms, run_name="ahead").info.run_id
    tracker.client.set_terminated(run_id, "KILLED", end_time=ahead_ms + 5000)
    resumed = MlflowTracker("clock")
    resumed.start(run_name="ahead", tags={}, params={}, run_id=run_id)
    time.sleep(1.2)
    resumed.end()
    warned = capsys.readouterr().err
    assert re.search(r"recorded start is 34,5\d\d,\d\d\d s in the future", warned), warned
    run = tracker.client.get_run(run_id)
    assert run.info.status == "FINISHED" and "itrlab.clock_warning" in run.data.tags
    assert run.info.end_time - run.info.start_time >= 1000  # the time measured here, not -34,560,000 s
