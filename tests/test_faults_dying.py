"""Every fault ends in a final state, with real processes and signals: a sweep's driver
whose first Ray start times out starts another, then loses its raylet (Ray's core worker ends it on the
spot), a training killed by SIGBUS, feature files truncated while a run reads them, a run whose process
was killed with its watchdog off (closed by the next command on the store). No run is left RUNNING; each
ends with its reason in ``itrlab.stop_reason``. And ``jobs/local_cluster.py up`` stopped by SIGTERM
leaves nothing of what it started."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest
from mlflow import MlflowClient

from conftest import write_precomp
from held import training_alone, training_held, trials_held
from test_faults_cli import ctrl_c_reaches_it, env_for, job

pytestmark = pytest.mark.e2e  # real processes, signals and servers


def descendants(pid: int) -> dict[int, str]:
    """pid -> command line of every live descendant of ``pid``."""
    found = {}
    with contextlib.suppress(psutil.NoSuchProcess):
        for process in psutil.Process(pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                found[process.pid] = " ".join(process.cmdline())
    return found


def all_runs(tracking_uri: str) -> list:
    client = MlflowClient(tracking_uri=tracking_uri)
    experiments = [e.experiment_id for e in client.search_experiments()]
    return client.search_runs(experiments) if experiments else []


def settled(tracking_uri: str, timeout: float = 180) -> list:
    """The store's runs once none is RUNNING (the watchdog works after its job died)."""
    deadline = time.monotonic() + timeout
    while True:
        runs = all_runs(tracking_uri)
        if runs and all(run.info.status != "RUNNING" for run in runs):
            return runs
        assert time.monotonic() < deadline, [(r.info.run_name, r.info.status) for r in runs]
        time.sleep(1)


def long_training(tmp_path: Path, *overrides: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, Path]:
    """A tiny training of 500 epochs, started (its first epoch not done yet); its log."""
    log = tmp_path / "train.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            job(
                "train.py",
                "-c",
                "vsepp_synthetic_tiny",
                "train.epochs=500",
                f"dataset.root={tmp_path / 'data'}",
                "--run-dir",
                str(tmp_path / "run"),
                *overrides,
            ),
            cwd=tmp_path,
            env=env or env_for(tmp_path),
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=ctrl_c_reaches_it,
        )
    return process, log


def raylets_of(pid: int) -> list[int]:
    """The raylets among ``pid``'s live descendants (one per local Ray it started)."""
    return [child for child, cmd in descendants(pid).items() if cmd.split(" ")[0].endswith("/raylet")]


def stop_first_raylet_of(driver: subprocess.Popen, stopped: list[int]) -> None:
    """SIGSTOP the first raylet the driver starts (a machine too busy to schedule it): Ray gives its node 30 s."""
    while driver.poll() is None:
        for pid in raylets_of(driver.pid):
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
            return
        time.sleep(0.05)


def test_a_ray_start_that_times_out_is_tried_again_and_a_lost_raylet_leaves_no_run_running(tmp_path):
    """The sweep's first local Ray never registers its node (its raylet stopped): Ray gives up after 30 s
    and the driver starts another. That Ray's raylet is then killed while a trial trains: Ray's core worker
    ends the driver on the spot, and every run it started ends KILLED with the reason (the watchdog)."""
    env = env_for(tmp_path)
    driver = subprocess.Popen(
        job(
            "sweep_dbl.py",
            "--preset",
            "tiny",
            "--storage",
            str(tmp_path / "sweeps"),
            f"dataset.root={tmp_path / 'data'}",
            "train.epochs=50",
        ),
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stopped: list[int] = []
    watcher = threading.Thread(target=stop_first_raylet_of, args=(driver, stopped), daemon=True)
    watcher.start()
    try:
        # the trial held while it trains (its Ray workers stopped, the board read then): it cannot finish
        # before its raylet is killed, however fast it is
        with trials_held(driver, lambda: training_alone(tmp_path / "sweeps")) as workers:
            assert stopped, "no raylet was seen"
            (raylet,) = [pid for pid in raylets_of(driver.pid) if pid not in stopped]
            os.kill(raylet, signal.SIGKILL)
            for pid in workers:  # the raylet's workers die with it; a stopped one cannot notice
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        out, err = driver.communicate(timeout=300)
    finally:
        for pid in stopped:  # never left stopped, whatever happened
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if driver.poll() is None:
            driver.kill()
    assert "Ray did not start (The current node timed out during startup" in out, out[-3000:]
    assert "(attempt 2 of 3)" in out and "Traceback" not in out
    assert driver.returncode != 0
    runs = settled(env["MLFLOW_TRACKING_URI"])
    assert len(runs) >= 2  # the parent and the trial that ran
    for run in runs:
        assert run.info.status == "KILLED", (run.info.run_name, run.info.status)
        assert "the sweep's driver (pid" in run.data.tags["itrlab.stop_reason"]
        assert run.info.end_time >= run.info.start_time
    assert "itrlab: the sweep's driver (pid" in err and "--resume continues it" in err, err[-3000:]
    (state,) = tmp_path.glob("sweeps/dbl_tiny/*/itrlab_sweep.json")
    assert json.loads(state.read_text())["status"] == "RUNNING"  # what --resume continues


def test_a_training_killed_by_a_bus_error_ends_its_run_killed(tmp_path):
    process, log = long_training(tmp_path)
    try:
        with training_held(process, log):  # stopped after its first epoch: the signal waits, it cannot finish first
            process.send_signal(signal.SIGBUS)
        _, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == -signal.SIGBUS
    (run,) = settled(env_for(tmp_path)["MLFLOW_TRACKING_URI"])
    assert run.info.status == "KILLED" and "a bus error" in run.data.tags["itrlab.stop_reason"]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("itrlab: the training (pid"), err[-2000:]


def test_features_truncated_while_a_run_reads_them_end_it_failed_with_the_reason(tmp_path):
    root = write_precomp(tmp_path / "precomp", {"train": 200, "dev": 10, "test": 10})
    process, log = long_training(tmp_path, "dataset.kind=precomp", f"dataset.root={root}", "train.batch_size=8")
    try:
        with training_held(process, log):  # it reads the next epoch's batches only after this
            features = root / "train_ims.npy"
            os.truncate(features, features.stat().st_size // 2)  # rewritten in place by another process, say
        _, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 2, err[-3000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "the file shrank from" in lines[0], err[-3000:]
    (run,) = all_runs(env_for(tmp_path)["MLFLOW_TRACKING_URI"])
    assert run.info.status == "FAILED" and "the file shrank from" in run.data.tags["itrlab.stop_reason"]


def test_a_run_its_dead_process_left_running_is_closed_by_the_next_command(tmp_path):
    env = {**env_for(tmp_path), "ITRLAB_WATCHDOG": "0"}
    process, log = long_training(tmp_path, env=env)
    with training_held(process, log):  # killed while it trains, never after it ended its run
        process.kill()
    process.wait(timeout=60)
    (orphan,) = all_runs(env["MLFLOW_TRACKING_URI"])
    assert orphan.info.status == "RUNNING"
    done = subprocess.run(
        job(
            "train.py",
            "-c",
            "vsepp_synthetic_tiny",
            "train.epochs=1",
            f"dataset.root={tmp_path / 'data'}",
            "--run-dir",
            str(tmp_path / "next"),
        ),
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert (
        f"itrlab: ended 1 MLflow run(s) KILLED that processes which died had left RUNNING: {orphan.info.run_id}"
        in done.stdout
    )
    runs = {run.info.run_id: run for run in all_runs(env["MLFLOW_TRACKING_URI"])}
    closed = runs[orphan.info.run_id]
    assert (
        closed.info.status == "KILLED" and "ended by a later itrlab command" in closed.data.tags["itrlab.stop_reason"]
    )
    assert sorted(run.info.status for run in runs.values()) == ["FINISHED", "KILLED"]


def local_cluster_problem() -> str | None:
    from cluster_harness import isolation_problem, postgres_bin

    if postgres_bin() is None:
        return "PostgreSQL's server programs are not installed"
    return isolation_problem()


@pytest.mark.parametrize("milestone", ["postgres.log", "mlflow-server.log"])
def test_sigterm_to_local_cluster_up_stops_everything_it_started(tmp_path, milestone):
    """``jobs/local_cluster.py up`` stopped by SIGTERM while it starts (``timeout``, CI and systemd send it, and
    SIGKILL 10 s later, as ``docker stop`` does): one line, exit 143, no process and no folder of it left. The
    signal comes once PostgreSQL is starting, or once the MLflow server is (the Ray nodes start meanwhile),
    seen by their logs in the cluster's folder: points in the start, not delays, which a fast machine
    would outrun (the whole start takes about a minute on 2 cores)."""
    problem = local_cluster_problem()
    if problem:
        pytest.skip(problem)
    before = set(Path("/tmp").glob("itrlab-*"))
    env = {k: v for k, v in env_for(tmp_path).items() if k != "MLFLOW_TRACKING_URI"}
    up = subprocess.Popen(
        job("local_cluster.py", "up", "--root", str(tmp_path / "cluster"), "--workers", "1", "--cpus-per-worker", "1"),
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 240
    while up.poll() is None and time.monotonic() < deadline and not (tmp_path / "cluster" / milestone).exists():
        time.sleep(0.1)
    if up.poll() is not None:  # the whole start finished first: take the cluster down, then fail
        subprocess.run(
            job("local_cluster.py", "down", "--root", str(tmp_path / "cluster")),
            cwd=tmp_path,
            env=env,
            capture_output=True,
            timeout=120,
        )
        pytest.fail(f"the start ended before {milestone!r} appeared")
    up.send_signal(signal.SIGTERM)
    try:
        _, err = up.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        up.kill()
        _, err = up.communicate()
    made = set(Path("/tmp").glob("itrlab-*")) - before
    left = {
        process.pid: cmd
        for process in psutil.process_iter(["cmdline"])
        for cmd in [" ".join(process.info["cmdline"] or ())]
        if str(tmp_path) in cmd or any(str(folder) in cmd for folder in made)
    }
    for pid in left:  # never left running, whatever happened
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert up.returncode == 143, err[-3000:]
    assert err.strip().splitlines() == [
        "itrlab: local cluster up: terminated (SIGTERM); stopped every process it had started"
    ], err[-3000:]
    assert not left, left
    assert not made, made
