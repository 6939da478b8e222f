"""Resuming from what a run directory holds, when it holds something else: a refused
checkpoint or record is one line and exit 2, before the MLflow run is reopened, so a FINISHED run
stays FINISHED; the run's config.yaml is left as it was."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from mlflow import MlflowClient

from test_faults_cli import env_for, job

pytestmark = pytest.mark.e2e  # trainings in subprocesses, as users run them


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A one-epoch tiny run, FINISHED in its own SQLite store."""
    root = tmp_path_factory.mktemp("finished")
    result = subprocess.run(
        job(
            "train.py",
            "-c",
            "vsepp_synthetic_tiny",
            "train.epochs=1",
            f"dataset.root={root / 'data'}",
            "--run-dir",
            str(root / "run"),
        ),
        cwd=root,
        env=env_for(root),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return root


def resume(root, capsys, *overrides) -> tuple[int, str]:
    """``jobs/train.py --resume`` of the run in ``root``, in this process (a refusal happens before any
    training, so no subprocess is needed to see it): its exit status and what it wrote to stderr."""
    from itrlab.cli import main

    capsys.readouterr()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(root)
        patch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'mlflow.db'}")
        code = main(["train", "--resume", "--run-dir", str(root / "run"), "train.epochs=2", *overrides])
    return code, capsys.readouterr().err


def refused_line(code: int, err: str) -> str:
    """The one line a refused :func:`resume` wrote: exit 2, one line on stderr (no traceback)."""
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err[-3000:]
    return err.strip()


def run_status(root) -> str:
    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("vsepp_synthetic_tiny").experiment_id])
    return run.info.status


def truncate_last(run):
    (run / "last.pt").write_bytes((run / "last.pt").read_bytes()[:1000])


def symlink_last_to_config(run):
    (run / "last.pt").unlink()
    (run / "last.pt").symlink_to(run / "config.yaml")


def garbage_record(run):
    (run / "mlflow_run.json").write_text("{not json")


def unknown_record(run):
    (run / "mlflow_run.json").write_text('{"run_id": "0123456789abcdef0123456789abcdef"}')


CASES = [
    (truncate_last, (), "is not an itrlab checkpoint"),
    (symlink_last_to_config, (), "is not an itrlab checkpoint"),
    (lambda run: None, ("--allow-changes", "model.embed_dim=64"), "does not fit this config"),
    (garbage_record, (), "not valid JSON"),
    (unknown_record, (), "is not in the tracking store"),
]


@pytest.mark.parametrize(
    "damage, overrides, message",
    CASES,
    ids=[
        "truncated last.pt",
        "last.pt links to another file",
        "another width",
        "mlflow_run.json not JSON",
        "mlflow_run.json names no run",
    ],
)
def test_a_refused_resume_is_one_line_and_leaves_the_finished_run_alone(
    finished_run, tmp_path, capsys, damage, overrides, message
):
    root = tmp_path / "copy"
    shutil.copytree(finished_run, root, symlinks=True)
    config_before = (root / "run" / "config.yaml").read_text()
    damage(root / "run")
    assert message in refused_line(*resume(root, capsys, *overrides))
    assert run_status(root) == "FINISHED"
    assert (root / "run" / "config.yaml").read_text() == config_before


def test_two_runs_started_at_once_get_folders_of_their_own(tmp_path):
    from itrlab.files import claim_new_dir

    assert [claim_new_dir(tmp_path / "claims", "20260101-000000").name for _ in range(3)] == [
        "20260101-000000",
        "20260101-000000-1",
        "20260101-000000-2",
    ]
    processes = [
        subprocess.Popen(
            job(
                "train.py",
                "-c",
                "vsepp_synthetic_tiny",
                "train.epochs=1",
                f"seed={seed}",
                f"dataset.root={tmp_path / 'data'}",
                f"output.dir={tmp_path / 'runs'}",
            ),
            cwd=tmp_path,
            env=env_for(tmp_path),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in (0, 1)
    ]
    for process in processes:
        _, err = process.communicate(timeout=300)
        assert process.returncode == 0, err[-3000:]
    folders = sorted((tmp_path / "runs" / "vsepp_synthetic_tiny").iterdir())
    seeds = sorted(
        int(line.split(":")[1])
        for folder in folders
        for line in (folder / "config.yaml").read_text().splitlines()
        if line.startswith("seed:")
    )
    assert len(folders) == 2 and seeds == [0, 1]
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("vsepp_synthetic_tiny").experiment_id])
    assert sorted(r.data.params["seed"] for r in runs) == ["0", "1"]
