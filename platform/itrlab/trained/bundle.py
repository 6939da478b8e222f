"""A trained model's folder: everything needed to use a run's best model without its run folder: ``model.json`` (what it
is, :class:`ModelInfo`, with the other files' sha256 and the extraction its photos' features came from), ``weights.pt``
(the run's ``model.pt``), ``config.yaml``, ``tokenizer.json`` and ``test_recall.json``; each file is described in
docs/models.md ("What a run logs").

Nothing in it is unpickled: weights through ``torch.load(weights_only=True)``, the rest JSON and YAML.
``model.json`` is typed by one schema (each size an integer within bounds, each name a short string) before
anything is built from it, so that a size of 2**31 allocates nothing.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Annotated, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from itrlab.config import ExperimentConfig
from itrlab.data.precomp import inspect_precomp
from itrlab.data.text_features import TextFeatures
from itrlab.data.text_manifest import ArrayDigests, Sha256
from itrlab.data.tokenizers import TEXT_ENCODERS
from itrlab.errors import UserInputError
from itrlab.files import atomic_write_text, load_tensors, read_json, sha256_file, validate_record
from itrlab.trained.new_images import ExtractionRecord, extraction_record

FORMAT, VERSION = "itrlab-model", 1
INFO, WEIGHTS, CONFIG = "model.json", "weights.pt", "config.yaml"
TOKENIZER, TEST = "tokenizer.json", "test_recall.json"
RUN_MODEL, RUN_VOCAB, RUN_TEST, RUN_CONFIG = (
    "model.pt",
    "vocab.json",
    "test_recall.json",
    "config.yaml",
)  # a run folder's files (itrlab.train)


MAX_FEATURE_DIM = 1 << 16  # D of an image's region features (the papers' Faster R-CNN regions: 2,048)
MAX_REGIONS = 10_000  # R (36 regions, a 7 x 7 grid; a 100 x 100 grid at most)
MAX_CAPTIONS = 10**8  # training captions (COCO: 566,747): CODER sizes a state by them
Name = Annotated[str, StringConstraints(min_length=1, max_length=200)]


class ModelInfo(BaseModel):
    """What a trained model expects and where it came from (``model.json``), typed and bounded."""

    model_config = ConfigDict(strict=True, frozen=True, extra="ignore")

    method: Annotated[str, StringConstraints(pattern=r"^[a-z0-9_]{1,64}$")]
    feature_dim: Annotated[int, Field(ge=1, le=MAX_FEATURE_DIM)]  # D of the (R, D) region features of an image
    n_regions: Annotated[int, Field(ge=1, le=MAX_REGIONS)]  # R of the data it trained on
    text_encoder: Literal[TEXT_ENCODERS]  # bigru, bert or precomp (stored text features)
    n_train_captions: Annotated[int, Field(ge=1, le=MAX_CAPTIONS)]
    embeds_apart: bool  # False: it scores pairs jointly (cross-attention), no separate embeddings
    dataset: Name
    test_protocol: Name
    run_id: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{32}$")] | None = None  # the MLflow run it came from
    run_dir: Annotated[str, StringConstraints(max_length=4096)] | None = None
    files_sha256: dict[Literal[WEIGHTS, CONFIG, TOKENIZER, TEST], Sha256] | None = None  # None: bundled before
    text_features_sha256: ArrayDigests | None = None  # a model on stored text features: the arrays it read
    extraction: ExtractionRecord | None = None  # its features' extraction from photos; None: not from photos

    def layout(self) -> str:
        return f"{self.n_regions} regions x {self.feature_dim}"

    @classmethod
    def read(cls, path: Path) -> ModelInfo:
        payload = read_json(path, "model description", 1 << 20)
        if not isinstance(payload, dict) or payload.get("format") != FORMAT:
            raise UserInputError(f"{path} is not an itrlab model description (format '{FORMAT}')")
        if payload.get("version") != VERSION:
            raise UserInputError(
                f"{path}: itrlab model version {payload.get('version')!r}; this itrlab reads {VERSION}"
            )
        return validate_record(path, payload, cls, "model description")

    def write(self, path: Path) -> None:
        atomic_write_text(path, json.dumps({"format": FORMAT, "version": VERSION, **self.model_dump()}, indent=2))


def write_bundle(
    run_dir: Path, config: ExperimentConfig, destination: Path, *, embeds_apart: bool, run_id: str | None = None
) -> Path:
    """The model folder of the finished run in ``run_dir`` (its best model, config, tokenizer, test table) at
    ``destination``; the feature layout from the header of the run's training split."""
    for name in (RUN_MODEL, RUN_VOCAB, RUN_TEST, RUN_CONFIG):
        if not (run_dir / name).is_file():
            raise UserInputError(f"{run_dir} holds no {name}: not a finished itrlab run (train it to the end first)")
    dataset = config.dataset
    train = inspect_precomp(dataset.root, dataset.splits.train, dataset.captions_per_image)
    destination.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(run_dir / RUN_VOCAB, destination / TOKENIZER)
    shutil.copyfile(run_dir / RUN_TEST, destination / TEST)
    shutil.copyfile(run_dir / RUN_CONFIG, destination / CONFIG)  # as the run wrote it (a re-dump adds defaults)
    state = load_tensors(run_dir / RUN_MODEL, "checkpoint")
    if not isinstance(state, dict) or not isinstance(state.get("model"), dict):
        raise UserInputError(f"{run_dir / RUN_MODEL} is not an itrlab model checkpoint (no model entry)")
    torch.save(state["model"], destination / WEIGHTS)  # the weights alone: a few hundred kB on the synthetic data
    text = None
    if config.model.text.encoder == "precomp":  # the arrays the run read (checked against its own record)
        text = TextFeatures.load(run_dir / RUN_VOCAB).every_digest()
    ModelInfo(
        method=config.method.name,
        feature_dim=train.feature_dim,
        n_regions=train.n_regions,
        text_encoder=config.model.text.encoder,
        n_train_captions=train.n_captions,
        embeds_apart=embeds_apart,
        dataset=dataset.name,
        test_protocol=config.eval.test_protocol,
        run_id=run_id,
        run_dir=str(run_dir),
        files_sha256={name: sha256_file(destination / name) for name in (WEIGHTS, CONFIG, TOKENIZER, TEST)},
        text_features_sha256=text,
        extraction=extraction_record(dataset.root, train.n_regions, train.feature_dim),
    ).write(destination / INFO)
    return destination
