"""The CPU thread policy (itrlab.threads): the wait policy put in the environment unless the user chose
one, the thread count from Ray's reservation, train.threads, $OMP_NUM_THREADS or the CPUs available,
and the wait policy reaching the processes that train (a CLI run, a Ray worker). Timings belong to
``benchmarks/train.py --busy N``, not here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from itrlab import threads
from itrlab.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
POLICY_KEYS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS", threads.POLICY_ENV, "OMP_DISPLAY_ENV")


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any thread setting (conftest applies the policy to the tests)."""
    env = {key: value for key, value in os.environ.items() if key not in POLICY_KEYS}
    return {**env, **extra}


def test_wait_policy_is_set_where_the_user_set_none():
    env = {"PATH": "/bin"}
    assert threads.configure_env(env) == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert env["OMP_WAIT_POLICY"] == "PASSIVE"
    assert threads.configure_env(env) == {}  # already there: nothing more to set


@pytest.mark.parametrize(
    "user", [{"OMP_WAIT_POLICY": "ACTIVE"}, {"OMP_WAIT_POLICY": "passive"}, {"GOMP_SPINCOUNT": "10000"}]
)
def test_a_wait_policy_the_user_set_wins(user):
    env = dict(user)
    assert threads.configure_env(env) == {}
    assert env == user


@pytest.mark.parametrize("off", ["off", "OFF", "0", "false"])
def test_the_policy_can_be_switched_off(off):
    env = {threads.POLICY_ENV: off}
    assert threads.configure_env(env) == {} and "OMP_WAIT_POLICY" not in env
    assert not threads.enabled(env)
    assert threads.enabled({}) and threads.enabled({threads.POLICY_ENV: "on"})


def test_configure_env_records_what_it_set_for_ray_workers(monkeypatch):
    monkeypatch.setattr(threads, "_set_here", {})
    for key in POLICY_KEYS:
        monkeypatch.delenv(key, raising=False)
    assert threads.configure_env() == {"OMP_WAIT_POLICY": "PASSIVE"}  # os.environ (monkeypatch restores it)
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    assert threads.worker_env() == {"OMP_WAIT_POLICY": "PASSIVE"}
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # the user's own: a local Ray's workers inherit it
    assert threads.worker_env() == {}
    monkeypatch.setattr(threads, "_set_here", {})
    monkeypatch.delenv("OMP_WAIT_POLICY")
    assert threads.worker_env() == {"OMP_WAIT_POLICY": "PASSIVE"}  # what the policy would set, for a cluster's workers
    monkeypatch.setenv("GOMP_SPINCOUNT", "0")
    assert threads.worker_env() == {}


@pytest.mark.parametrize(
    "reserved, requested, expected",
    [
        (1.0, 0, (1, "Ray reservation")),
        (2.0, 0, (2, "Ray reservation")),
        (1.5, 0, (1, "Ray reservation")),  # rounded down, as Ray sets OMP_NUM_THREADS
        (0.5, 0, (1, "Ray reservation")),  # never below 1
        (4.0, 2, (2, "train.threads")),  # asking for fewer than reserved is honoured
        (2.0, 8, (2, "Ray reservation")),  # never more than reserved
    ],
)
def test_a_ray_worker_uses_its_reserved_cpus(reserved, requested, expected):
    env = {"OMP_NUM_THREADS": "7"}  # Ray's or the user's: the reservation decides inside Ray
    assert threads.thread_count(requested, env, reserved=reserved, cpus=16) == expected


def test_outside_ray_train_threads_then_omp_num_threads_then_the_available_cpus(monkeypatch):
    monkeypatch.setattr(threads, "ray_reserved_cpus", lambda: None)
    assert threads.thread_count(3, {"OMP_NUM_THREADS": "5"}, cpus=16) == (3, "train.threads")
    assert threads.thread_count(0, {"OMP_NUM_THREADS": "5"}, cpus=16) == (5, "OMP_NUM_THREADS")
    for unusable in ("", "0", "-2", "two", "4,2"):
        assert threads.thread_count(0, {"OMP_NUM_THREADS": unusable}, cpus=16) == (16, "available CPUs")
    assert threads.thread_count(0, {}, cpus=4) == (4, "available CPUs")
    for small in (1, 2):  # a passive second thread costs more than it adds on 2 CPUs (module doc)
        assert threads.thread_count(0, {}, cpus=small) == (1, f"{small} CPUs: one thread")
    with pytest.raises(ValueError, match=">= 0"):
        threads.thread_count(-1, {})


def test_available_cpus_follow_the_affinity_mask():
    cpus = threads.available_cpus()
    assert 1 <= cpus <= len(os.sched_getaffinity(0))
    assert threads.cpu_share(1) == cpus and threads.cpu_share(cpus * 4) == 1 and threads.cpu_share(0) == cpus


def write_cgroup(tmp_path: Path, proc_line: str, files: dict[str, str]) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    proc = tmp_path / "proc_cgroup"
    proc.write_text(proc_line)
    return root, proc


@pytest.mark.parametrize(
    "proc_line, files, quota",
    [
        ("0::/pod\n", {"pod/cpu.max": "150000 100000\n"}, 1.5),  # cgroup v2, the process's own group
        ("0::/\n", {"cpu.max": "max 100000\n"}, None),  # v2, no limit
        (
            "4:cpu,cpuacct:/docker/abc\n",
            {
                "cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "50000\n",
                "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n",
            },
            0.5,
        ),  # v1
        ("1:cpu:/\n", {"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None),  # v1, no limit
        ("0::/\n", {}, None),  # nothing readable
    ],
)
def test_a_cgroup_cpu_quota_is_read(tmp_path, proc_line, files, quota):
    root, proc = write_cgroup(tmp_path, proc_line, files)
    assert threads._cgroup_quota(root, proc) == quota


def test_a_cgroup_quota_caps_the_available_cpus(monkeypatch):
    monkeypatch.setattr(threads, "_cgroup_quota", lambda: 0.5)
    assert threads.available_cpus() == 1
    monkeypatch.setattr(threads, "_cgroup_quota", lambda: 1000.0)
    assert threads.available_cpus() == len(os.sched_getaffinity(0))


def test_no_ray_reservation_outside_a_ray_worker():
    assert threads.ray_reserved_cpus() is None  # no Ray, or the driver's process


def test_apply_sets_torch_threads_unless_switched_off(monkeypatch):
    import torch

    previous = torch.get_num_threads()
    monkeypatch.setattr(threads, "ray_reserved_cpus", lambda: None)
    try:
        monkeypatch.setenv("OMP_NUM_THREADS", "1")
        assert threads.apply(0) == 1 == torch.get_num_threads()
        assert threads.apply(2) == 2 == torch.get_num_threads()
        monkeypatch.setenv(threads.POLICY_ENV, "off")
        assert threads.apply(1) == 2  # left as it is
    finally:
        torch.set_num_threads(previous)


@pytest.mark.parametrize(
    "value, message",
    [("-1", "greater than or equal to 0"), ("true", "a number"), ("1.5", "valid integer"), ("many", "valid integer")],
)
def test_train_threads_is_validated(value, message):
    from itrlab.assembly import load_experiment

    assert load_experiment("vsepp_synthetic_tiny", ["train.threads=3"]).train.threads == 3
    assert load_experiment("vsepp_synthetic_tiny", []).train.threads == 0
    with pytest.raises(ConfigError, match=message) as caught:
        load_experiment("vsepp_synthetic_tiny", [f"train.threads={value}"])
    assert "train.threads" in str(caught.value)


def test_init_ray_gives_the_wait_policy_to_ray_workers(monkeypatch):
    """A sweep's Ray (local or a cluster) starts its workers with the policy's variables."""
    import ray
    from ray._private import ray_constants

    from itrlab.sweep import cluster

    seen = {}
    monkeypatch.setattr(threads, "_set_here", {"OMP_WAIT_POLICY": "PASSIVE"})
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "1")  # restored after loopback_options sets it
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", ray_constants.ENABLE_RAY_CLUSTER)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: seen.update(kwargs))
    assert cluster.init_ray("sqlite:///unused.db") is True
    assert seen["runtime_env"]["env_vars"]["OMP_WAIT_POLICY"] == "PASSIVE"


@pytest.mark.e2e
def test_the_cli_sets_the_wait_policy_before_torch_loads_openmp():
    """``itrlab`` / ``jobs/train.py`` import itrlab.cli first: libgomp then spins 0 (its own report,
    OMP_DISPLAY_ENV), and a user's own setting is kept."""
    code = "import itrlab.cli, os, torch; torch.ones(4, 4) @ torch.ones(4, 4); print(os.environ['OMP_WAIT_POLICY'])"
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=clean_env(OMP_DISPLAY_ENV="VERBOSE"),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert result.stdout.strip() == "PASSIVE"
    assert "GOMP_SPINCOUNT = '0'" in result.stderr  # libgomp read it when torch loaded it
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=clean_env(OMP_DISPLAY_ENV="VERBOSE", OMP_WAIT_POLICY="ACTIVE"),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert result.stdout.strip() == "ACTIVE" and "GOMP_SPINCOUNT = '0'" not in result.stderr


RAY_TRIAL = """
import json, sys
import itrlab.cli  # as `itrlab sweep` and jobs/sweep.py start: the policy is in the environment
import ray
from itrlab.sweep.cluster import init_ray

@ray.remote(num_cpus=1)
class Trial:  # a Tune trial is an actor holding the trial's CPUs
    def report(self):
        import os
        from itrlab import threads
        import torch
        import psutil
        start_env = psutil.Process().environ()  # the worker's environment at exec
        return {"wait_at_start": [f"{key}={start_env[key]}" for key in ("OMP_WAIT_POLICY",) if key in start_env],
                "threads": threads.apply(0), "source": threads.thread_count(0)[1],
                "reserved": threads.ray_reserved_cpus()}

init_ray(sys.argv[1])
try:
    print("REPORT " + json.dumps(ray.get(Trial.remote().report.remote(), timeout=120)), flush=True)
finally:
    ray.shutdown()
"""


@pytest.mark.e2e
def test_the_wait_policy_and_thread_count_reach_a_ray_trial(tmp_path):
    """A trial's worker process, started by the sweep's Ray, has the wait policy in its environment from
    its start (before it loads torch), and trains with the one CPU it reserved on this 2+ CPU machine."""
    if threads.available_cpus() < 2:
        pytest.skip("needs 2 CPUs to tell the reservation from the machine")
    result = subprocess.run(
        [sys.executable, "-c", RAY_TRIAL, f"sqlite:///{tmp_path / 'mlflow.db'}"],
        env=clean_env(),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    reports = [line for line in result.stdout.splitlines() if line.startswith("REPORT ")]
    assert result.returncode == 0 and reports, result.stdout[-2000:] + result.stderr[-3000:]
    report = json.loads(reports[-1].removeprefix("REPORT "))
    assert report["wait_at_start"] == ["OMP_WAIT_POLICY=PASSIVE"]
    assert report["reserved"] == 1.0 and report["source"] == "Ray reservation" and report["threads"] == 1
