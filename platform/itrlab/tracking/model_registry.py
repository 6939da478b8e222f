"""A sweep's rows in MLflow's model registry (``itrlab report --register``): one registered model per row of the
table, one version per seed's model (docs/models.md, "Registered models").

A row's model is named ``<sweep>-<profile>-<row>`` (:func:`model_names`), each run of characters other than
letters, digits and ``_ . + -`` made one ``-``; two rows whose labels give one name each get their label's sha256's
first 8 hex digits appended, so that a name stays the same between reports and never stands for two rows. Each
finished trial of a row that logged its model (:func:`logged_models`) is one version, its source the trial's
``runs:/<run id>/model``, tagged with its seed, its description the row's numbers (written by the caller). A trial
already registered is not registered again: its version's description and tags are updated, so that a report
registered twice leaves one version per seed and a seed a resumed sweep adds becomes the next version.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from itrlab.tracking.models import ARTIFACT, MODEL_TAG

# on `mlflow server`, "Waiting up to 300 seconds for model version to finish creation" for every version registered
logging.getLogger("mlflow.store.model_registry.abstract_store").setLevel(logging.WARNING)

SEPARATORS = re.compile(r"[^A-Za-z0-9_.+-]+")
MAX_NAME = 200  # characters of a registered model's name (MLflow's store keeps 256)
SEED_TAG = "itrlab.seed"


@dataclass(frozen=True)
class VersionSpec:
    """One model to register: the trial's run (its model ``runs:/<run_id>/model``), the version's description and
    tags."""

    run_id: str
    description: str
    tags: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RowModels:
    """A row's registered model: its name, description and tags, and the versions its seeds' models give."""

    name: str
    description: str
    tags: dict[str, str]
    versions: tuple[VersionSpec, ...]


@dataclass(frozen=True)
class Registered:
    """A version as registering left it: ``new`` False for a run that stood there before (its description
    updated)."""

    name: str
    version: str
    run_id: str
    new: bool

    @property
    def uri(self) -> str:
        return f"models:/{self.name}/{self.version}"


def slug(text: str) -> str:
    """``text`` as a registered model's name part: runs of other characters than ``[A-Za-z0-9_.+-]`` made one
    ``-``, none at either end; ``row`` when nothing is left."""
    return SEPARATORS.sub("-", text).strip("-.") or "row"


def model_names(sweep: str, profile: str, rows: Sequence[str]) -> dict[str, str]:
    """Row label -> its registered model's name (the module doc) for the rows of ``sweep`` run under ``profile``:
    unique within the sweep, stable across reports."""
    prefix = f"{slug(sweep)}-{slug(profile)}"
    plain = {row: f"{prefix}-{slug(row)}"[:MAX_NAME] for row in rows}
    shared = {name for name in plain.values() if list(plain.values()).count(name) > 1}
    return {
        row: f"{name[: MAX_NAME - 9]}-{hashlib.sha256(row.encode()).hexdigest()[:8]}" if name in shared else name
        for row, name in plain.items()
    }


def logged_models(runs: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Trial id -> run id of the trials (:meth:`~itrlab.tracking.run_reader.RunReader.trial_runs`) that finished
    and logged their model: their run tagged with its own ``runs:/<run id>/model``."""
    found = {}
    for trial, run in runs.items():
        run_id = run.get("run_id")
        if run.get("status") == "FINISHED" and (run.get("tags") or {}).get(MODEL_TAG) == f"runs:/{run_id}/{ARTIFACT}":
            found[trial] = run_id
    return found


def register_rows(client, rows: Iterable[RowModels]) -> list[Registered]:
    """Every row's model and versions in the registry of ``client`` (an ``MlflowClient``), as the module doc says;
    what each version became, in order."""
    done = []
    for row in rows:
        _registered_model(client, row)
        standing = {version.run_id: version for version in client.search_model_versions(f"name = '{row.name}'")}
        for spec in row.versions:
            old = standing.get(spec.run_id)
            if old is None:
                source = f"runs:/{spec.run_id}/{ARTIFACT}"
                version = client.create_model_version(
                    row.name, source, run_id=spec.run_id, tags=spec.tags, description=spec.description
                )
                done.append(Registered(row.name, str(version.version), spec.run_id, True))
                continue
            client.update_model_version(row.name, old.version, description=spec.description)
            for key, value in spec.tags.items():
                client.set_model_version_tag(row.name, old.version, key, value)
            done.append(Registered(row.name, str(old.version), spec.run_id, False))
    return done


def _registered_model(client, row: RowModels) -> None:
    """The registered model ``row.name``, made when missing, its description and tags the row's."""
    from mlflow.exceptions import MlflowException

    try:
        client.get_registered_model(row.name)
    except MlflowException as err:
        if err.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        client.create_registered_model(row.name, tags=row.tags, description=row.description)
        return
    client.update_registered_model(row.name, description=row.description)
    for key, value in row.tags.items():
        client.set_registered_model_tag(row.name, key, value)
