"""Optuna's search over a sweep file's space, define-by-run, so that a dimension can be conditional.

A dimension with ``when`` (:class:`~itrlab.config.sweep.SearchDimension`) is suggested only in the
trials where the dimensions it names took one of its listed values: its key is then absent from the
trial's config, and TPE models it only over those trials (Optuna's conditional search spaces). Ray
Tune's :class:`~ray.tune.search.optuna.OptunaSearch` takes the define-by-run function as its space.
"""

from __future__ import annotations

from typing import Any

from itrlab.config.sweep import SearchDimension, SweepSpec


class SearchSpace:
    """The define-by-run function of a sweep's Optuna space (picklable: Tune saves its searcher)."""

    def __init__(self, space: dict[str, SearchDimension]):
        self.space = space

    def __call__(self, trial) -> None:
        chosen: dict[str, Any] = {}
        for key, dim in self.space.items():
            if dim.applies(chosen):
                chosen[key] = suggest(trial, key, dim)


def suggest(trial, key: str, dim: SearchDimension) -> Any:
    """One value of ``dim`` from an Optuna trial (its ``suggest_*`` for the dimension's type)."""
    if dim.type == "choice":
        return trial.suggest_categorical(key, dim.values)
    if dim.type == "int":
        return trial.suggest_int(key, int(dim.low), int(dim.high))
    return trial.suggest_float(key, dim.low, dim.high, log=dim.type == "loguniform")


def optuna_search(spec: SweepSpec):
    """Tune's Optuna searcher over ``spec``'s space, seeded TPE, maximising or minimising its objective."""
    import optuna
    from ray.tune.search.optuna import OptunaSearch

    return OptunaSearch(
        space=SearchSpace(spec.optuna.space),
        metric=spec.objective.metric,
        mode=spec.objective.mode,
        sampler=optuna.samplers.TPESampler(seed=spec.optuna.seed),
    )
