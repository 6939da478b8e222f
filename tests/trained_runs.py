"""Trainings in the test process whose models the tests of trained models use, and the ``itrlab``
command run in process."""

from __future__ import annotations

from pathlib import Path


def itrlab(*argv) -> int:
    """``itrlab ARGV`` in this process; its exit status."""
    from itrlab.cli import main

    return main([str(a) for a in argv])


def work_in(patch, folder: Path) -> None:
    """``patch`` (a MonkeyPatch) moves into ``folder`` and points MLflow at the folder's ``mlflow.db``, as a user
    who trains there with the default store."""
    patch.chdir(folder)
    patch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{folder / 'mlflow.db'}")


def train(experiment: str, run_dir: Path, *overrides: str) -> str | None:
    """A run trained in this process (``itrlab train`` would start its MLflow watchdog process); its run id."""
    from itrlab.assembly import assemble
    from itrlab.tracking import MlflowTracker
    from itrlab.train import run_experiment

    built = assemble(experiment, ["train.epochs=1", *overrides])
    tracker = MlflowTracker(built.config.experiment_name) if built.config.tracking.enabled else None
    return run_experiment(built, run_dir, tracker=tracker).mlflow_run_id


def rebind(folder: Path) -> None:
    """Record the sha256 of the model folder ``folder``'s files, as they are now, in its ``model.json`` (one that
    records digests): a forged folder whose digests agree, so that the checks behind the digests are what refuses
    it."""
    import hashlib
    import json

    info = json.loads((folder / "model.json").read_text())
    if "files_sha256" in info:
        info["files_sha256"] = {
            name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in info["files_sha256"]
        }
        (folder / "model.json").write_text(json.dumps(info))
