"""Checks that need more than the schema: registered names, loss parameters, and the data itself.

``check_names`` runs on every validated config. ``check_data`` opens only file headers (array shapes,
caption line counts) or the synthetic spec, so it is cheap, and runs before Ray, MLflow or training
start.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from itrlab.config.loader import did_you_mean
from itrlab.config.schema import ExperimentConfig
from itrlab.errors import ConfigError, DataError


@dataclass(frozen=True)
class ParamRule:
    allowed: str
    ok: Callable[[float], bool]


# Loss hyper-parameters by paper symbol; each loss declares which of them it takes.
PARAM_RULES: dict[str, ParamRule] = {
    "margin": ParamRule("a number >= 0 (the hinge margin α)", lambda v: v >= 0),
    "tau": ParamRule("a number > 0 (the temperature τ)", lambda v: v > 0),
}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_loss(config: ExperimentConfig) -> None:
    from itrlab.losses import LOSSES, loss_param_names

    name = config.loss.name
    if name not in LOSSES:
        raise ConfigError("loss.name", name, f"known losses: {', '.join(sorted(LOSSES))}", did_you_mean(name, LOSSES))
    allowed = loss_param_names(name)
    for key, value in config.loss.params().items():
        if key not in allowed:
            keys = ", ".join(("name", *allowed))
            raise ConfigError(f"loss.{key}", value, f"unknown key for loss '{name}'; allowed: {keys}", did_you_mean(key, allowed))
        rule = PARAM_RULES.get(key)
        if rule is not None and not (_is_number(value) and rule.ok(float(value))):
            raise ConfigError(f"loss.{key}", value, f"must be {rule.allowed}")


def check_names(config: ExperimentConfig) -> None:
    from itrlab.eval import PROTOCOLS
    from itrlab.methods import METHODS

    if config.method.name not in METHODS:
        raise ConfigError("method.name", config.method.name, f"known methods: {', '.join(sorted(METHODS))}",
                          did_you_mean(config.method.name, METHODS))
    check_loss(config)
    for field in ("val_protocol", "test_protocol"):
        protocol = getattr(config.eval, field)
        if protocol not in PROTOCOLS:
            raise ConfigError(f"eval.{field}", protocol, f"known protocols: {', '.join(sorted(PROTOCOLS))}",
                              did_you_mean(protocol, PROTOCOLS))


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
    return DataSummary(sizes, spec.captions_per_image, generated=not done)


def _precomp_summary(config: ExperimentConfig) -> DataSummary:
    from itrlab.data.precomp import inspect_precomp

    dataset = config.dataset
    if not dataset.root.is_dir():
        raise ConfigError("dataset.root", str(dataset.root), "must be an existing directory holding {split}_ims.npy and {split}_caps.txt")
    sizes = {}
    for role in ("train", "val", "test"):
        split = getattr(dataset.splits, role)
        info = inspect_precomp(dataset.root, split, captions_per_image=None)
        ratio = info.n_captions / max(info.n_images, 1)
        if ratio != dataset.captions_per_image:
            raise ConfigError("dataset.captions_per_image", dataset.captions_per_image,
                              f"split '{split}' in {dataset.root} has {info.n_captions} captions for "
                              f"{info.n_images} images ({ratio:g} per image)")
        sizes[role] = info.n_images
    return DataSummary(sizes, dataset.captions_per_image, generated=False)


def check_data(config: ExperimentConfig) -> DataSummary:
    """Check the config against the data's sizes; raises ConfigError or DataError."""
    from itrlab.eval import get_protocol

    if config.dataset.kind == "synthetic":
        summary = _synthetic_summary(config)
    else:
        summary = _precomp_summary(config)
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


__all__ = ["DataError", "DataSummary", "check_data", "check_names", "check_loss", "PARAM_RULES"]
