"""Trained models as MLflow models (issue 43): a model folder written by :mod:`itrlab.trained` logged as the
run's ``model`` artifact through the ``pyfunc`` flavor, and models read back by URI.

The folder (weights, config, tokenizer, feature layout, test table) travels as the pyfunc's artifact
``bundle``; the flavor's code is :mod:`itrlab.tracking.model_code` (MLflow's models from code: no pickled
Python object is written or read). :class:`ItrlabPyfunc` opens the folder through ``loader``, a
``module:function`` that the layer which knows how to build a method names when it logs (this package sits
below the methods and may not import them), and its ``predict`` embeds captions (column ``caption``) or
image region features (column ``features``: one (R, D) nested list per row).
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

import mlflow
import pandas as pd
from mlflow.exceptions import MlflowException

from itrlab.errors import UserInputError

ARTIFACT = "model"  # the run's artifact path of its model: runs:/<id>/model
BUNDLE = "bundle"  # the pyfunc's artifact that holds itrlab's model folder
CODE = Path(__file__).with_name("model_code.py")


def load_loader(name: str):
    """The function ``module:function`` names."""
    module, _, function = name.partition(":")
    return getattr(importlib.import_module(module), function)


class ItrlabPyfunc(mlflow.pyfunc.PythonModel):
    """A trained itrlab model behind MLflow's ``pyfunc`` interface (``mlflow.pyfunc.load_model``, ``mlflow
    models serve``): ``predict`` of a frame with a ``caption`` column returns their embeddings, of a frame with
    a ``features`` column the images' embeddings."""

    def load_context(self, context) -> None:
        self.model = load_loader(context.model_config["loader"])(context.artifacts[BUNDLE])

    def predict(self, context, model_input: pd.DataFrame, params: dict[str, Any] | None = None):
        columns = set(getattr(model_input, "columns", ()))
        if "caption" in columns:
            return self.model.embed_captions([str(c) for c in model_input["caption"]]).numpy()
        if "features" in columns:
            import numpy as np

            return self.model.embed_images(np.stack([np.asarray(f, dtype=np.float32)
                                                     for f in model_input["features"]])).numpy()
        raise UserInputError(f"an itrlab model's input is a frame with a 'caption' column (text) or a 'features' "
                             f"column (region features per image); got columns {sorted(columns) or 'none'}")


@contextlib.contextmanager
def quiet_logger(name: str):
    """The logger ``name`` says only errors inside the block."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def save_pyfunc(bundle: str | Path, destination: str | Path, loader: str, requirements: list[str]) -> Path:
    """The MLflow model folder of the itrlab model folder ``bundle`` at ``destination`` (which must not exist)."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # it copies the bundle: no bars
    with quiet_logger("mlflow.pyfunc"):  # its warning that a frame of captions or features has no schema
        mlflow.pyfunc.save_model(str(destination), python_model=str(CODE), artifacts={BUNDLE: str(bundle)},
                                 model_config={"loader": loader},
                                 pip_requirements=[f"mlflow=={mlflow.__version__}", *requirements])
    return Path(destination)


def bundle_of(model_folder: str | Path) -> Path | None:
    """The itrlab model folder inside an MLflow model folder (None when it holds none)."""
    found = Path(model_folder) / "artifacts" / BUNDLE
    return found if found.is_dir() else None


def is_model_uri(text: str) -> bool:
    """Whether ``text`` is an MLflow URI (``runs:/...``, ``models:/...``, ``s3://...``), not a local path."""
    scheme, sep, _ = text.partition(":")
    return bool(sep) and len(scheme) > 1 and scheme.replace("-", "").isalnum()


def download_model(uri: str, destination: str | Path, tracking_uri: str | None = None) -> Path:
    """The MLflow model at ``uri`` copied under ``destination``; UserInputError (one line) when there is none."""
    from itrlab.tracking.store import resolve_tracking_uri

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    try:
        path = Path(mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=str(destination),
                                                        tracking_uri=resolve_tracking_uri(tracking_uri)))
    except (MlflowException, OSError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserInputError(f"{uri}: no logged itrlab model there ({reason[:200]}); a run logs its model when "
                             f"output.log_model is 'best' (the default)") from None
    if not (path / "MLmodel").is_file() or bundle_of(path) is None:
        raise UserInputError(f"{uri} is not an itrlab model (no MLmodel with an itrlab bundle)")
    return path


def log_model_folder(client, run_id: str, bundle: str | Path, loader: str, requirements: list[str]) -> str:
    """Log ``bundle`` as run ``run_id``'s pyfunc model (artifact ``model``); its URI ``runs:/<id>/model``."""
    # not "itrlab-": /tmp/itrlab-* are local clusters' folders (itrlab.local_cluster), which tests count
    with tempfile.TemporaryDirectory(prefix="itrlab_model_") as scratch:
        folder = save_pyfunc(bundle, Path(scratch) / ARTIFACT, loader, requirements)
        client.log_artifacts(run_id, str(folder), ARTIFACT)
    return f"runs:/{run_id}/{ARTIFACT}"
