"""A trained model's folder (issue 43): everything needed to use a run's best model without its run folder.

::

    model.json        what it is: method, feature layout (regions x width), text encoder, training captions,
                      whether it embeds images and captions apart, the run it came from
    weights.pt        the model's state dict (the run's ``model.pt``: a cooperative scheme's target branch),
                      read weights-only
    config.yaml       the run's resolved config
    tokenizer.json    the run's tokenizer: the BiGRU vocabulary, the pretrained tokenizer's folder, or the
                      stored text features it reads (a reference, checked against the captions it embeds)
    test_recall.json  its test table, as the run logged it

Nothing in it is unpickled: weights through ``torch.load(weights_only=True)``, the rest JSON and YAML.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch

from itrlab.config import ExperimentConfig
from itrlab.data.precomp import inspect_precomp
from itrlab.errors import UserInputError
from itrlab.files import atomic_write_text, load_tensors, read_json

FORMAT, VERSION = "itrlab-model", 1
INFO, WEIGHTS, CONFIG = "model.json", "weights.pt", "config.yaml"
TOKENIZER, TEST = "tokenizer.json", "test_recall.json"
RUN_MODEL, RUN_VOCAB, RUN_TEST, RUN_CONFIG = (
    "model.pt",
    "vocab.json",
    "test_recall.json",
    "config.yaml",
)  # a run folder's files (itrlab.train)


@dataclass(frozen=True)
class ModelInfo:
    """What a trained model expects and where it came from (``model.json``)."""

    method: str
    feature_dim: int  # D of the (R, D) region features of an image
    n_regions: int  # R of the data it trained on
    text_encoder: str  # bigru, bert or precomp (stored text features)
    n_train_captions: int
    embeds_apart: bool  # False: it scores pairs jointly (cross-attention), no separate embeddings
    dataset: str
    test_protocol: str
    run_id: str | None = None  # the MLflow run it was logged to
    run_dir: str | None = None

    def layout(self) -> str:
        return f"{self.n_regions} regions x {self.feature_dim}"

    @classmethod
    def read(cls, path: Path) -> ModelInfo:
        payload = read_json(path, "model description")
        if not isinstance(payload, dict) or payload.get("format") != FORMAT:
            raise UserInputError(f"{path} is not an itrlab model description (format '{FORMAT}')")
        if payload.get("version") != VERSION:
            raise UserInputError(
                f"{path}: itrlab model version {payload.get('version')!r}; this itrlab reads {VERSION}"
            )
        names = {f.name for f in fields(cls)}
        missing = sorted(names - set(payload) - {"run_id", "run_dir"})
        if missing:
            raise UserInputError(f"{path} lacks {', '.join(missing)}")
        return cls(**{key: value for key, value in payload.items() if key in names})

    def write(self, path: Path) -> None:
        atomic_write_text(path, json.dumps({"format": FORMAT, "version": VERSION, **asdict(self)}, indent=2))


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
    ModelInfo(
        config.method.name,
        train.feature_dim,
        train.n_regions,
        config.model.text.encoder,
        train.n_captions,
        embeds_apart,
        dataset.name,
        config.eval.test_protocol,
        run_id,
        str(run_dir),
    ).write(destination / INFO)
    return destination
