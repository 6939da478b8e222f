"""Optuna's search over a sweep file's space, define-by-run, so that a dimension can be conditional: one with
``when`` (:class:`~itrlab.config.sweep.SearchDimension`) is suggested only where the dimensions it names took a
listed value, and TPE models it over those trials only.

With several seeds each suggested configuration runs once per seed (:class:`SeedRepeater`, Ray's ``Repeater``
with the repeat's index as the seed) and Optuna learns from their mean, so the report can tell a parameter's effect
from seed noise. A ``--resume`` asks again for a configuration whose seeds had not all ended, on every seed: the
ended ones report their saved result again.
"""

from __future__ import annotations

from pathlib import Path
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


STUDY_FILE = "optuna.db"  # the search's state, in the sweep's folder: Optuna's own SQLite storage


def optuna_search(spec: SweepSpec, sweep_dir: Path, resume: bool = False) -> tuple[Any, int]:
    """Tune's Optuna searcher over ``spec``'s space, seeded TPE, maximising or minimising its objective; with
    several seeds, each configuration run on every one of them (:class:`SeedRepeater`); and how many of its
    configurations an earlier invocation ended.

    The study lives in Optuna's SQLite storage in the sweep's folder (:data:`STUDY_FILE`), so that a ``--resume``
    continues the search from the configurations it ended (TPE learns from them again) and asks first for those
    that an interruption cut short (:func:`cut_short`), whose trials continue from their saved state."""
    import optuna
    from ray.tune.search.optuna import OptunaSearch

    storage = optuna.storages.RDBStorage(f"sqlite:///{Path(sweep_dir) / STUDY_FILE}")
    again, ended = cut_short(storage, spec.name) if resume else ([], 0)
    # a resumed sampler starts its random draws after those of the configurations asked for before (the same seed
    # would draw them again): the seed plus their count, so that the same history gives the same search
    seed = spec.optuna.seed + ended + len(again)
    search = OptunaSearch(
        space=SearchSpace(spec.optuna.space),
        metric=spec.objective.metric,
        mode=spec.objective.mode,
        sampler=optuna.samplers.TPESampler(seed=seed),
        study_name=spec.name,
        storage=storage,
        points_to_evaluate=again or None,
    )
    return (SeedRepeater(search, spec.seeds) if len(spec.seeds) > 1 else search), ended


def cut_short(storage, study_name: str) -> tuple[list[dict[str, Any]], int]:
    """(the configurations an interrupted invocation had asked for and not ended, each marked failed in the study
    so that TPE does not wait on it; how many configurations ended: complete, pruned or failed)."""
    from optuna.trial import TrialState

    try:
        study_id = storage.get_study_id_from_name(study_name)
    except KeyError:  # the search never asked for a configuration
        return [], 0
    again, ended = [], 0
    for trial in storage.get_all_trials(study_id, deepcopy=False):
        if trial.state in (TrialState.RUNNING, TrialState.WAITING):
            storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
            if trial.params:
                again.append(dict(trial.params))
        else:
            ended += 1
    return again, ended
