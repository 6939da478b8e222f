"""Optuna's search over a sweep file's space, define-by-run, so that a dimension can be conditional.

A dimension with ``when`` (:class:`~itrlab.config.sweep.SearchDimension`) is suggested only in the
trials where the dimensions it names took one of its listed values: its key is then absent from the
trial's config, and TPE models it only over those trials (Optuna's conditional search spaces). Ray
Tune's :class:`~ray.tune.search.optuna.OptunaSearch` takes the define-by-run function as its space.

A sweep with several seeds runs each configuration Optuna suggests once per seed (:class:`SeedRepeater`, Ray's
:class:`~ray.tune.search.Repeater` with the repeat's index as the sweep's seed), and Optuna learns from the mean of
the configuration's trials: a configuration's value is then what its seeds have in common, and the report can tell a
parameter's effect from seed noise (:mod:`itrlab.report.importance`). Ray's Repeater keeps its groups in the
searcher object, not in the searcher's saved state: a ``--resume`` of an interrupted sweep runs on the trials Tune
saved, and a configuration whose seeds had not all started may end with fewer seeds (the report counts each
configuration's seeds).
"""

from __future__ import annotations

from typing import Any

from ray.tune.search import Repeater
from ray.tune.search.repeater import TRIAL_INDEX

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


class SeedRepeater(Repeater):
    """Ray's :class:`~ray.tune.search.Repeater` whose repeats are the sweep's seeds: the i-th trial of a suggested
    configuration gets ``seed = seeds[i]`` (in place of Ray's ``__trial_index__``), and the searcher is told the
    mean of the configuration's objective over them."""

    def __init__(self, searcher, seeds: list[int]):
        super().__init__(searcher, repeat=len(seeds), set_index=True)
        self.seeds = list(seeds)

    def suggest(self, trial_id: str) -> dict | None:
        config = super().suggest(trial_id)
        if isinstance(config, dict) and TRIAL_INDEX in config:
            config = dict(config)
            config["seed"] = self.seeds[config.pop(TRIAL_INDEX)]
        return config


def optuna_search(spec: SweepSpec):
    """Tune's Optuna searcher over ``spec``'s space, seeded TPE, maximising or minimising its objective; with
    several seeds, each configuration run on every one of them (:class:`SeedRepeater`)."""
    import optuna
    from ray.tune.search.optuna import OptunaSearch

    search = OptunaSearch(
        space=SearchSpace(spec.optuna.space),
        metric=spec.objective.metric,
        mode=spec.objective.mode,
        sampler=optuna.samplers.TPESampler(seed=spec.optuna.seed),
    )
    return SeedRepeater(search, spec.seeds) if len(spec.seeds) > 1 else search
