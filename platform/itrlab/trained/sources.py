"""Where a trained model comes from (issue 43): an MLflow model URI (``runs:/<id>/model``, ``models:/...``), a run
id, a run folder, or a model folder. :func:`load_model` is ``itrlab.load_model``."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from itrlab.assembly import load_experiment
from itrlab.errors import UserInputError
from itrlab.files import read_json
from itrlab.trained.bundle import INFO, write_bundle
from itrlab.trained.model import TrainedModel, open_bundle, plain_config

RUN_ID = re.compile(r"[0-9a-f]{32}")
LOADER = "itrlab.trained.model:open_bundle"  # how the pyfunc flavor opens the folder (itrlab.tracking.models)
REQUIREMENTS = ["torch", "pyyaml", "pydantic"]
MLFLOW_RECORD = "mlflow_run.json"  # a run folder's record of its MLflow run (itrlab.train.experiment)


def bundle_from_run(run_dir: Path, destination: Path, run_id: str | None = None) -> Path:
    """The model folder of the finished run ``run_dir`` at ``destination``."""
    from itrlab.methods import METHODS

    if not (run_dir / "config.yaml").is_file():
        raise UserInputError(f"{run_dir} holds no config.yaml: not an itrlab run folder")
    config = load_experiment(run_dir / "config.yaml")
    embeds = METHODS[plain_config(config).method.name].embeds_apart
    if run_id is None and (run_dir / MLFLOW_RECORD).is_file():  # the MLflow run the folder logged to
        run_id = read_json(run_dir / MLFLOW_RECORD, "the run's MLflow record").get("run_id")
    return write_bundle(run_dir, config, destination, embeds_apart=embeds, run_id=run_id)


def load_model(source: str | Path, tracking_uri: str | None = None) -> TrainedModel:
    """The trained model at ``source``: an MLflow model URI, a run id (its ``model`` artifact), a run folder or
    a model folder; UserInputError (one line) for anything else."""
    from itrlab.tracking.models import bundle_of, download_model, is_model_uri

    text = str(source)
    path = Path(text).expanduser()
    if path.is_dir() and (path / INFO).is_file():
        return open_bundle(path, text)
    if path.is_dir() and bundle_of(path) is not None:
        return open_bundle(bundle_of(path), text)
    if RUN_ID.fullmatch(text):
        text = f"runs:/{text}/model"
    elif not path.is_dir() and not is_model_uri(text):
        raise UserInputError(f"model {text!r}: not a folder, an MLflow run id or a model URI (runs:/<run id>/model)")
    with tempfile.TemporaryDirectory(prefix="itrlab_model_") as scratch:  # the model is in memory once opened
        if path.is_dir():  # a run folder
            return open_bundle(bundle_from_run(path, Path(scratch) / "bundle"), text)
        return open_bundle(bundle_of(download_model(text, scratch, tracking_uri)), text)
