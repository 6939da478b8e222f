"""Where a trained model comes from: an MLflow model URI (``runs:/<id>/model``, ``models:/...``), a run id, a run
folder, or a model folder. :func:`load_model` is ``itrlab.load_model``.

Results about a model are written into the run it came from (``itrlab gallery --log``) or name it (``itrlab evaluate``'s
``itrlab.source_run.<k>`` tags), so :func:`source_run` checks ``model.json``'s ``run_id`` first: the run is in the store
and is the model's own (the model was read from it, or the model it logged has the same weights' sha256).
"""

from __future__ import annotations

import logging
import re
import tempfile
from pathlib import Path

from itrlab.assembly import load_experiment
from itrlab.errors import UserInputError
from itrlab.files import read_json, sha256_file
from itrlab.trained.bundle import INFO, WEIGHTS, ModelInfo, write_bundle
from itrlab.trained.model import TrainedModel, open_bundle, plain_config
from itrlab.trained.new_images import PHOTO_REQUIREMENTS

RUN_ID = re.compile(r"[0-9a-f]{32}")
RUN_URI = re.compile(r"runs:/([0-9a-f]{32})/")  # a model named by its run
REQUIREMENTS = ["torch", "pyyaml", "pydantic"]  # what a logged model needs beside MLflow and itrlab
MLFLOW_RECORD = "mlflow_run.json"  # a run folder's record of its MLflow run (itrlab.train.experiment)
_log = logging.getLogger(__name__)


def recorded_run(run_dir: Path) -> str | None:
    """The MLflow run id the run folder ``run_dir`` records (None: it logged to none)."""
    if not (run_dir / MLFLOW_RECORD).is_file():
        return None
    run_id = read_json(run_dir / MLFLOW_RECORD, "the run's MLflow record").get("run_id")
    return run_id if isinstance(run_id, str) and RUN_ID.fullmatch(run_id) else None


def bundle_from_run(run_dir: Path, destination: Path, run_id: str | None = None) -> Path:
    """The model folder of the finished run ``run_dir`` at ``destination``."""
    from itrlab.methods import METHODS

    if not (run_dir / "config.yaml").is_file():
        raise UserInputError(f"{run_dir} holds no config.yaml: not an itrlab run folder")
    config = load_experiment(run_dir / "config.yaml")
    embeds = METHODS[plain_config(config).method.name].embeds_apart
    return write_bundle(run_dir, config, destination, embeds_apart=embeds, run_id=run_id or recorded_run(run_dir))


def requirements_of(bundle: Path) -> list[str]:
    """The distributions the model folder ``bundle`` needs where it is served: :data:`REQUIREMENTS`, and the image
    encoder's packages for a model that embeds photos (its ``model.json`` records its extraction)."""
    photos = ModelInfo.read(bundle / INFO).extraction is not None
    return REQUIREMENTS + (PHOTO_REQUIREMENTS if photos else [])


def load_model(source: str | Path, tracking_uri: str | None = None, embedding: str | None = None) -> TrainedModel:
    """The trained model at ``source`` (an MLflow model URI, a run id, a run folder or a model folder); UserInputError
    (one line) for anything else. ``embedding``: the embedding its scores read (``output``, or ``prehead``: before its
    projection head; None: its config's ``eval.embedding``)."""
    from itrlab.tracking.models import bundle_of, check_model_uri, download_model, is_model_uri

    text = str(source)
    path = Path(text).expanduser()
    if path.is_dir() and (path / INFO).exists():  # a model folder (its files are checked when it opens)
        return open_bundle(path, text, embedding=embedding)
    if path.is_dir() and bundle_of(path) is not None:
        return open_bundle(bundle_of(path), text, embedding=embedding)
    if RUN_ID.fullmatch(text):
        text = f"runs:/{text}/model"
    elif not path.is_dir() and not is_model_uri(text):
        raise UserInputError(f"model {text!r}: not a folder, an MLflow run id or a model URI (runs:/<run id>/model)")
    if not path.is_dir():
        check_model_uri(text)
    with tempfile.TemporaryDirectory(prefix="itrlab_model_") as scratch:  # the model is in memory once opened
        if path.is_dir():  # a run folder: the run it records is its own
            return open_bundle(bundle_from_run(path, Path(scratch) / "bundle"), text, recorded_run(path), embedding)
        named = RUN_URI.match(text)
        return open_bundle(
            bundle_of(download_model(text, scratch, tracking_uri)), text, named.group(1) if named else None, embedding
        )


def source_run(model: TrainedModel, tracking_uri: str | None, purpose: str, required: bool = False) -> str | None:
    """The run ``model.json`` names, checked to be in the store and the model's own. A run the store does not hold, or
    one that logged no model: UserInputError when ``required``, else a warning and None; UserInputError whenever that
    run's model is another. One line each, ending in ``purpose``; nothing is written."""
    from itrlab.tracking import MlflowTracker

    run_id = model.info.run_id
    if run_id is None:
        return None
    reader = MlflowTracker.for_reading(tracking_uri)
    try:
        reader.run_record(run_id)
    except UserInputError:
        return _unchecked(model, f"the MLflow store {reader.tracking_uri} holds no run {run_id}", purpose, required)
    if model.from_run == run_id:
        return run_id
    digest = _logged_weights(reader.client, run_id)
    if digest is None:
        return _unchecked(model, f"run {run_id} logged no model to compare it with", purpose, required)
    if digest != model.weights_sha256:
        raise UserInputError(
            f"{model.source}: its model.json names run {run_id}, whose logged model is another (weights sha256 "
            f"{digest[:12]}, this model's {model.weights_sha256[:12]}): refused, nothing written"
        )
    return run_id


def _unchecked(model: TrainedModel, problem: str, purpose: str, required: bool) -> None:
    line = f"{model.source}: its model.json names run {model.info.run_id}, but {problem}: {purpose}"
    if required:
        raise UserInputError(line)
    _log.warning(line)


def _logged_weights(client, run_id: str) -> str | None:
    """The sha256 of the weights of the model run ``run_id`` logged (None: it logged none)."""
    from itrlab.tracking.models import logged_bundle_file

    with tempfile.TemporaryDirectory(prefix="itrlab_model_") as scratch:
        logged = logged_bundle_file(client, run_id, INFO, scratch)
        if logged is None:
            return None
        digest = (ModelInfo.read(logged).files_sha256 or {}).get(WEIGHTS)
        if digest is None:  # a model logged before its digests: its weights themselves
            weights = logged_bundle_file(client, run_id, WEIGHTS, scratch)
            digest = sha256_file(weights) if weights is not None else None
        return digest
