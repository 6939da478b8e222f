"""Faults met before anything starts, with real processes: a dead MLflow port, folders
that cannot be written (as a user that file permissions apply to), a trial too large for this
machine, sweep keys that name nothing, a new SQLite store initialised by several processes at once,
and Ctrl-C during a training. None of these starts Ray."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

from conftest import REPO
from held import training_held
from servers import free_port

BIN = Path(sys.executable).parent
NOBODY = 65534


def env_for(workdir: Path, tracking_uri: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MLFLOW_"))}
    env.update(
        MLFLOW_TRACKING_URI=tracking_uri or f"sqlite:///{workdir / 'mlflow.db'}",
        ITRLAB_CONFIG_DIR=str(REPO / "configs"),
        PYTHONUNBUFFERED="1",
        HOME=str(workdir),
        OMP_NUM_THREADS="1",  # tiny models: one thread, no contention on a busy machine
        PATH=f"{BIN}:{env.get('PATH', '')}",
    )
    return env


def job(name: str, *args: str) -> list[str]:
    return [sys.executable, str(REPO / "jobs" / name), *args]


def run(
    command: list[str], workdir: Path, env: dict[str, str], timeout: float = 120
) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    done = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
    return done, time.monotonic() - started


def one_line_error(done: subprocess.CompletedProcess) -> str:
    """The single line a failed command printed on stderr (and no traceback anywhere)."""
    lines = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
    assert len(lines) == 1, done.stderr[-3000:]
    return lines[0]


@pytest.fixture
def shared_dir():
    """A folder outside pytest's private temporary folders, usable by another user (file permissions)."""
    path = Path(tempfile.mkdtemp(prefix="itrlab-faults-"))
    path.chmod(0o777)
    yield path
    subprocess.run(["chmod", "-R", "u+rwx", str(path)], check=False)
    shutil.rmtree(path, ignore_errors=True)


def as_unprivileged(command: list[str]) -> list[str]:
    """``command`` run by a user without CAP_DAC_OVERRIDE: root would ignore the permissions under test."""
    if os.geteuid() != 0:
        return command
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: permissions cannot be tested")
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *command]


# -- MLflow unreachable (item 3) -------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize(
    "command",
    [
        job("train.py", "-c", "vsepp_synthetic_tiny", "train.epochs=1"),
        job("sweep_dbl.py", "--preset", "tiny", "--storage", "sweeps"),
    ],
    ids=["train", "sweep"],
)
def test_dead_mlflow_port_fails_in_seconds_with_one_line(tmp_path, command):
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    done, seconds = run([*command, f"dataset.root={tmp_path / 'data'}"], tmp_path, env_for(tmp_path, uri))
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    line = one_line_error(done)
    assert line.startswith(f"itrlab: error: MLflow tracking store {uri} does not work: connection refused"), line
    assert seconds < 60, seconds  # was about 250 s (MLflow's retries); mostly imports here
    assert not (tmp_path / "runs").exists() and not (tmp_path / "sweeps").exists()
    # Ray never started: no sweep line (the one line saying where a job run outside the project writes aside)
    assert not re.search(r"^sweep \S+:", done.stdout, re.M)
    assert "Started a local Ray" not in done.stdout + done.stderr


# -- output not writable (item 11) -----------------------------------------------------------------


@pytest.mark.e2e
def test_unwritable_sweep_storage_and_output_dir_fail_before_ray_or_mlflow(shared_dir):
    readonly = shared_dir / "readonly"
    readonly.mkdir()
    readonly.chmod(0o555)
    env = env_for(shared_dir)
    sweep, _ = run(
        as_unprivileged(
            job(
                "sweep_dbl.py",
                "--preset",
                "tiny",
                "--storage",
                str(readonly / "sweeps"),
                f"dataset.root={shared_dir / 'data'}",
            )
        ),
        shared_dir,
        env,
    )
    train, _ = run(
        as_unprivileged(
            job(
                "train.py",
                "-c",
                "vsepp_synthetic_tiny",
                f"output.dir={readonly / 'runs'}",
                f"dataset.root={shared_dir / 'data'}",
            )
        ),
        shared_dir,
        env,
    )
    for done, what in ((sweep, "--storage"), (train, "output.dir")):
        assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
        line = one_line_error(done)
        assert line.startswith(f"itrlab: error: {what}: cannot write in {readonly}"), line
        assert "Permission denied" in line
    assert not (shared_dir / "mlflow.db").exists()  # stopped before MLflow
    assert list(readonly.iterdir()) == []


@pytest.mark.e2e
def test_unwritable_mlflow_store_fails_with_one_line(shared_dir):
    readonly = shared_dir / "readonly"
    readonly.mkdir()
    readonly.chmod(0o555)
    uri = f"sqlite:///{readonly / 'mlflow.db'}"
    done, _ = run(
        as_unprivileged(
            job(
                "train.py",
                "-c",
                "vsepp_synthetic_tiny",
                f"output.dir={shared_dir / 'runs'}",
                f"dataset.root={shared_dir / 'data'}",
            )
        ),
        shared_dir,
        env_for(shared_dir, uri),
    )
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    line = one_line_error(done)
    assert f"MLflow tracking store {uri}" in line and "cannot write" in line, line
    assert not (shared_dir / "runs").exists()


# -- a trial larger than this machine (item 2) -----------------------------------------------------


@pytest.mark.e2e
def test_trial_asking_more_cpus_than_the_machine_has_is_refused_up_front(tmp_path):
    done, seconds = run(
        job(
            "sweep_dbl.py",
            "--preset",
            "tiny",
            "--cpus-per-trial",
            "100000",
            "--storage",
            "sweeps",
            f"dataset.root={tmp_path / 'data'}",
        ),
        tmp_path,
        env_for(tmp_path),
    )
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    line = one_line_error(done)
    assert "a trial asks for 100000 CPU(s)" in line and f"this machine has {os.cpu_count()}" in line, line
    assert seconds < 60
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "sweeps").exists()


# -- sweep keys (item 8) ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, fragment",
    [
        ({"objective": {"metric": "rsun", "mode": "max"}}, "'sweep.yaml: objective.metric': got 'rsun'"),
        ({"table": {"rows": ["cooperative.strategy"], "paper": "dbl_tabel4"}}, "did you mean 'dbl_table4'"),
        ({"table": {"rows": ["cooperative.strategi"]}}, "'table.rows': got 'cooperative.strategi'"),
        ({"table": {"rows": ["cooperative.strategy"], "columns": ["test_rsun"]}}, "did you mean 'test_rsum'"),
        (
            {"table": {"rows": ["cooperative.strategy"], "anchors": "flickr8"}},
            "'sweep.yaml: table.anchors': got 'flickr8'",
        ),
    ],
    ids=["objective.metric", "table.paper", "table.rows", "table.columns", "table.anchors"],
)
def test_sweep_keys_that_name_nothing_exit_2_before_ray(tmp_path, monkeypatch, capsys, fields, fragment):
    from itrlab.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    spec = {
        "name": "keys",
        "experiment": "dbl_synthetic_tiny",
        "overrides": [f"dataset.root={tmp_path / 'data'}"],
        "grid": {"cooperative.strategy": ["A", "F"]},
        "seeds": [0],
        **fields,
    }
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(spec))
    code = main(["sweep", "--sweep", str(tmp_path / "sweep.yaml"), "--storage", str(tmp_path / "sweeps")])
    err = capsys.readouterr().err
    assert code == 2 and fragment in err, err
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "sweeps").exists()
    assert "ray" not in sys.modules or not sys.modules["ray"].is_initialized()


# -- a new SQLite store, several commands at the same moment (item 12) -----------------------------

STORE_USER = """
import sys, time
from pathlib import Path
from itrlab.tracking import MlflowTracker, check_tracking_store
uri, barrier, me, count = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
(barrier / me).touch()  # imported: ready
while len(list(barrier.iterdir())) < count:
    time.sleep(0.002)
check_tracking_store(uri)  # what `jobs/train.py` and every sweep run first
print(MlflowTracker("same_sweep", uri).experiment_id)
"""


@pytest.mark.e2e
def test_new_sqlite_store_initialised_by_several_commands_at_once(tmp_path):
    """Three processes create the same new store and experiment at the same moment (each waits until
    all have imported MLflow): without the lock, all but one die on 'table ... already exists'."""
    uri, barrier, count = f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "barrier", 3
    barrier.mkdir()
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", STORE_USER, uri, str(barrier), str(i), str(count)],
            cwd=tmp_path,
            env=env_for(tmp_path),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(count)
    ]
    outputs = [process.communicate(timeout=120) for process in processes]
    assert [p.returncode for p in processes] == [0] * count, [err[-1500:] for _, err in outputs]
    assert len({out.strip() for out, _ in outputs}) == 1  # one experiment, found by all
    assert [e.name for e in MlflowClient(tracking_uri=uri).search_experiments()].count("same_sweep") == 1


# -- Ctrl-C during a training (item 6) -------------------------------------------------------------


def ctrl_c_reaches_it() -> None:
    """In the child before exec: SIGINT and SIGTERM delivered with their default actions, as to a program in a
    terminal's foreground. A child inherits an ignored SIGINT (a shell without job control starts background
    commands so) and a blocked one (Ray starts its processes with SIGINT blocked); with either, Python installs
    no KeyboardInterrupt handler or never runs it. Twice in the full suite under xdist a training sent Ctrl-C
    trained on for the whole minute (which of the two it inherited was not caught)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def signal_training(tmp_path: Path, signum: int) -> tuple[subprocess.Popen, str]:
    """A long tiny training in ``tmp_path`` sent ``signum`` once its first checkpoint exists; the
    process (ended) and its stderr."""
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
            ),
            cwd=tmp_path,
            env=env_for(tmp_path),
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=ctrl_c_reaches_it,
        )
    try:
        with training_held(process, log, 240):  # a checkpoint exists; the signal is delivered when it continues
            process.send_signal(signum)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    return process, err


def the_run(tmp_path: Path):
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("vsepp_synthetic_tiny").experiment_id])
    return run


@pytest.mark.e2e
def test_ctrl_c_during_training_ends_the_run_killed_with_one_line_and_130(tmp_path):
    process, err = signal_training(tmp_path, signal.SIGINT)
    assert process.returncode == 130, err[-3000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    assert lines[0].startswith("itrlab: interrupted (Ctrl-C), MLflow run KILLED; continue it with:"), lines[0]
    run = the_run(tmp_path)
    assert run.info.status == "KILLED" and run.data.tags["itrlab.stop_reason"] == "interrupted (Ctrl-C)"
