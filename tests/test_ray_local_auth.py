"""The Ray a sweep starts on this machine keeps Ray's token authentication but not its notice (without
that, a sweep opens with "Token authentication is enabled for this Ray cluster ..."); joining a cluster is
left as Ray does it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

START = """
import sys
import ray
from ray._raylet import AuthenticationMode, get_authentication_mode
from itrlab.sweep.cluster import init_ray

assert init_ray("sqlite:///" + sys.argv[1], dashboard=False)
print("token authentication:", get_authentication_mode() == AuthenticationMode.TOKEN, flush=True)
ray.shutdown()
"""


@pytest.mark.e2e  # starts a local Ray
def test_a_local_ray_starts_with_token_authentication_and_without_its_notice(tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith("RAY_")}
    env |= {"HOME": str(tmp_path), "PYTHONPATH": str(REPO / "platform"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", START, str(tmp_path / "mlflow.db")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "token authentication: True" in done.stdout  # still on: Ray's default for a new local cluster
    assert (Path(tmp_path) / ".ray" / "auth_token").is_file()
    assert "Token authentication is enabled" not in done.stdout + done.stderr, done.stderr
