"""The sweep job interrupted with Ctrl-C (a real SIGINT), then resumed while a second --resume of it is
refused, that resume killed outright (SIGKILL) and the sweep resumed again; the local Ray it
starts listens on loopback only, each trial's MLflow run points at the folder that holds its checkpoints,
and the console shows progress lines, the pivot and the --resume hint without Ray's noise
(itrlab.sweep.console)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

from held import board_notes, notes_since, training, training_alone, trials_held
from itrlab.sweep import console
from itrlab.tracking.chart_names import chart_name
from test_sweep_jobs import job_env, start_driver, sweep_command, sweep_runs


def one_ended_one_training(notes: dict[str, dict]) -> bool:
    """Two trials on the board: one ended (its last note: testing, after which it ends its run), one training."""
    return sorted(training(note) for note in notes.values()) == [False, True] and any(
        note.get("phase") == "testing" for note in notes.values()
    )


pytestmark = pytest.mark.e2e
LOOPBACK = ("127.0.0.1", "[::ffff:127.0.0.1]", "[::1]", "localhost")
# what the console shows only with -v: Ray's repeated warnings, checkpoint lines, status tables, the
# Tuner.restore hint, MLflow's progress bars
NOISE = (
    "snapshotting",
    "Tuner.restore",
    "Checkpoint successfully created",
    "Trial status:",
    "Configuration for experiment",
    "Uploading artifacts",
    "Downloading artifacts",
    "it/s]",
)


def listening_sockets(session: int) -> list[str]:
    """'address:port (process)' of every TCP socket listened on by a process of ``session``."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, timeout=30).stdout
    found = []
    for line in out.splitlines():
        for pid in re.findall(r"pid=(\d+)", line):
            try:
                if os.getsid(int(pid)) == session:
                    found.append(f"{line.split()[3]} ({line[line.find('users:') :][:50]})")
            except OSError:
                continue
    return found


def parent_table(tmp_path: Path, run_id: str, name: str) -> dict:
    """A table artifact of the parent run, as MLflow stored it (pandas' split layout)."""
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    target = tmp_path / "download" / name.replace("/", "_")
    target.mkdir(parents=True, exist_ok=True)
    path = client.download_artifacts(run_id, name, str(target))
    data = json.loads(Path(path).read_text())
    return {column: [row[i] for row in data["data"]] for i, column in enumerate(data["columns"])}


def test_ctrl_c_kills_the_sweep_then_resume_completes_it_once(tmp_path):
    """Ctrl-C once the first of three trials ended (the second running): exit 130, runs KILLED, the trials
    table and the console's interrupted line; then two --resume at once: one is refused, the other goes on,
    its console counting the restored trial, until it is killed outright (SIGKILL to it and the Ray it
    started) once the second trial finished; a last --resume finishes the sweep, quiet (no Ray noise) with
    the pivot, and no trial that had finished is trained again."""
    command = sweep_command(
        tmp_path,
        {
            "name": "sigint_sweep",
            "experiment": "dbl_synthetic_tiny",
            "overrides": [f"dataset.root={tmp_path / 'data'}", "train.epochs=2"],
            "grid": {"cooperative.strategy": ["A", "F", "G"]},
            "seeds": [0],
            "resources": {"cpu": 1},
            "table": {"rows": ["cooperative.strategy"], "paper": "dbl_table4"},
        },
    )
    env = job_env(tmp_path) | {console.PROGRESS_ENV: "0.3"}  # a progress line every 0.3 s
    log_path = tmp_path / "first.log"
    driver = start_driver(command, tmp_path, log_path, env)
    try:
        # the second trial held while it trains, the first one ended (its last note: testing)
        with trials_held(driver, lambda: one_ended_one_training(board_notes(tmp_path / "sweeps")), log=log_path):
            if shutil.which("ss"):  # the Ray this sweep started listens on loopback only
                sockets = listening_sockets(driver.pid)
                assert sockets and all(s.startswith(LOOPBACK) for s in sockets), sockets
            driver.send_signal(signal.SIGINT)  # Ctrl-C, to the driver only
            assert driver.wait(timeout=180) == 130, log_path.read_text()[-4000:]  # Tune ends the held trial
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    first = log_path.read_text()
    assert first.rstrip().splitlines()[-1].startswith("itrlab: sweep interrupted (Ctrl-C); 1 of 3 trials")
    assert "--resume continues it" in first, first[-4000:]
    assert re.search(r"^1/3 trials done · 0 running · 0 failed · 1 interrupted · took ", first, re.M), first[-4000:]
    (parent,), children = sweep_runs(tmp_path, "sigint_sweep")
    assert parent.info.status == "KILLED"
    status = {c.data.tags["param.cooperative.strategy"]: c.info.status for c in children}
    assert status == {"A": "FINISHED", "F": "KILLED"}, status  # none left RUNNING
    killed = next(c for c in children if c.info.status == "KILLED")
    assert "interrupted" in killed.data.tags["itrlab.stop_reason"]
    table = parent_table(tmp_path, parent.info.run_id, "sweep/trials.json")
    assert sorted(zip(table["cooperative/strategy"], table["status"])) == [
        ("A", "finished"),
        ("F", "interrupted"),
        ("G", "not started"),
    ]

    # two --resume of the sweep at the same moment: one continues it, the other is refused at once
    logs = [tmp_path / "resume1.log", tmp_path / "resume2.log"]
    began = time.time()
    drivers = [start_driver([*command, "--resume"], tmp_path, log, env) for log in logs]
    try:
        deadline = time.monotonic() + 120
        while all(driver.poll() is None for driver in drivers):
            assert time.monotonic() < deadline, "neither --resume was refused"
            time.sleep(0.2)
        refused_at = next(i for i, driver in enumerate(drivers) if driver.poll() is not None)
        assert drivers[refused_at].returncode == 2, [log.read_text()[-3000:] for log in logs]
        refused = logs[refused_at].read_text().strip().splitlines()
        assert len(refused) == 1 and refused[0].startswith("itrlab: error: sweep 'sigint_sweep'"), refused
        assert "in use by another process" in refused[0]
        resumed, resumed_log = drivers[1 - refused_at], logs[1 - refused_at]

        # the resumed driver killed outright (it and its Ray) once F finished and G runs, G held meanwhile
        with trials_held(
            resumed, lambda: one_ended_one_training(notes_since(tmp_path / "sweeps", began)), log=resumed_log
        ):
            os.killpg(resumed.pid, signal.SIGKILL)
            resumed.wait()
    finally:
        for driver in drivers:
            if driver.poll() is None:
                os.killpg(driver.pid, signal.SIGKILL)
    second = resumed_log.read_text()
    counts = re.findall(r"^(\d)/3 trials done · \d running.* · 0 failed · ETA ", second, re.M)
    assert "1" in counts and set(counts) <= {"1", "2"}, second[-4000:]  # the restored trial counts
    _, before = sweep_runs(tmp_path, "sigint_sweep")
    finished_before = [c for c in before if c.info.status == "FINISHED"]
    assert sorted(c.data.tags["param.cooperative.strategy"] for c in finished_before) == ["A", "F"]
    # G, interrupted: RUNNING, or KILLED by the driver's watchdog (itrlab.tracking.watchdog)
    finished_ids = {c.info.run_id for c in finished_before}
    assert {c.info.status for c in before if c.info.run_id not in finished_ids} <= {"RUNNING", "KILLED"}

    last = subprocess.run([*command, "--resume"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    assert last.returncode == 0, last.stdout[-3000:] + last.stderr[-3000:]
    third = last.stdout + last.stderr
    lines = re.findall(r"^(\d)/3 trials done · \d running.* · 0 failed · (ETA|took) ", third, re.M)
    # from 1 or 2 done: the killed driver's last snapshot of Tune's state may predate F's end (F then
    # restores its last epoch's checkpoint and trains nothing)
    assert lines and lines[-1] == ("3", "took") and all(count in "123" for count, _ in lines), third[-4000:]
    for noise in NOISE:
        assert noise not in first + second + third, noise
    assert "sigint_sweep: test results over seeds" in third and "sigint_sweep: trials ranked by" in third  # the pivot

    (parent,), children = sweep_runs(tmp_path, "sigint_sweep")
    assert len({c.data.tags["itrlab.trial_id"] for c in children}) == 3
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    for run in finished_before:  # a finished trial is not trained again: no epoch logged after its end
        steps = [m.step for m in client.get_metric_history(run.info.run_id, chart_name("rsum"))]
        strategy = run.data.tags["param.cooperative.strategy"]
        # A ended before any interruption: each epoch once. F was stopped by Ctrl-C, which may land between
        # an epoch's MLflow metrics and its checkpoint: that epoch is trained, and logged, again
        assert (steps == [1, 2]) if strategy == "A" else (steps[-1] == 2 and steps.count(2) == 1), (strategy, steps)
    assert parent.info.status == "FINISHED" and "itrlab.stop_reason" not in parent.data.tags
    assert sorted(c.data.tags["param.cooperative.strategy"] for c in children) == ["A", "F", "G"]
    assert {c.info.status for c in children} == {"FINISHED"}
    assert not [c for c in children if "itrlab.stop_reason" in c.data.tags]  # F's reason went with its restart
    (sweep_dir,) = (tmp_path / "sweeps" / "sigint_sweep").iterdir()
    for child in children:  # run_dir: the trial's folder in the sweep's storage, with its saved epoch and its end
        run_dir = Path(child.data.tags["run_dir"])
        assert run_dir == sweep_dir / "trials" / child.data.tags["itrlab.trial_id"], run_dir
        assert list(run_dir.glob("epoch_*/last.pt")) and (run_dir / "final.json").is_file(), run_dir

    def check_tables(run_id: str) -> None:  # rewritten whole: one row per trial, ids kept as strings
        trials = parent_table(tmp_path, run_id, "sweep/trials.json")
        ids = {c.data.tags["itrlab.trial_id"] for c in children}
        assert sorted(trials["trial"]) == sorted(ids) and all(isinstance(t, str) for t in trials["trial"])
        assert trials["status"] == ["finished"] * 3
        assert [int(epoch) for epoch in trials["epoch"]] == [2, 2, 2]  # a trial restored at its end too
        grid = parent_table(tmp_path, run_id, "sweep/table.json")
        assert sorted(grid["cooperative/strategy"]) == ["A", "F", "G"] and grid["seeds"] == [1, 1, 1]

    check_tables(parent.info.run_id)  # --resume of a finished sweep: tests/test_faults_sweep.py


def test_storage_that_breaks_mid_sweep_fails_the_sweep_with_one_line(tmp_path):
    """The sweep's storage stops taking writes after the first checkpoint (its trials' folder replaced by a
    file, which no user, root included, can write into): the sweep exits 1 with one line, every run FAILED."""
    command = sweep_command(
        tmp_path,
        {
            "name": "broken_storage",
            "experiment": "dbl_synthetic_tiny",
            "overrides": [f"dataset.root={tmp_path / 'data'}", "train.epochs=3"],
            "grid": {"cooperative.strategy": ["A"]},
            "seeds": [0],
            "resources": {"cpu": 1},
        },
    )
    log_path = tmp_path / "broken.log"
    driver = start_driver(command, tmp_path, log_path)
    try:

        def first_checkpoint_stored() -> bool:
            return training_alone(tmp_path / "sweeps") and any(
                (tmp_path / "sweeps").glob("broken_storage/*/trials/*/epoch_*")
            )

        with trials_held(driver, first_checkpoint_stored, log=log_path):  # it cannot end before the storage breaks
            (trials_dir,) = (tmp_path / "sweeps" / "broken_storage").glob("*/trials")
            trials_dir.rename(trials_dir.with_name("trials.moved"))
            trials_dir.write_text("not a folder any more")
        assert driver.wait(timeout=300) == 1, log_path.read_text()[-4000:]
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    last = log_path.read_text().rstrip().splitlines()[-1]
    assert last.startswith("itrlab: run failed: the sweep's storage can no longer be written: the checkpoint of"), last
    assert "cannot be stored in the sweep's storage: Not a directory" in last, last
    (parent,), children = sweep_runs(tmp_path, "broken_storage")
    assert parent.info.status == "FAILED" and "can no longer be written" in parent.data.tags["itrlab.stop_reason"]
    assert children and {c.info.status for c in children} == {"FAILED"}  # none RUNNING, none "stopped"
    assert all(c.data.tags.get("itrlab.stop_reason") for c in children)


def test_an_optuna_search_interrupted_and_resumed_runs_each_configuration_once(tmp_path):
    """An Optuna search of three configurations, one at a time, stopped with Ctrl-C once the first ended and the
    second trains; --resume continues the study from Optuna's storage in the sweep's folder: the configuration
    cut short is asked for again and continues from its saved epoch, the first is not trained again, and the
    search ends at three configurations, each with one finished run."""
    import optuna

    command = sweep_command(
        tmp_path,
        {
            "name": "optuna_resume",
            "experiment": "dbl_synthetic_tiny",
            "overrides": [f"dataset.root={tmp_path / 'data'}", "train.epochs=2"],
            "grid": {},
            "seeds": [0],
            "resources": {"cpu": 1},
            "concurrency": 1,
            "optuna": {
                "space": {"cooperative.gamma": {"type": "uniform", "low": 0.1, "high": 0.3}},
                "num_trials": 3,
                "seed": 0,
            },
        },
    )
    env = job_env(tmp_path)
    log_path = tmp_path / "first.log"
    driver = start_driver(command, tmp_path, log_path, env)
    try:
        with trials_held(driver, lambda: one_ended_one_training(board_notes(tmp_path / "sweeps")), log=log_path):
            driver.send_signal(signal.SIGINT)
            assert driver.wait(timeout=180) == 130, log_path.read_text()[-4000:]
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    (sweep_dir,) = (tmp_path / "sweeps" / "optuna_resume").iterdir()
    storage = f"sqlite:///{sweep_dir / 'optuna.db'}"
    states = sorted(t.state.name for t in optuna.load_study(study_name="optuna_resume", storage=storage).trials)
    assert states == ["COMPLETE", "RUNNING"], states
    _, before = sweep_runs(tmp_path, "optuna_resume")
    first = next(c for c in before if c.info.status == "FINISHED")

    last = subprocess.run([*command, "--resume"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert last.returncode == 0, last.stdout[-3000:] + last.stderr[-3000:]
    study = optuna.load_study(study_name="optuna_resume", storage=storage)
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    assert len(complete) == 3 and [t.state.name for t in study.trials].count("FAIL") == 1  # the one cut short
    (parent,), children = sweep_runs(tmp_path, "optuna_resume")
    assert parent.info.status == "FINISHED" and {c.info.status for c in children} == {"FINISHED"}
    gammas = sorted(round(float(c.data.params["cooperative.gamma"]), 9) for c in children)
    assert len(children) == 3 and gammas == sorted(round(t.params["cooperative.gamma"], 9) for t in complete)
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    steps = [m.step for m in client.get_metric_history(first.info.run_id, chart_name("rsum"))]
    assert steps == [1, 2]  # the configuration that had ended is not trained again
    trials = parent_table(tmp_path, parent.info.run_id, "sweep/trials.json")
    assert sorted(trials["status"]) == ["finished"] * 3  # the earlier invocation's configuration among them
