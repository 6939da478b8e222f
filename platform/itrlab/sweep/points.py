"""A sweep's trials as configs: the composed base experiment, each point's checked config, and a point's identity.
No Ray and no MLflow: ``--dry-run``, ``--list``, the runner and each trial use the same functions.
:func:`check_structure` types every trial against the declared schema without torch (a misspelt override is one
line in about a second); :func:`trial_config` adds the method's own checks (it imports torch).
"""

from __future__ import annotations

import copy
import json
from typing import Any

from itrlab.config import ExperimentConfig, compose, validate
from itrlab.config.loader import set_path
from itrlab.config.sweep import SweepSpec, named_row
from itrlab.errors import ConfigError
from itrlab.methods.sections import declared_schema


def base_tree(spec: SweepSpec, overrides: list[str]) -> dict[str, Any]:
    """The composed base experiment with paths made absolute (trials run in other directories)."""
    from itrlab.assembly import absolute_paths  # the method layer: torch

    return absolute_paths(compose(spec.experiment, [*spec.overrides, *overrides]))


POINT = "point"  # Tune's key of a sweep whose rows run their own seeds: each trial's whole grid point


def trial_point(params: dict[str, Any]) -> dict[str, Any]:
    """A trial's grid point (its dotted keys, named rows and seed) from the params Tune hands it: as they are, or,
    where rows run their own seeds (no product of grid and seeds), the point Tune holds under :data:`POINT`."""
    point = params.get(POINT) if isinstance(params, dict) else None
    return dict(point) if isinstance(point, dict) else params


def point_key(params: dict[str, Any]) -> str:
    """A trial's point (its dotted keys and values, a named variant's dict included) as one string, the
    same for the driver's grid point and the params Tune hands the trial."""
    return json.dumps(params, sort_keys=True, default=str)


def trial_tree(base_tree: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """The raw config tree of one trial: the base tree with the trial's dotted keys set."""
    tree = copy.deepcopy(base_tree)
    for key, value in params.items():
        if named_row(value, key):  # a named ablation row: several dotted keys at once
            for path, setting in value.items():
                if path != "name":
                    set_path(tree, path.split("."), setting)
        else:
            set_path(tree, key.split("."), value)
    return tree


def trial_config(base_tree: dict[str, Any], params: dict[str, Any]) -> ExperimentConfig:
    """The validated experiment config of one trial (:func:`trial_tree`, checked with its method's settings)."""
    from itrlab.assembly import check_config  # the method layer: torch

    return check_config(trial_tree(base_tree, params))


def check_structure(spec: SweepSpec, overrides: list[str]) -> None:
    """Every trial's config (the grid's points, or the corners of an Optuna space) against the declared
    schema (:func:`~itrlab.methods.sections.declared_schema`): a ConfigError for an unknown key or section,
    a bad type or a value out of range, a loss's or a scheme's setting it does not take or accept, before
    torch is imported. The method section's own keys are checked later, by :func:`trial_config`."""
    tree = compose(spec.experiment, [*spec.overrides, *overrides])
    schema = declared_schema()
    points = spec.search_corners() if spec.optuna else spec.grid_points()
    check_decay_choices(spec, [validate(trial_tree(tree, point), schema) for point in points])


def check_decay_choices(spec: SweepSpec, configs: list[ExperimentConfig]) -> None:
    """ConfigError (one line) for trials that choose their decay (``train.lr_decay_choices``: each trains one
    schedule after another, reporting more epochs than ``train.epochs``) in a sweep that cannot hold them: ASHA,
    whose rungs count a trial's reports as its epochs, and multi-worker (DDP) trials. Grouping refuses them on
    its own (:func:`itrlab.train.grouped.membership.group_refusal`)."""
    choosing = next((config for config in configs if config.train.lr_decay_choices), None)
    if choosing is None:
        return
    choices = choosing.train.lr_decay_choices
    if spec.asha is not None:
        raise ConfigError(
            "asha",
            spec.asha.model_dump(),
            f"trials with train.lr_decay_choices={choices} train one schedule after another and report each "
            f"epoch of each, which ASHA's rungs would read as epochs of one training: drop the asha section, or "
            f"the choices",
        )
    if spec.workers[0] > 1 or spec.trainer == "torch":
        raise ConfigError(
            "num_workers",
            spec.workers[0],
            f"trials with train.lr_decay_choices={choices} train their schedules in one process: use one "
            f"worker per trial (and trainer: auto), or train.lr_decay_epochs",
        )
