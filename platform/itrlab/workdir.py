"""Which folder a job's relative paths land in, said in one line when it is not the project's: a job started elsewhere
would otherwise silently make a second MLflow store, run folders and synthetic data there.

Relative paths (``dataset.root``, ``output.dir``, ``--storage``, the default ``mlflow.db``) are read from the working
folder (docs/configs.md#paths). The project is the checkout this itrlab runs from, the folder holding its ``configs/``
and ``platform/`` (an installed copy has none, and nothing is said). A job started elsewhere still runs, printing
:func:`elsewhere_line` first. A Ray job (``ray job submit --working-dir``) works in Ray's copy of the submitted folder,
without its git-ignored files, where ``cd`` is no remedy: the line says which paths were shipped and that paths on the
cluster are the remedy (docs/sweeps.md#running-on-a-ray-cluster).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"  # as itrlab.tracking.store reads it (no MLflow import here)
JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"  # what Ray's job supervisor hands a submitted job's driver


def project_folder() -> Path | None:
    """The checkout of this source tree (``configs/`` beside ``platform/``), or None for an installed copy."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "configs").is_dir() and (root / "platform").is_dir() else None


def relative_targets(paths: Iterable[tuple[str, str | Path | None]], tracking: bool = True) -> list[tuple[str, Path]]:
    """The (what, path) pairs whose path is relative, with the default MLflow store's when the job tracks and
    no URI is set."""
    found = [
        (what, Path(path)) for what, path in paths if path is not None and not Path(path).expanduser().is_absolute()
    ]
    if tracking and not os.environ.get(TRACKING_URI_ENV):
        found.append(("the MLflow store", Path("mlflow.db")))
    return found


def job_runtime_env() -> dict[str, Any]:
    """The runtime env of the ``ray job submit`` this process is the driver of; empty outside a submitted job."""
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        runtime_env = json.loads(os.environ.get(JOB_CONFIG_ENV) or "{}").get("runtime_env")
        return runtime_env if isinstance(runtime_env, dict) else {}
    return {}


def in_job_copy() -> bool:
    """Whether this process is a Ray job's driver working in Ray's copy of the submitted folder (``--working-dir``)."""
    return bool(job_runtime_env().get("working_dir"))


def job_line(targets: list[tuple[str, Path]]) -> str:
    """The line of a Ray job whose ``targets`` (what, relative path) land in its copy of the submitted folder:
    each there, whether the job was shipped with it, and paths on the cluster as the remedy."""
    here = Path.cwd().resolve()
    listed = ", ".join(
        f"{what} {here / path}" + (" (shipped with the job)" if (here / path).exists() else "")
        for what, path in targets
    )
    line = f"a Ray job: working in its copy of the submitted folder, {here}: {listed}"
    if all((here / path).exists() for _, path in targets):
        return line
    return (
        f"{line} (relative paths are read in this copy, and what the job was not shipped with is made or looked "
        "for there: give them as paths on the cluster, an absolute dataset.root, --storage or output.dir and "
        "MLFLOW_TRACKING_URI in the job's runtime env; docs/sweeps.md#running-on-a-ray-cluster)"
    )


def elsewhere_line(paths: Iterable[tuple[str, str | Path | None]], tracking: bool = True) -> str | None:
    """One line when the working folder is not the project's and some of ``paths`` (what, path) are relative:
    where each lands, and how to use the project's instead (a Ray job's copy of its folder: :func:`job_line`).
    None when there is nothing to say."""
    targets = relative_targets(paths, tracking)
    if not targets:
        return None
    if in_job_copy():
        return job_line(targets)
    project, here = project_folder(), Path.cwd().resolve()
    if project is None or here == project:
        return None
    listed = ", ".join(f"{what} {here / path}" for what, path in targets)
    return (
        f"working in {here}, not in the project folder {project}: {listed} (relative paths are read from the "
        f"working folder; cd {project} to use the project's)"
    )
