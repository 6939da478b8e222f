"""Storage that fails under a running sweep (issue #23), on a real file system: a tmpfs mounted by the
test and turned read-only mid-sweep. The sweep stops with one line and exit 1, every MLflow run ends
with a status and a reason, none RUNNING. Skipped where the test cannot mount (not root)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from test_sweep_jobs import start_driver, sweep_command, sweep_runs, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def tmpfs(tmp_path):
    mount = tmp_path / "store"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "itrlab-test", str(mount)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.strip() or result.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_storage_turned_read_only_mid_sweep_stops_it_with_one_line(tmp_path, tmpfs):
    command = sweep_command(tmp_path, {
        "name": "ro_sweep", "experiment": "dbl_synthetic_tiny",
        "overrides": [f"dataset.root={tmp_path / 'data'}", "train.epochs=40"],
        "grid": {"cooperative.strategy": ["A", "F"]}, "seeds": [0], "resources": {"cpu": 1}})
    command[command.index("--storage") + 1] = str(tmpfs / "sweeps")
    log_path = tmp_path / "driver.log"
    driver = start_driver(command, tmp_path, log_path)
    try:
        def first_epoch_reported() -> bool:
            _, children = sweep_runs(tmp_path, "ro_sweep", polling=True)
            return any(list((tmpfs / "sweeps").rglob("last.pt"))) and bool(children)

        wait_for(first_epoch_reported, driver, log_path, "the first checkpoint", every=0.3)
        subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
        code = driver.wait(timeout=240)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    text = log_path.read_text()
    assert code == 1, text[-4000:]
    last = text.rstrip().splitlines()[-1]
    assert last.startswith("itrlab: run failed: the sweep's storage can no longer be written"), text[-4000:]
    assert "Traceback" not in text, text[-6000:]
    (parent,), children = sweep_runs(tmp_path, "ro_sweep")
    assert parent.info.status == "FAILED" and "storage" in parent.data.tags["itrlab.stop_reason"]
    assert children and all(c.info.status != "RUNNING" for c in children)
    assert all("itrlab.stop_reason" in c.data.tags for c in children if c.info.status != "FINISHED")
    assert len(children) <= 2  # the next trial did not start on storage that cannot be written


def test_extraction_to_a_read_only_folder_is_one_line_before_the_model_loads(tmp_path, tmpfs):
    import json
    import sys

    from conftest import REPO

    images = tmp_path / "images"
    images.mkdir()
    captions = tmp_path / "captions.json"
    captions.write_text(json.dumps({"images": [], "annotations": []}))
    subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)], check=True)
    result = subprocess.run([sys.executable, str(REPO / "jobs" / "extract_features.py"), "--images", str(images),
                             "--captions", str(captions), "--out", str(tmpfs / "out"), "--split-fractions", "0.6,0.2,0.2"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--out" in lines[0] and "Read-only file system" in lines[0], result.stderr
