"""Trained models as MLflow models: a model folder of :mod:`itrlab.trained` logged as the run's ``model`` artifact
through the ``pyfunc`` flavor (the folder as ``artifacts/bundle``), and models read back by URI.

:func:`save_pyfunc` writes ``MLmodel`` itself (``mlflow.pyfunc.add_to_model``, this module as the flavor's loader,
:func:`_load_pyfunc`, no pickled object) and the environment files with the installed versions of the few packages
they name: ``mlflow.pyfunc.save_model`` scans every installed distribution for its requirements
(docs/speed.md#figures-behind-the-codes-choices), which a training has no use for. :class:`ItrlabPyfunc` opens the
folder through :data:`LOADER`, the ``module:function`` of the layer that builds methods (this package may not
import it); its ``predict`` embeds captions, image region features or photos, each request checked first
(:mod:`~itrlab.tracking.serving_input`). A model logged as MLflow's models from code holds its own code file, which
builds an :class:`ItrlabPyfunc` through ``load_context``.

``MLmodel`` can be changed by anyone who can write the model's artifacts: its ``loader`` is compared with
:data:`LOADER` as a name before anything is imported, so a model naming another function is refused in one line.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import mlflow
import pandas as pd
import yaml
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from mlflow.models import Model
from mlflow.utils.environment import _mlflow_conda_env, _PythonEnv

from itrlab.errors import UserInputError, failure_reason
from itrlab.tracking.serving_input import (
    RefusedRequest,
    checked_captions,
    checked_features,
    checked_images,
    input_column,
)

ARTIFACT = "model"  # the run's artifact path of its model: runs:/<id>/model
BUNDLE = "bundle"  # the pyfunc's artifact that holds itrlab's model folder
MODEL_TAG = "itrlab.model"  # on a run that logged its model: the model's URI (a sweep's report links it)
GALLERY_TAG = "itrlab.gallery"  # on a run that logged a retrieval gallery: its artifact path
LOADER = "itrlab.trained.model:open_bundle"  # the one function that opens a model folder (itrlab.trained)
FETCHED = ("runs", "models", "mlflow-artifacts", "file")  # the URI schemes MLflow fetches a model by here
BUNDLE_PATH = f"{ARTIFACT}/artifacts/{BUNDLE}"  # a run's logged model folder, as an artifact path


def load_loader(name: object):
    """The function :data:`LOADER` names, when ``name`` is that; UserInputError (one line) for any other name,
    before anything is imported."""
    if name != LOADER:
        shown = repr(name) if len(repr(name)) <= 80 else f"{repr(name)[:60]}..."
        raise UserInputError(
            f"an itrlab model's MLmodel names the loader {shown}; itrlab opens its models with {LOADER!r} "
            f"only: refused, nothing imported (the MLmodel was changed after itrlab wrote it)"
        )
    module, _, function = LOADER.partition(":")
    return getattr(importlib.import_module(module), function)


class ItrlabPyfunc(mlflow.pyfunc.PythonModel):
    """A trained itrlab model behind MLflow's ``pyfunc`` interface: ``predict`` of a frame with a ``caption``,
    ``features`` ((R, D) nested lists) or ``image`` (base64 JPEG or PNG bytes) column returns their embeddings."""

    def load_context(self, context) -> None:
        self.model = load_loader((context.model_config or {}).get("loader"))(context.artifacts[BUNDLE])

    def predict(self, context, model_input: pd.DataFrame, params: dict[str, Any] | None = None):
        """Embeddings of the frame's captions, images' features or photos, each request checked first
        (:mod:`~itrlab.tracking.serving_input`): what the model cannot embed is a RefusedRequest, one line."""
        column = input_column(model_input)
        try:
            if column == "caption":
                return self.model.embed_captions(checked_captions(model_input[column])).numpy()
            if column == "features":
                return self.model.embed_images(checked_features(model_input[column])).numpy()
            return self.model.embed_photos(checked_images(model_input[column])).numpy()
        except UserInputError as err:  # the model's own refusal: another layout, no photos, no separate embeddings
            raise RefusedRequest(failure_reason(err)) from None


class LoadedPyfunc:
    """What the pyfunc flavor's loader returns: ``predict(frame, params)`` of an opened :class:`ItrlabPyfunc`."""

    def __init__(self, model: ItrlabPyfunc):
        self.model = model

    def predict(self, model_input: pd.DataFrame, params: dict[str, Any] | None = None):
        return self.model.predict(None, model_input, params)


def _load_pyfunc(data_path: str, model_config: dict[str, Any] | None = None) -> LoadedPyfunc:
    """The pyfunc flavor's loader (``loader_module`` of the models :func:`save_pyfunc` writes): the itrlab model
    folder at ``data_path`` opened by the ``loader`` its ``model_config`` names."""
    opened = ItrlabPyfunc()
    opened.model = load_loader((model_config or {}).get("loader"))(data_path)
    return LoadedPyfunc(opened)


def pinned(requirements: list[str]) -> list[str]:
    """``requirements`` (distribution names) pinned to their installed versions, MLflow's first: one metadata
    lookup each, not a scan of every installed distribution."""
    pins = [f"mlflow=={mlflow.__version__}"]
    for name in requirements:
        try:
            pins.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            pins.append(name)
    return pins


def save_pyfunc(bundle: str | Path, destination: str | Path, requirements: list[str]) -> Path:
    """The MLflow model folder of the itrlab model folder ``bundle`` at ``destination`` (which must not exist)."""
    destination = Path(destination)
    destination.mkdir(parents=True)
    data = Path("artifacts") / BUNDLE
    shutil.copytree(bundle, destination / data)
    pins = pinned(requirements)
    (destination / "requirements.txt").write_text("\n".join(pins) + "\n")
    with open(destination / "conda.yaml", "w") as out:
        yaml.safe_dump(_mlflow_conda_env(additional_pip_deps=pins, install_mlflow=False), out, default_flow_style=False)
    _PythonEnv.current().to_yaml(str(destination / "python_env.yaml"))
    model = Model()
    mlflow.pyfunc.add_to_model(
        model,
        loader_module=__name__,
        data=str(data),
        conda_env="conda.yaml",
        python_env="python_env.yaml",
        model_config={"loader": LOADER},
    )
    model.save(str(destination / "MLmodel"))
    return destination


def bundle_of(model_folder: str | Path) -> Path | None:
    """The itrlab model folder inside an MLflow model folder (None when it holds none)."""
    found = Path(model_folder) / "artifacts" / BUNDLE
    return found if found.is_dir() else None


def is_model_uri(text: str) -> bool:
    """Whether ``text`` is an MLflow URI (``runs:/...``, ``models:/...``, ``s3://...``), not a local path."""
    scheme, sep, _ = text.partition(":")
    return bool(sep) and len(scheme) > 1 and scheme.replace("-", "").isalnum()


def check_model_uri(uri: str) -> None:
    """UserInputError (one line naming the scheme) for a URI whose scheme is not one MLflow fetches a model by
    here (:data:`FETCHED`: an object store or a web address is reached through a run, ``runs:/...``)."""
    scheme = uri.partition(":")[0].lower()
    if scheme not in FETCHED:
        raise UserInputError(
            f"model {uri[:200]!r}: itrlab does not fetch models by '{scheme}' URIs; name a model by "
            f"{', '.join(f'{name}:' for name in FETCHED)} URIs (a model in an object store or on a web server is "
            f"reached through its run: runs:/<run id>/model), a run id or a folder"
        )


def download_model(uri: str, destination: str | Path, tracking_uri: str | None = None) -> Path:
    """The MLflow model at ``uri`` copied under ``destination``; UserInputError (one line, with the likely cause)
    when there is none."""
    from itrlab.tracking.store import resolve_tracking_uri

    check_model_uri(uri)
    store = resolve_tracking_uri(tracking_uri)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    try:
        path = Path(
            mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=str(destination), tracking_uri=store)
        )
    except (MlflowException, OSError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserInputError(
            f"{uri}: no logged itrlab model there ({reason[:200]}); {_likely_cause(uri, store)}"
        ) from None
    if not (path / "MLmodel").is_file() or bundle_of(path) is None:
        raise UserInputError(f"{uri} is not an itrlab model (no MLmodel with an itrlab bundle)")
    return path


def _likely_cause(uri: str, store: str) -> str:
    """Why a model URI that MLflow could not fetch has no model: its run is not in the store, or it is and logged
    no model."""
    scheme, _, rest = uri.partition(":/")
    if scheme == "models":
        return _registered_cause(rest.strip("/"), store)
    if scheme != "runs":
        return f"is it in the MLflow store {store} (--tracking-uri, MLFLOW_TRACKING_URI)?"
    run_id = rest.strip("/").partition("/")[0]
    try:
        run = MlflowClient(tracking_uri=store).get_run(run_id)
    except MlflowException:
        return (
            f"the MLflow store {store} holds no run {run_id}: a run of another store "
            f"(--tracking-uri, MLFLOW_TRACKING_URI), or a mistyped id"
        )
    from itrlab.tracking.run_reader import SWEEP_TAG

    if SWEEP_TAG in run.data.tags:
        return (
            f"run {run_id} is the parent of sweep {run.data.tags[SWEEP_TAG]}, which trains nothing itself: each "
            f"trial's run logged its model (the sweep's report.html lists their URIs under each row)"
        )
    if run.info.status == "RUNNING":
        return f"run {run_id} is still running: a run logs its model when its training ends"
    return f"run {run_id} logged no model: a run logs its model when output.log_model is 'best' (the default)"


def _registered_cause(path: str, store: str) -> str:
    """Why ``models:/<path>`` names no model: the registry holds no model of that name, or not that version (the
    versions it holds said)."""
    name = re.split(r"[/@]", path, maxsplit=1)[0]
    client = MlflowClient(tracking_uri=store)
    try:
        client.get_registered_model(name)
        held = [] if "'" in name else client.search_model_versions(f"name = '{name}'")
    except MlflowException:
        return (
            f"the model registry of the MLflow store {store} holds no model named {name[:200]!r} (--tracking-uri, "
            f"MLFLOW_TRACKING_URI; `itrlab report RUN_ID --register` names a sweep's rows <sweep>-<profile>-<row>)"
        )
    versions = sorted(int(version.version) for version in held)
    shown = ", ".join(map(str, versions[:20])) + (", ..." if len(versions) > 20 else "")
    return f"registered model {name[:200]!r} holds version{'s' if len(versions) != 1 else ''} {shown or 'none'}"


def logged_bundle_file(client, run_id: str, name: str, destination: str | Path) -> Path | None:
    """The file ``name`` of the itrlab model folder that run ``run_id`` logged, copied under ``destination``;
    None when the run logged no such file."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    try:
        return Path(client.download_artifacts(run_id, f"{BUNDLE_PATH}/{name}", str(destination)))
    except (MlflowException, OSError):
        return None


def log_model_folder(client, run_id: str, bundle: str | Path, requirements: list[str]) -> str:
    """Log ``bundle`` as run ``run_id``'s pyfunc model (artifact ``model``); its URI ``runs:/<id>/model``."""
    # not "itrlab-": /tmp/itrlab-* are local clusters' folders (tests/cluster_harness), which tests count
    with tempfile.TemporaryDirectory(prefix="itrlab_model_") as scratch:
        folder = save_pyfunc(bundle, Path(scratch) / ARTIFACT, requirements)
        client.log_artifacts(run_id, str(folder), ARTIFACT)
    uri = f"runs:/{run_id}/{ARTIFACT}"
    client.set_tag(run_id, MODEL_TAG, uri)
    return uri


def log_gallery(client, run_id: str, page: str, artifact: str) -> None:
    """The gallery page ``page`` as run ``run_id``'s artifact ``artifact``, named by the run's tag."""
    client.log_text(run_id, page, artifact)
    client.set_tag(run_id, GALLERY_TAG, artifact)
