"""Grouped sweeps: ``group: G`` in a sweep file (or ``--group G``) packs its trials into groups of G that train
together in one process as one batched model (:mod:`itrlab.train.grouped`; packing:
:func:`itrlab.train.grouped.membership.pack_groups`, fed the trials in grid order).

Bad input is one line and exit 2 before Ray or MLflow start: G larger than the trials or than the largest set of
one shape, a method or setting that cannot be grouped, an Optuna search, ASHA, multi-worker trials. In Tune one
trial holds one group (:mod:`itrlab.sweep.group_trial`), its members sharing the per-trial resources.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ray import tune

from itrlab.config import ExperimentConfig
from itrlab.config.sweep import SweepSpec, row_key, row_label
from itrlab.errors import ConfigError
from itrlab.sweep.points import trial_config
from itrlab.train.grouped.membership import pack_groups

GROUP = "group"  # the param-space key of a grouped sweep's trials: {"index": i, "members": [grid point, ...]}


@dataclass(frozen=True)
class Group:
    points: list[dict[str, Any]]  # the members' grid points, seed included, in grid order
    configs: list[ExperimentConfig]


def _label(spec: SweepSpec, point: dict[str, Any]) -> str:
    keys = spec.table.rows if spec.table else list(spec.grid)
    return f"{row_label(row_key(point, keys))} seed {point.get('seed')}"


def check_groupable(spec: SweepSpec, points: list[dict[str, Any]]) -> None:
    """ConfigError (one line) for a sweep whose search cannot be grouped (see the module doc)."""
    size = spec.group
    if spec.optuna is not None:
        raise ConfigError(
            "group",
            size,
            "grouped training packs a grid's trials; an Optuna search proposes one trial at a time: use group: 1",
        )
    if spec.asha is not None:
        raise ConfigError(
            "group",
            size,
            "ASHA stops trials by their own results; a group's members train together: "
            "drop the asha section or use group: 1",
        )
    if spec.workers[0] > 1 or spec.trainer == "torch":
        raise ConfigError(
            "group",
            size,
            "a group trains in its trial's process; multi-worker (DDP) trials cannot "
            "hold one: use one worker per trial",
        )
    if size > len(points):
        raise ConfigError("group", size, f"at most the sweep's {len(points)} trials")


def plan_groups(spec: SweepSpec, points: list[dict[str, Any]], configs: list[ExperimentConfig]) -> list[Group]:
    """The sweep's groups (one per trial when ``spec.group`` is 1); UserInputError for bad input."""
    if spec.group == 1:
        return [Group([point], [config]) for point, config in zip(points, configs)]
    check_groupable(spec, points)
    groups = pack_groups(configs, spec.group, label=lambda index: _label(spec, points[index]))
    return [Group([points[i] for i in indices], [configs[i] for i in indices]) for indices in groups]


def sweep_groups(spec: SweepSpec, tree: dict[str, Any]) -> list[Group]:
    """The groups of a grid sweep whose base experiment is ``tree`` (checked before anything starts)."""
    points = spec.grid_points()
    return plan_groups(spec, points, [trial_config(tree, point) for point in points])


def group_param_space(groups: list[Group]) -> dict[str, Any]:
    """Tune's param space of a grouped sweep: one trial per group, its members' grid points as its config."""
    return {GROUP: tune.grid_search([{"index": i, "members": group.points} for i, group in enumerate(groups)])}
