"""Commands answer before they import what they do not need: a misspelt preset, ``--help``, a bad flag of
``--list``, a config error in an override and a bad setting of a loss or a scheme (typed by their declared
settings) print their line without importing torch, Ray or MLflow (:mod:`itrlab.lazy`), and ``--dry-run``
imports torch (the method registry composes every trial) but neither Ray nor MLflow; checking a config
builds no module. Counted in modules, not seconds: each command runs in a fresh interpreter,
which reports the modules it imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

pytestmark = pytest.mark.e2e  # a fresh interpreter per test: its imported modules counted

HEAVY = ("torch", "ray", "mlflow")
# a bad preset imports ~360 modules here (Python's own, yaml, pydantic, numpy for make-synthetic's
# arguments), ~4,200 before (torch, Ray, MLflow, matplotlib, pandas): a budget between the two
MODULE_BUDGET = 700

RUN = """
import json, runpy, sys
sys.argv = [sys.argv[1], *sys.argv[3:]]
sys.path.insert(0, __import__("os").path.dirname(sys.argv[0]))  # as `python JOB` does
code = 0
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
except SystemExit as stop:
    code = stop.code
with open(__import__("os").environ["ITRLAB_MODULES_OUT"], "w") as out:
    json.dump({"code": code, "modules": sorted(sys.modules)}, out)
"""


def imports_of(tmp_path, job: str, *args: str) -> tuple[int, set[str], str, str]:
    """Run ``jobs/<job> args`` in a fresh interpreter: its exit status, the top-level packages it
    imported, its stdout and its stderr."""
    out = tmp_path / "modules.json"
    env = {
        **os.environ,
        "ITRLAB_MODULES_OUT": str(out),
        "PYTHONPATH": str(REPO / "platform"),
        "ITRLAB_CONFIG_DIR": str(REPO / "configs"),
    }
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(REPO / "jobs" / job), "--", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    record = json.loads(out.read_text())
    return record["code"], set(record["modules"]), done.stdout, done.stderr


@pytest.mark.parametrize(
    "args, status",
    [
        (["--preset", "dbl-smok"], 2),
        (["--help"], 0),
        (["--list", "--concurrency", "2"], 2),
        (["--preset", "tiny", "train.epohcs=2"], 2),
        (
            ["--preset", "dbl-fig4-alpha", "--dry-run", "cooperative.gamma=-1"],
            2,
        ),  # a scheme's setting, typed without torch
        (["--preset", "dbl-table4", "--dry-run", "loss.margin=-1"], 2),  # a loss's setting, typed without torch
    ],
)
def test_errors_and_help_answer_without_torch_ray_or_mlflow(tmp_path, args, status):
    code, modules, stdout, stderr = imports_of(tmp_path, "sweep.py", *args)
    assert code == status, stderr
    if "cooperative.gamma=-1" in args:
        assert (
            "config error at 'cooperative.gamma': got -1; must be a finite number >= 0 (the boosting margin γ)"
            in stderr
        )
    if status == 2:
        assert len(stderr.strip().splitlines()) == 1 and stderr.startswith("itrlab"), stderr
    assert not {m.split(".")[0] for m in modules} & set(HEAVY), sorted(set(HEAVY) & {m.split(".")[0] for m in modules})
    assert len(modules) < MODULE_BUDGET, f"{len(modules)} modules imported"


def test_checking_a_config_builds_no_module(tmp_path):
    """A config check types every section (the loss's and a scheme's settings included) and builds nothing:
    the losses are built once, by the run that trains them."""
    code = (
        "import gc, sys\nfrom itrlab.assembly import load_experiment\nimport torch\n"
        "load_experiment('dbl_synthetic_tiny', ['cooperative.strategy=I'])\n"
        "print(sum(isinstance(o, torch.nn.Module) for o in gc.get_objects()),\n"
        "      'itrlab.methods.dbl.boosting' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO / "platform"), "ITRLAB_CONFIG_DIR": str(REPO / "configs")},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["0", "False"]


def test_the_bad_preset_names_the_nearest_one(tmp_path):
    code, _, _, stderr = imports_of(tmp_path, "sweep_dbl.py", "--preset", "dbl-smok")
    assert code == 2 and "did you mean 'dbl-smoke'?" in stderr


def test_a_dry_run_imports_torch_for_the_method_registry_but_not_ray_or_mlflow(tmp_path):
    code, modules, stdout, stderr = imports_of(tmp_path, "sweep.py", "--preset", "tiny", "--dry-run")
    assert code == 0, stderr
    assert "torch" in modules and not {m.split(".")[0] for m in modules} & {"ray", "mlflow"}
    assert "ray job submit" in stdout


def test_the_quiet_sweeps_worker_hook_imports_neither_torch_nor_tune(tmp_path, monkeypatch):
    """Ray runs a quiet sweep's ``worker_process_setup_hook`` in every worker process of its job, Ray Train's
    controller and helper actors included: loading it (as Ray does, by its dotted name) costs them no
    torch, Ray Tune or MLflow import (itrlab.sweep.quiet_workers)."""
    from itrlab.sweep import cluster, console

    monkeypatch.delenv("RAY_JOB_CONFIG_JSON_ENV_VAR", raising=False)
    monkeypatch.setenv(console.VERBOSE_ENV, "0")
    hook = cluster.console_runtime_env({})["worker_process_setup_hook"]
    module, _, name = hook.rpartition(".")
    code = (
        "import importlib, json, logging, sys\nimport ray\n"  # a Ray worker has Ray loaded
        f"getattr(importlib.import_module({module!r}), {name!r})()\n"
        "print(json.dumps([sorted(sys.modules), logging.getLogger('ray.train').level]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO / "platform")},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    modules, level = json.loads(done.stdout.splitlines()[-1])
    assert not {m.split(".")[0] for m in modules} & {"torch", "mlflow"} and "ray.tune" not in modules
    assert level == 30  # WARNING: Train's per-epoch INFO lines off


@pytest.mark.parametrize(
    "job, args",
    [
        ("train.py", ["-c", "vsepp_synthetic_tiny", "train.epoch=3"]),  # an override's typo
        ("train.py", ["-c", "vsepp_flickr8k", "dataset.root=data/not-here"]),  # a data folder that is not there
    ],
)
def test_a_trainings_bad_input_answers_before_torch(tmp_path, job, args):
    code, modules, _, stderr = imports_of(tmp_path, job, *args)
    assert code == 2 and len(stderr.strip().splitlines()) == 1 and stderr.startswith("itrlab"), stderr
    assert not {m.split(".")[0] for m in modules} & set(HEAVY), stderr


@pytest.mark.parametrize("command", ["evaluate", "retrieve", "gallery", "report"])
def test_a_run_the_store_does_not_hold_is_one_line_before_torch_or_mlflow(tmp_path, command):
    """The store is a real MLflow SQLite store holding one run; the command names another."""
    import mlflow

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow.MlflowClient(store)
    client.create_run(client.create_experiment("e"))
    missing = "0123456789abcdef0123456789abcdef"
    entry = tmp_path / "itrlab_entry.py"
    entry.write_text("import sys\nfrom itrlab.cli import main\nsys.exit(main())\n")
    args = {
        "evaluate": ["evaluate", f"runs:/{missing}/model"],
        "retrieve": ["retrieve", missing, "--caption", "a dog"],
        "gallery": ["gallery", f"runs:/{missing}/model", "--out", str(tmp_path / "g.html")],
        "report": ["report", missing],
    }[command]
    code, modules, _, stderr = imports_of(tmp_path, str(entry), *args, "--tracking-uri", store)
    assert code == 2 and len(stderr.strip().splitlines()) == 1, stderr
    assert f"holds no run {missing}" in stderr or f"no MLflow run {missing}" in stderr, stderr
    assert not {m.split(".")[0] for m in modules} & set(HEAVY), stderr
