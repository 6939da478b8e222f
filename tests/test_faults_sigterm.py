"""SIGTERM, what Kubernetes, systemd and ``timeout`` send, ends a training and a sweep as Ctrl-C does:
one line, exit 143, every MLflow run ended (KILLED, the reason in ``itrlab.stop_reason``), none left
RUNNING, and the checkpoint kept for ``--resume`` (issue #23)."""

from __future__ import annotations

import os
import signal

import pytest

from held import training_alone, trials_held
from test_faults_cli import signal_training, the_run
from test_sweep_jobs import start_driver, sweep_command, sweep_runs

pytestmark = pytest.mark.e2e  # a training and a sweep driver in processes of their own


def test_sigterm_during_training_ends_the_run_killed_with_one_line_and_143(tmp_path):
    process, err = signal_training(tmp_path, signal.SIGTERM)
    assert process.returncode == 143, err[-3000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("itrlab: terminated (SIGTERM), MLflow run KILLED; continue it with:")
    run = the_run(tmp_path)
    assert run.info.status == "KILLED" and run.data.tags["itrlab.stop_reason"] == "terminated (SIGTERM)"
    assert (tmp_path / "run" / "last.pt").is_file()


def test_sigterm_to_the_sweep_driver_ends_it_like_ctrl_c(tmp_path):
    command = sweep_command(
        tmp_path,
        {
            "name": "sigterm_sweep",
            "experiment": "dbl_synthetic_tiny",
            "overrides": [f"dataset.root={tmp_path / 'data'}", "train.epochs=30"],
            "grid": {"cooperative.strategy": ["A", "F"]},
            "seeds": [0],
            "resources": {"cpu": 1},
        },
    )
    log_path = tmp_path / "driver.log"
    driver = start_driver(command, tmp_path, log_path)
    try:
        # a trial held while it trains: the signal comes before the sweep could end, however fast it is
        with trials_held(driver, lambda: training_alone(tmp_path / "sweeps"), log=log_path):
            driver.send_signal(signal.SIGTERM)  # to the driver only, as a pod's container runtime does
            assert driver.wait(timeout=180) == 143, log_path.read_text()[-4000:]  # Tune ends the held trial
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    text = log_path.read_text()
    assert text.rstrip().splitlines()[-1].startswith("itrlab: sweep terminated (SIGTERM);"), text[-3000:]
    assert "SIGTERM received" not in text and "Traceback" not in text, text[-3000:]
    (parent,), children = sweep_runs(tmp_path, "sigterm_sweep")
    assert parent.info.status == "KILLED" and "SIGTERM" in parent.data.tags["itrlab.stop_reason"]
    assert children and all(c.info.status in ("FINISHED", "KILLED") for c in children), [
        (c.info.status, c.data.tags.get("itrlab.stop_reason")) for c in children
    ]
