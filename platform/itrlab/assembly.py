"""One place that assembles an experiment: YAML and overrides in, a checked config and its data out.

Every entry point (``itrlab train`` and ``check-config``, each sweep trial, the benchmarks) goes through here, and each
check runs once (docs/architecture.md, "Assembly")::

    tree = compose(name, overrides)        # itrlab.config: the files and the overrides, merged
    config = check_config(tree)            # every section typed once (loss and schemes by their declared
                                           # settings, without torch; method by its settings); what the
                                           # loss reads held against what the method gives; the protocols
    experiment = check_experiment(config)  # the data, and the method's own checks against it

:func:`load_experiment` is the first two steps, :func:`assemble` all three. Every problem is one
:class:`~itrlab.errors.ConfigError` (field, value, what is allowed), raised before Ray, MLflow or any file of the run is
touched.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Union

from pydantic import BaseModel, Field, ValidationError, create_model

import itrlab.methods  # noqa: F401  (the import list: every method package declares itself)
from itrlab.config import ExperimentConfig, compose
from itrlab.config.checks import DataSummary, check_data
from itrlab.config.loader import config_error_from_validation, did_you_mean, parse_override, set_path
from itrlab.config.schema import LossConfig, TrainConfig
from itrlab.errors import ConfigError
from itrlab.eval import PROTOCOLS
from itrlab.methods.context import BuildContext
from itrlab.methods.registry import METHODS, SCHEMES, method_settings_models
from itrlab.methods.sections import declared_schema

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class Experiment:
    """A checked config and the sizes of its data (known before any feature is read), and, once placed where
    the run starts (:func:`itrlab.train.device.place`), the device it trains on."""

    config: ExperimentConfig
    data: DataSummary
    device: torch.device | None = None


def _typed_schema() -> type[ExperimentConfig]:
    """The declared schema (:func:`~itrlab.methods.sections.declared_schema`: the ``loss`` section and a
    section for each registered scheme typed by their settings) with ``method`` typed by the methods' settings."""
    models = method_settings_models()
    method = models[0] if len(models) == 1 else Annotated[Union[models], Field(discriminator="name")]  # noqa: UP007 - a union of the tuple's types
    schema = create_model("AssembledConfig", __base__=declared_schema(), __module__=__name__, method=(method, ...))
    schema.__qualname__ = "AssembledConfig"
    return schema


AssembledConfig = _typed_schema()  # module-level, so that configs pickle by reference (Ray)
_schema_parts = (tuple(METHODS), tuple(SCHEMES))


def experiment_schema() -> type[ExperimentConfig]:
    """The typed schema, rebuilt when a method or scheme was registered after this module was imported."""
    global AssembledConfig, _schema_parts
    if (tuple(METHODS), tuple(SCHEMES)) != _schema_parts:
        AssembledConfig, _schema_parts = _typed_schema(), (tuple(METHODS), tuple(SCHEMES))
    return AssembledConfig


def _method_name(tree: dict[str, Any]) -> str:
    """The tree's ``method.name``, a registered method's (checked before the section is typed by it)."""
    method = tree.get("method")
    name = method.get("name") if isinstance(method, dict) else None
    if name is None:
        raise ConfigError("method.name", None, f"this key is required; known methods: {', '.join(sorted(METHODS))}")
    if name not in METHODS:
        raise ConfigError(
            "method.name", name, f"known methods: {', '.join(sorted(METHODS))}", did_you_mean(name, METHODS)
        )
    return name


def _typed(tree: dict[str, Any], method_settings: type[BaseModel]) -> ExperimentConfig:
    """``tree`` validated once by the typed schema. An error inside the ``method`` section is reported by
    the method's own settings class (pydantic's location through the union names the union's member)."""
    try:
        return experiment_schema().model_validate(tree)
    except ValidationError as err:
        error = err
    if error.errors()[0]["loc"][:1] == ("method",):
        try:
            method_settings.model_validate(tree["method"])
        except ValidationError as own:
            raise config_error_from_validation(own, method_settings, prefix="method.") from None
    raise config_error_from_validation(error, experiment_schema()) from None


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_length(tree: dict[str, Any]) -> None:
    """A run at least as long as its loss's warm-up (``train.epochs=1`` with a one-epoch warm-up would train nothing
    else), refused with one sentence that gives the epochs its warm-up and its learning-rate decay call for, or the
    overrides of a short run. Checked on the composed tree, before typing, so that a decay the short run cannot reach is
    named in the same sentence (a decay alone that cannot fire is :class:`itrlab.config.schema.TrainConfig`'s error);
    values of the wrong type are left to the typing."""
    train, loss = tree.get("train") or {}, tree.get("loss") or {}
    if not isinstance(train, dict) or not isinstance(loss, dict):
        return
    epochs = train.get("epochs", TrainConfig.model_fields["epochs"].default)
    warmup, milestones = loss.get("warmup_epochs", 0), train.get("lr_decay_epochs") or []
    if not (_count(epochs) and _count(warmup) and isinstance(milestones, list) and all(map(_count, milestones))):
        return
    if not 0 < epochs <= warmup:
        return
    main, before = loss.get("name"), loss.get("warmup_loss", LossConfig.model_fields["warmup_loss"].default)
    late = [e for e in milestones if e >= epochs]
    needed = max([warmup + 1, *(e + 1 for e in late)])
    first = "first epoch" if warmup == 1 else f"first {warmup} epochs"
    why = (
        f"loss.warmup_epochs={warmup} trains the warm-up loss '{before}' for the {first} and the main loss "
        f"'{main}' only after {'it' if warmup == 1 else 'them'}"
    )
    if late:
        why += (
            f", and train.lr_decay_epochs={milestones} decays the rate after epoch {late[-1]} "
            f"({late[0]} can never fire with train.epochs={epochs})"
        )
    short = f"train.epochs={warmup + 1}" + (" train.lr_decay_epochs=[]" if late else "")
    fix = f"set train.epochs={needed} or more" + (
        f", or for a short run {short}" if short != f"train.epochs={needed}" else ""
    )
    raise ConfigError(
        "train.epochs" if late else "loss.warmup_epochs",
        epochs if late else warmup,
        f"train.epochs={epochs} is too short for this schedule: {why}; {fix} (docs/training.md#a-short-run)",
    )


def check_config(tree: dict[str, Any]) -> ExperimentConfig:
    """A composed tree as a checked config (no data is touched); raises ConfigError."""
    check_length(tree)
    method = METHODS[_method_name(tree)]
    config = _typed(tree, method.settings)
    method.validate_config(config)
    for field in ("val_protocol", "test_protocol"):
        protocol = getattr(config.eval, field)
        if protocol not in PROTOCOLS:
            raise ConfigError(
                f"eval.{field}",
                protocol,
                f"known protocols: {', '.join(sorted(PROTOCOLS))}",
                did_you_mean(protocol, PROTOCOLS),
            )
    check_stage_parts(config, stage_configs(config))  # each stage is an experiment of its own: checked as one
    return config


def _relative_paths(section: BaseModel, at: tuple[str, ...] = ()):
    """(dotted key, path) of every relative path setting of a typed config, any section's."""
    for name, field in type(section).model_fields.items():
        value, key = getattr(section, name), (*at, field.alias or name)
        if isinstance(value, BaseModel):
            yield from _relative_paths(value, key)
        elif isinstance(value, Path) and not value.is_absolute():
            yield key, value


def absolute_paths(tree: dict[str, Any]) -> dict[str, Any]:
    """``tree`` with every path setting it resolves to (a data root, the output folder, a checkpoint a
    scheme starts from ...) made absolute, for processes that run elsewhere (a sweep's trials). A tree
    that does not validate is returned as it is: its own check reports why."""
    try:
        config = _typed(tree, METHODS[_method_name(tree)].settings)
    except ConfigError:
        return tree
    for key, path in _relative_paths(config):
        set_path(tree, list(key), str(path.expanduser().resolve()))
    return tree


def parameter_names(config: ExperimentConfig) -> set[str] | None:
    """The state-dict keys of ``config``'s method as built (names only; None when it cannot be built
    without its data, e.g. a method that reads the training captions: the run checks then).

    Built on the meta device first, where a parameter is a shape without memory or initialisation (a
    paper-shaped model's random initialisation is most of a sweep's dry run); a method whose building reads
    values (a file's weights, a tensor's contents) fails there and is built on the CPU."""
    import torch

    method, context = METHODS[config.method.name], BuildContext(feature_dim=8, vocab_size=8)
    for device in ("meta", "cpu"):
        try:
            with torch.device(device):
                return set(method.from_config(config, context).state_dict())
        except Exception:  # noqa: BLE001, S112 - the CPU next; the run checks again when it builds it
            continue
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
                raise ConfigError(
                    f"stages.{spec.name}.copy",
                    part,
                    f"{lacking} has no such part; parts of both: {', '.join(_parts(theirs & ours))}",
                )


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


__all__ = [
    "AssembledConfig",
    "Experiment",
    "absolute_paths",
    "assemble",
    "check_config",
    "check_experiment",
    "check_length",
    "experiment_schema",
    "load_experiment",
    "stage_configs",
]
