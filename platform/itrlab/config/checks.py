"""Checks of a config against its data (and the local files of its text encoder).

``check_data`` opens only file headers (array shapes, caption line counts) or the synthetic spec, so
it is cheap, and runs before Ray, MLflow or training start. :mod:`itrlab.assembly` runs it, then the
method's own checks against the sizes it returns. ``check_data_content`` reads what a run reads when it
opens its data (every caption; the features of a sample of images), so that a command refuses bad data
before it creates its MLflow store, run or run folder.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from itrlab.config.schema import ExperimentConfig
from itrlab.errors import ConfigError, DataError, resolved_from


@dataclass(frozen=True)
class DataSummary:
    """Sizes of the three splits, known before any feature is read."""

    n_images: dict[str, int]  # by role: train, val, test
    captions_per_image: int
    generated: bool  # synthetic data that still has to be written

    @property
    def n_train_captions(self) -> int:
        return self.n_images["train"] * self.captions_per_image


def synthetic_spec_of(config: ExperimentConfig):
    """The :class:`~itrlab.data.synthetic.SyntheticSpec` a synthetic dataset config describes."""
    from itrlab.data.synthetic import synthetic_spec

    synthetic = config.dataset.synthetic
    try:
        return synthetic_spec(synthetic.size, **{"seed": synthetic.seed, **synthetic.knobs})
    except ConfigError as err:  # the generator names the knob as synthetic.<knob>
        raise ConfigError(f"dataset.{err.field}", err.value, err.allowed, err.hint) from None


def _synthetic_summary(config: ExperimentConfig) -> DataSummary:
    spec = synthetic_spec_of(config)
    if spec.captions_per_image != config.dataset.captions_per_image:
        raise ConfigError("dataset.captions_per_image", config.dataset.captions_per_image,
                          f"the synthetic data has {spec.captions_per_image} captions per image")
    sizes = {"train": spec.n_train, "val": spec.n_dev, "test": spec.n_test}
    done = (config.dataset.root / "synthetic.json").is_file()
    if not done:
        check_room_for_synthetic(config, spec)
    return DataSummary(sizes, spec.captions_per_image, generated=not done)


def check_room_for_synthetic(config: ExperimentConfig, spec) -> None:
    """ConfigError when the synthetic data set to generate cannot fit this machine: its features on
    the disk that will hold ``dataset.root``, its largest split (generated in float32) in memory."""
    per_image = spec.n_regions * spec.feature_dim
    disk = (spec.n_train + spec.n_dev + spec.n_test) * per_image * (2 if spec.dtype == "float16" else 4)
    memory = max(spec.n_train, spec.n_dev, spec.n_test) * per_image * 4
    probe = Path(config.dataset.root).expanduser().resolve()
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    free_disk = shutil.disk_usage(probe).free
    free_memory = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else None
    if disk > free_disk:
        raise ConfigError("dataset.synthetic", config.dataset.synthetic.model_dump(),
                          f"the synthetic data would need {disk / 1e9:.1f} GB of features on disk; {probe} has "
                          f"{free_disk / 1e9:.1f} GB free")
    if free_memory is not None and memory > free_memory:
        raise ConfigError("dataset.synthetic", config.dataset.synthetic.model_dump(),
                          f"generating it would need {memory / 1e9:.1f} GB of memory for its largest split; "
                          f"{free_memory / 1e9:.1f} GB are available")


def _precomp_summary(config: ExperimentConfig) -> DataSummary:
    from itrlab.data.precomp import inspect_precomp

    dataset = config.dataset
    if not dataset.root.is_dir():
        raise ConfigError("dataset.root", str(dataset.root),
                          f"must be an existing directory holding {{split}}_ims.npy and {{split}}_caps.txt"
                          f"{resolved_from(dataset.root)}")
    sizes, width = {}, None
    for role in ("train", "val", "test"):
        split = getattr(dataset.splits, role)
        info = inspect_precomp(dataset.root, split, captions_per_image=None)
        width = width or (info.feature_dim, "train")
        if info.feature_dim != width[0]:
            raise DataError(info.features_path, f"features of width {info.feature_dim}, but the {width[1]} split's "
                                                f"are {width[0]} wide: every split must come from one extractor")
        ratio = info.n_captions / max(info.n_images, 1)
        if ratio != dataset.captions_per_image:
            raise ConfigError("dataset.captions_per_image", dataset.captions_per_image,
                              f"split '{split}' in {dataset.root} has {info.n_captions} captions for "
                              f"{info.n_images} images ({ratio:g} per image)")
        sizes[role] = info.n_images
    return DataSummary(sizes, dataset.captions_per_image, generated=False)


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
            problem = ("the directory does not exist" if missing == ["the directory itself"]
                       else f"the model directory {path} is incomplete: no {'; no '.join(missing)}")
            raise ConfigError("model.text.bert_path", str(path),
                              f"{problem}; it must be a local Hugging Face model directory (nothing is downloaded)",
                              "leave it null for the packaged all-MiniLM-L6-v2" if text.bert_path is not None else None)
    if text.glove:
        from itrlab.models.glove import glove_files

        try:
            glove_files()
        except UserInputError as err:
            raise ConfigError("model.text.glove", True, str(err)) from None


def check_stored_text(config: ExperimentConfig) -> None:
    """With ``model.text.encoder=precomp``: the stored text features exist, hold token states, are whole, and
    belong to each split's captions in their order (a DataError naming the file otherwise). Synthetic data not
    generated yet has no captions to hold them against."""
    from itrlab.data.precomp import read_captions
    from itrlab.data.text_features import TextFeatures, resolve_folder

    dataset = config.dataset
    if config.model.text.encoder != "precomp":
        return
    if dataset.kind == "synthetic" and not (Path(dataset.root) / "synthetic.json").is_file():
        return
    features = TextFeatures(resolve_folder(dataset.root, dataset.text_features))
    for role in ("train", "val", "test"):
        split = getattr(dataset.splits, role)
        features.check_split(split, read_captions(dataset.root, split), "tokens")


def check_data_content(config: ExperimentConfig) -> None:
    """DataError for an empty caption line, invalid UTF-8 or NaN/inf features (in the images
    :func:`~itrlab.data.precomp.open_precomp` samples) of any split on disk; synthetic data not generated yet
    has nothing to read."""
    from itrlab.data.precomp import open_precomp

    dataset = config.dataset
    if dataset.kind == "synthetic" and not (Path(dataset.root) / "synthetic.json").is_file():
        return
    for role in ("train", "val", "test"):
        open_precomp(dataset.root, getattr(dataset.splits, role), dataset.captions_per_image)


def check_data(config: ExperimentConfig) -> DataSummary:
    """Check the config against the data's sizes; raises ConfigError or DataError."""
    from itrlab.eval import get_protocol

    check_text_encoder(config)
    if config.dataset.kind == "synthetic":
        summary = _synthetic_summary(config)
    else:
        summary = _precomp_summary(config)
    check_stored_text(config)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if config.train.loader_workers > 4 * cores:
        raise ConfigError("train.loader_workers", config.train.loader_workers,
                          f"at most 4 per core: {4 * cores} on this machine's {cores} cores")
    if config.train.batch_size > summary.n_train_captions:
        raise ConfigError("train.batch_size", config.train.batch_size,
                          f"must be at most the number of training captions ({summary.n_train_captions})")
    for field, role in (("val_protocol", "val"), ("test_protocol", "test")):
        name = getattr(config.eval, field)
        try:
            get_protocol(name).check(summary.n_images[role])
        except ValueError as err:
            raise ConfigError(f"eval.{field}", name, f"does not fit the {role} split: {err}") from None
    return summary


__all__ = ["DataError", "DataSummary", "check_data", "check_stored_text", "check_text_encoder"]
