"""Which folder a job's relative paths land in, said in one line when it is not the project's (issue 46: a job
started in another folder silently made a second MLflow store, run folders and synthetic data there).

Relative paths (a config's ``dataset.root`` and ``output.dir``, a sweep's ``--storage``, the default MLflow
store ``mlflow.db``) are read from the working folder, as the docs say (docs/configs.md#paths). The
project is the checkout this itrlab runs from: the folder that holds its ``configs/`` and ``platform/``
(an installed copy without them has no project folder, and nothing is said). A job started elsewhere still
runs, and prints :func:`elsewhere_line` first: where its relative paths are written and read.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"  # as itrlab.tracking.store reads it (no MLflow import here)


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


def elsewhere_line(paths: Iterable[tuple[str, str | Path | None]], tracking: bool = True) -> str | None:
    """One line when the working folder is not the project's and some of ``paths`` (what, path) are relative:
    where each lands, and how to use the project's instead. None when there is nothing to say."""
    project, here = project_folder(), Path.cwd().resolve()
    if project is None or here == project:
        return None
    targets = relative_targets(paths, tracking)
    if not targets:
        return None
    listed = ", ".join(f"{what} {here / path}" for what, path in targets)
    return (
        f"working in {here}, not in the project folder {project}: {listed} (relative paths are read from the "
        f"working folder; cd {project} to use the project's)"
    )
