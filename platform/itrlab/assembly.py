"""One place that assembles an experiment: YAML and overrides in, a checked config and its data out.

Every entry point (``itrlab train`` and ``check-config``, each sweep trial, the benchmarks) goes
through here, and each check runs once::

    tree = compose(name, overrides)        # itrlab.config: the files and the overrides, merged
    config = check_config(tree)            # every section typed, ``method`` by its package's settings
                                           # (a union keyed by method.name); the task loss built once
                                           # (name, keys, values, warm-up) and what it reads held
                                           # against what the method gives; the scheme's section
                                           # (``cooperative``); the evaluation protocols
    experiment = check_experiment(config)  # the data: text-encoder files, split sizes, and the
                                           # method's own checks against them

:func:`load_experiment` is the first two steps, :func:`assemble` all three. Every problem is one
:class:`~itrlab.errors.ConfigError` (field, value, what is allowed), raised before Ray, MLflow or
any file of the run is touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Union

from pydantic import Field, ValidationError, create_model
from torch import nn

import itrlab.methods  # noqa: F401  (the import list: every method package registers itself)
from itrlab.config import ExperimentConfig, compose, validate
from itrlab.config.checks import DataSummary, check_data
from itrlab.config.loader import config_error_from_validation, did_you_mean, parse_override, set_path
from itrlab.errors import ConfigError
from itrlab.eval import PROTOCOLS
from itrlab.losses import LOSSES
from itrlab.methods.base import checked_task_loss
from itrlab.methods.context import BuildContext
from itrlab.methods.registry import METHODS, scheme_of


@dataclass(frozen=True)
class Experiment:
    """A checked config and the sizes of its data (known before any feature is read)."""

    config: ExperimentConfig
    data: DataSummary


def _typed_schema() -> type[ExperimentConfig]:
    """:class:`ExperimentConfig` with ``method`` typed by the registered methods' settings."""
    models = METHODS.settings_models()
    method = models[0] if len(models) == 1 else Annotated[Union[models], Field(discriminator="name")]
    schema = create_model("AssembledConfig", __base__=ExperimentConfig, __module__=__name__, method=(method, ...))
    schema.__qualname__ = "AssembledConfig"
    return schema


AssembledConfig = _typed_schema()  # module-level, so that configs pickle by reference (Ray)
_schema_methods = tuple(METHODS)


def experiment_schema() -> type[ExperimentConfig]:
    """The typed schema, rebuilt when a method was registered after this module was imported."""
    global AssembledConfig, _schema_methods
    if tuple(METHODS) != _schema_methods:
        AssembledConfig, _schema_methods = _typed_schema(), tuple(METHODS)
    return AssembledConfig


def check_loss(config: ExperimentConfig) -> nn.Module:
    """The task loss: a known name, known keys, values its constructor accepts, a sane warm-up; built once."""
    loss = config.loss
    if loss.name not in LOSSES:
        raise ConfigError("loss.name", loss.name, f"known losses: {', '.join(sorted(LOSSES))}",
                          did_you_mean(loss.name, LOSSES))
    allowed = LOSSES.param_names(loss.name)
    for key, value in loss.params().items():
        if key not in allowed:
            keys = ", ".join(("name", "warmup_epochs", "warmup_loss", *allowed))
            raise ConfigError(f"loss.{key}", value, f"unknown key for loss '{loss.name}'; allowed: {keys}",
                              did_you_mean(key, allowed))
    if loss.warmup_epochs and loss.warmup_loss not in LOSSES:
        raise ConfigError("loss.warmup_loss", loss.warmup_loss, f"known losses: {', '.join(sorted(LOSSES))}",
                          did_you_mean(loss.warmup_loss, LOSSES))
    if loss.warmup_epochs >= config.train.epochs:
        raise ConfigError("loss.warmup_epochs", loss.warmup_epochs,
                          f"fewer than train.epochs ({config.train.epochs}), or the main loss '{loss.name}' never trains")
    return checked_task_loss(loss)


def check_config(tree: dict[str, Any]) -> ExperimentConfig:
    """A composed tree as a checked config (no data is touched); raises ConfigError."""
    raw = validate(tree)
    name = raw.method.name
    if name not in METHODS:
        raise ConfigError("method.name", name, f"known methods: {', '.join(sorted(METHODS))}", did_you_mean(name, METHODS))
    method = METHODS[name]
    try:
        method.settings.model_validate(raw.method.model_dump(by_alias=True))
    except ValidationError as err:
        raise config_error_from_validation(err, method.settings, prefix="method.") from None
    config = validate(tree, experiment_schema())
    method.validate_config(config, check_loss(config))
    scheme = scheme_of(config)
    if scheme is not None:
        scheme.check(config)
    for field in ("val_protocol", "test_protocol"):
        protocol = getattr(config.eval, field)
        if protocol not in PROTOCOLS:
            raise ConfigError(f"eval.{field}", protocol, f"known protocols: {', '.join(sorted(PROTOCOLS))}",
                              did_you_mean(protocol, PROTOCOLS))
    check_stage_parts(config, stage_configs(config))  # each stage is an experiment of its own: checked as one
    return config


def parameter_names(config: ExperimentConfig) -> set[str] | None:
    """The state-dict keys of ``config``'s method as built (names only; None when it cannot be built
    without its data, e.g. a method that reads the training captions: the run checks then)."""
    try:
        return set(METHODS[config.method.name].from_config(config, BuildContext(feature_dim=8, vocab_size=8)).state_dict())
    except Exception:  # noqa: BLE001 - checked again when the run builds it
        return None


def _has_part(names: set[str], part: str) -> bool:
    return any(name == part or name.startswith(part + ".") for name in names)


def _parts(names: set[str], depth: int = 2) -> list[str]:
    return sorted({".".join(name.split(".")[:depth]) for name in names})


def check_stage_parts(config: ExperimentConfig, stages: list[ExperimentConfig]) -> None:
    """Every part a stage's ``copy`` names exists in that stage's model and in the next one's."""
    for spec, stage, following in zip(config.stages, stages, [*stages[1:], config]):
        theirs, ours = parameter_names(stage), parameter_names(following)
        if theirs is None or ours is None:
            continue
        for part in spec.copy_:
            in_stage, in_next = _has_part(theirs, part), _has_part(ours, part)
            if not (in_stage and in_next):
                lacking = "the next model" if in_stage else f"stage {spec.name}'s model"
                raise ConfigError(f"stages.{spec.name}.copy", part,
                                  f"{lacking} has no such part; parts of both: {', '.join(_parts(theirs & ours))}")


def stage_configs(config: ExperimentConfig) -> list[ExperimentConfig]:
    """The checked config of each of ``config``'s stages, in order: the experiment without its stages,
    with the stage's overrides applied. A problem names ``stages.<name>`` and the key."""
    configs = []
    for stage in config.stages:
        tree = {key: value for key, value in config.dump().items() if key != "stages"}
        try:
            for text in stage.overrides:
                path, value = parse_override(text)
                set_path(tree, path, value)
            configs.append(check_config(tree))
        except ConfigError as err:
            raise ConfigError(f"stages.{stage.name}.{err.field}", err.value, err.allowed, err.hint) from None
    return configs


def check_experiment(config: ExperimentConfig) -> Experiment:
    """``config`` against its data (file headers or the synthetic spec only); raises ConfigError or DataError."""
    summary = check_data(config)
    METHODS[config.method.name].check_data(config, summary)
    return Experiment(config, summary)


def load_experiment(experiment: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> ExperimentConfig:
    """Compose and check an experiment config (no data is touched)."""
    return check_config(compose(experiment, overrides))


def assemble(experiment: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Experiment:
    """Compose an experiment, check its config, then its data."""
    return check_experiment(load_experiment(experiment, overrides))


__all__ = ["AssembledConfig", "Experiment", "assemble", "check_config", "check_experiment", "check_loss",
           "experiment_schema", "load_experiment", "stage_configs"]
