"""SIGTERM, what Kubernetes, systemd and ``timeout`` send, ends a training as Ctrl-C does: one line, exit 143,
its MLflow run ended (KILLED, the reason in ``itrlab.stop_reason``), and the checkpoint kept for ``--resume``.
SIGTERM to a sweep's driver: tests/test_faults_resume_sweep.py, whose sweep it stops."""

from __future__ import annotations

import signal

import pytest

from test_faults_cli import signal_training, the_run

pytestmark = pytest.mark.e2e  # a training in a process of its own


def test_sigterm_during_training_ends_the_run_killed_with_one_line_and_143(tmp_path):
    process, err = signal_training(tmp_path, signal.SIGTERM)
    assert process.returncode == 143, err[-3000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("itrlab: terminated (SIGTERM), MLflow run KILLED; continue it with:")
    run = the_run(tmp_path)
    assert run.info.status == "KILLED" and run.data.tags["itrlab.stop_reason"] == "terminated (SIGTERM)"
    assert (tmp_path / "run" / "last.pt").is_file()
