"""Checks of a config against its data (and the local files of its text encoder).

``check_data`` opens only file headers (array shapes, caption line counts) or the synthetic spec, and the
stored text features' arrays, read whole once and remembered by their file status
(:mod:`itrlab.data.array_checks`), so it is cheap, and runs before Ray, MLflow or training start.
:mod:`itrlab.assembly` runs it, then the method's own checks against the sizes it returns.
``check_data_content`` reads what a run reads when it opens its data (every caption; the features of a sample
of images), so that a command refuses bad data before it creates its MLflow store, run or run folder.
"""

from __future__ import annotations

import os

from itrlab.config.schema import ExperimentConfig
from itrlab.data.kinds import STORED_FEATURES, DataSummary, kind_of
from itrlab.errors import ConfigError, DataError


def synthetic_spec_of(config: ExperimentConfig):
    """The :class:`~itrlab.data.synthetic.SyntheticSpec` a synthetic dataset config describes."""
    from itrlab.data.kinds.synthetic import SyntheticKind

    return SyntheticKind(config.dataset).spec()


def check_text_encoder(config: ExperimentConfig) -> None:
    """The text encoder's local files exist: a complete BERT directory, or the GloVe package (a few stat calls)."""
    from itrlab.data.tokenizers import missing_model_files, resolve_model_dir
    from itrlab.errors import UserInputError

    text = config.model.text
    if text.encoder == "bert":
        try:
            path = resolve_model_dir(text.bert_path)
        except UserInputError as err:  # the packaged default is not installed
            raise ConfigError("model.text.bert_path", None, str(err)) from None
        missing = missing_model_files(path)
        if missing:
            problem = (
                "the directory does not exist"
                if missing == ["the directory itself"]
                else f"the model directory {path} is incomplete: no {'; no '.join(missing)}"
            )
            raise ConfigError(
                "model.text.bert_path",
                str(path),
                f"{problem}; it must be a local Hugging Face model directory (nothing is downloaded)",
                "leave it null for the packaged all-MiniLM-L6-v2" if text.bert_path is not None else None,
            )
    if text.glove:
        from itrlab.models.glove import glove_files

        try:
            glove_files()
        except UserInputError as err:
            raise ConfigError("model.text.glove", True, str(err)) from None


def check_stored_text(config: ExperimentConfig) -> None:
    """The features stored beside the data that the config reads (:data:`~itrlab.data.kinds.STORED_FEATURES`; with
    ``model.text.encoder=precomp``, the text features): there, whole, every value finite, their bytes those their
    manifest records, and of each split's captions in their order (a DataError naming the file otherwise)."""
    kind = kind_of(config.dataset)
    for stored in STORED_FEATURES.values():
        if stored.wanted(config):
            stored.check(config, kind)


def check_data_content(config: ExperimentConfig) -> None:
    """DataError for an empty caption line, invalid UTF-8 or NaN/inf features (in the images
    :func:`~itrlab.data.precomp.open_precomp` samples) of any split on disk: each split opened as its kind opens
    it; data its kind generates, not written yet, has nothing to read."""
    kind = kind_of(config.dataset)
    if not kind.on_disk():
        return
    for role in ("train", "val", "test"):
        kind.open_split(role)


def check_data(config: ExperimentConfig) -> DataSummary:
    """Check the config against the data's sizes; raises ConfigError or DataError."""
    from itrlab.eval import PROTOCOLS, get_protocol

    check_text_encoder(config)
    summary = kind_of(config.dataset).summary()
    check_stored_text(config)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if config.train.loader_workers > 4 * cores:
        raise ConfigError(
            "train.loader_workers",
            config.train.loader_workers,
            f"at most 4 per core: {4 * cores} on this machine's {cores} cores",
        )
    if config.train.batch_size > summary.n_train_captions:
        raise ConfigError(
            "train.batch_size",
            config.train.batch_size,
            f"must be at most the number of training captions ({summary.n_train_captions})",
        )
    for field, role in (("val_protocol", "val"), ("test_protocol", "test")):
        name = getattr(config.eval, field)
        if name not in PROTOCOLS:
            from itrlab.config.loader import did_you_mean

            raise ConfigError(
                f"eval.{field}", name, f"known protocols: {', '.join(sorted(PROTOCOLS))}", did_you_mean(name, PROTOCOLS)
            )
        try:
            get_protocol(name).check(summary.n_images[role])
        except ValueError as err:
            raise ConfigError(f"eval.{field}", name, f"does not fit the {role} split: {err}") from None
    return summary


__all__ = ["DataError", "DataSummary", "check_data", "check_stored_text", "check_text_encoder"]
