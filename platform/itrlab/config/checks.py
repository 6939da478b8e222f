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
    "gamma": ParamRule("a number >= 0 (DBL's margin γ)", lambda v: v >= 0),
    "alpha": ParamRule("a number in [0, 1] (DBL's split α of γ into γ1 = αγ, γ2 = γ - αγ)", lambda v: 0 <= v <= 1),
}


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_params(section: str, loss_name: str, params: dict[str, Any], allowed: tuple[str, ...], fixed: tuple[str, ...]) -> None:
    """Every key of ``params`` is a parameter of the loss, and numeric ones are in range."""
    for key, value in params.items():
        if key not in allowed:
            keys = ", ".join((*fixed, *allowed))
            raise ConfigError(f"{section}.{key}", value, f"unknown key for {section} '{loss_name}'; allowed: {keys}",
                              did_you_mean(key, allowed))
        rule = PARAM_RULES.get(key)
        if rule is not None and not (_is_number(value) and rule.ok(float(value))):
            raise ConfigError(f"{section}.{key}", value, f"must be {rule.allowed}")


def check_loss(config: ExperimentConfig) -> None:
    from itrlab.losses import LOSSES

    name = config.loss.name
    if name not in LOSSES:
        raise ConfigError("loss.name", name, f"known losses: {', '.join(sorted(LOSSES))}", did_you_mean(name, LOSSES))
    _check_params("loss", name, config.loss.params(), LOSSES.param_names(name), ("name", "warmup_epochs", "warmup_loss"))
    warmup = config.loss.warmup_loss
    if config.loss.warmup_epochs and warmup not in LOSSES:
        raise ConfigError("loss.warmup_loss", warmup, f"known losses: {', '.join(sorted(LOSSES))}",
                          did_you_mean(warmup, LOSSES))
    if config.loss.warmup_epochs >= config.train.epochs:
        raise ConfigError("loss.warmup_epochs", config.loss.warmup_epochs,
                          f"fewer than train.epochs ({config.train.epochs}), or the main loss '{name}' never trains")


def check_cooperative(config: ExperimentConfig) -> None:
    """The cooperative section: one of loss/strategy, a known name, its parameters, the scenario's needs."""
    cooperative = config.cooperative
    if cooperative is None:
        return
    from itrlab.losses import COOPERATIVE_LOSSES
    from itrlab.losses.boosting import DBL_STRATEGIES, build_dbl_strategy

    if cooperative.strategy is not None:
        if cooperative.loss is not None:
            raise ConfigError("cooperative.loss", cooperative.loss, "give either cooperative.loss or cooperative.strategy, not both")
        if cooperative.strategy not in DBL_STRATEGIES:
            raise ConfigError("cooperative.strategy", cooperative.strategy,
                              f"DBL Table IV strategies: {', '.join(DBL_STRATEGIES)}")
        for key, value in cooperative.params().items():
            _check_params("cooperative", f"strategy {cooperative.strategy}", {key: value}, (key,), ())
        try:
            build_dbl_strategy(cooperative.strategy, **cooperative.params())
        except ValueError as err:
            raise ConfigError("cooperative.strategy", cooperative.strategy, str(err)) from None
    elif cooperative.loss is None:
        raise ConfigError("cooperative.loss", None, f"name a cooperative loss ({', '.join(sorted(COOPERATIVE_LOSSES))}) "
                          f"or a DBL strategy ({', '.join(DBL_STRATEGIES)})")
    elif cooperative.loss not in COOPERATIVE_LOSSES:
        raise ConfigError("cooperative.loss", cooperative.loss, f"known cooperative losses: {', '.join(sorted(COOPERATIVE_LOSSES))}",
                          did_you_mean(cooperative.loss, COOPERATIVE_LOSSES))
    else:
        fixed = ("scenario", "loss", "strategy", "branches", "weight", "anchor_checkpoint", "ema")
        _check_params("cooperative", cooperative.loss, cooperative.params(),
                      COOPERATIVE_LOSSES.param_names(cooperative.loss), fixed)
    if cooperative.scenario in ("oas", "mss") and cooperative.branches != 2:
        raise ConfigError("cooperative.branches", cooperative.branches,
                          f"the {cooperative.scenario} scenario has exactly 2 branches; cohorts of more need oss")
    checkpoint = cooperative.anchor_checkpoint
    if checkpoint is not None and (cooperative.scenario != "oas" or not checkpoint.is_file()):
        allowed = "must be an existing checkpoint file (model.pt or best.pt of a plain run)" if cooperative.scenario == "oas" \
            else "only the oas scenario takes an anchor checkpoint"
        raise ConfigError("cooperative.anchor_checkpoint", str(checkpoint), allowed)


def check_names(config: ExperimentConfig) -> None:
    from itrlab.eval import PROTOCOLS
    from itrlab.methods import METHODS

    if config.method.name not in METHODS:
        raise ConfigError("method.name", config.method.name, f"known methods: {', '.join(sorted(METHODS))}",
                          did_you_mean(config.method.name, METHODS))
    check_loss(config)
    check_cooperative(config)
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


def check_data(config: ExperimentConfig) -> DataSummary:
    """Check the config against the data's sizes; raises ConfigError or DataError."""
    from itrlab.eval import get_protocol

    check_text_encoder(config)
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


__all__ = ["DataError", "DataSummary", "check_data", "check_names", "check_loss", "check_text_encoder", "PARAM_RULES"]
