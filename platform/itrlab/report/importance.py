"""What a sweep found about its parameters: each parameter's importance for the objective, computed on each
configuration's mean over seeds (a configuration: a trial's point without its seed), beside the seeds' spread.

**Importance** is Optuna's seeded fANOVA on the configurations' means in the declared search space (each
parameter's share of the variance its main effect explains; parameters only some configurations set are not
weighed). **Effect** is the range of the parameter's partial dependence under a seeded scikit-learn random forest,
in the objective's units: on a full grid the range of its marginal means; in a random search it leaves out most of
what the other parameters did. **The seeds' spread** is the pooled standard deviation over seeds within
configurations, ``sqrt(sum((n_i - 1) s_i^2) / sum(n_i - 1))`` (unknown with one seed each). A parameter whose
effect is below that spread is *below the seed noise*: its importance tells what the noise favoured. Computed for
an Optuna search and a grid with a numeric axis (:func:`applies`); an ablation grid is read from its pivot.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from itrlab.config.sweep import SweepSpec, label
from itrlab.report.escape import md_text
from itrlab.report.pages import fragment
from itrlab.report.summary import TrialRow, markdown_table, metric_text

MIN_CONFIGURATIONS = 3  # fewer configurations with a value: no importance
SEED = 0  # fANOVA's random forest, and the partial dependence's
TREES = 64  # the partial dependence's forest: as many trees as fANOVA's
TITLE = "What the parameters did"
HEADER = ["parameter", "importance", "effect", "seeds' spread", "vs the seed noise"]
BELOW, ABOVE, UNKNOWN = "below the seed noise", "above the seed noise", "cannot tell (one seed)"


@dataclass
class Configuration:
    """One configuration: its parameters' values (as the report labels them) and its objective per seed."""

    params: dict[str, Any]
    values: list[float]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values)


@dataclass(frozen=True)
class ParamImportance:
    name: str
    importance: float | None  # fANOVA's share (None: not weighed, the reason in ``note``)
    effect: float | None  # the range of its partial dependence, in the objective's units
    verdict: str  # BELOW, ABOVE or UNKNOWN
    note: str = ""


@dataclass
class Importances:
    """The sweep's parameters, most important first, and what they were measured on."""

    objective: str  # the column, ``test_rsum``
    params: list[ParamImportance]
    seed_sd: float | None  # one run's spread over seeds, pooled; None with one seed per configuration
    configurations: int
    seeds: int  # the most seeds a configuration has
    left_out: int = 0  # trials left out: not finished, or without a value
    # for the parallel-coordinates plot: each configuration's params and mean, the parameters' distributions
    points: list[tuple[dict[str, Any], float]] = field(default_factory=list)
    space: dict[str, Any] = field(default_factory=dict)

    def rows(self) -> list[list[str]]:
        spread = "-" if self.seed_sd is None else metric_text(self.seed_sd, self.objective)
        return [
            [
                p.name,
                "-" if p.importance is None else f"{p.importance:.2f}",
                "-" if p.effect is None else metric_text(p.effect, self.objective),
                spread,
                p.verdict + (f" ({p.note})" if p.note else ""),
            ]
            for p in self.params
        ]

    def summary(self) -> str:
        """One line: the parameters in order of importance, each with its verdict."""
        parts = [
            f"{p.name} {'-' if p.importance is None else f'{p.importance:.2f}'} ({p.verdict})" for p in self.params
        ]
        return f"importance for {self.objective} (fANOVA): " + "; ".join(parts)

    def note(self) -> str:
        seeds = (
            f"over up to {self.seeds} seeds each"
            if self.seeds > 1
            else "one seed each, so no spread over seeds is known and no effect can be told from seed noise"
        )
        left = f"; {self.left_out} trials left out (not finished, or no {self.objective})" if self.left_out else ""
        return (
            f"What the parameters did, on {self.configurations} configurations' mean {self.objective} ({seeds}{left}). "
            f"Importance: Optuna's fANOVA on the configurations' means, each parameter's share of the variance its "
            f"main effect explains (the shares sum to 1). Effect: how far the parameter moves the mean over the values "
            f"the sweep tried, the others held as they were (the range of a random forest's partial dependence on "
            f"it). Seeds' spread: the standard deviation over seeds within a configuration, pooled. A parameter is "
            f"{BELOW} when its effect is smaller than that spread: moving it moved the mean less than another seed "
            f"moves one run, and its importance says which parameter the noise favoured, not which one matters."
        )

    def markdown(self) -> str:
        return "\n\n".join([f"**{md_text(TITLE)}**", markdown_table(HEADER, self.rows()), md_text(self.note())])

    def page_part(self) -> dict:
        """What the report's page shows of it (``templates/importance.html.j2``)."""
        return {"title": TITLE, "header": HEADER, "rows": self.rows(), "note": self.note()}

    def html(self) -> str:
        """The HTML of :meth:`page_part` alone: a title, a table and its note."""
        return fragment("importance.html.j2", "importance_table", self.page_part())

    def text(self) -> str:
        rows = [HEADER, *self.rows()]
        widths = [max(len(row[j]) for row in rows) for j in range(len(HEADER))]
        return "\n".join([TITLE, *("  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows)])

    def to_dict(self) -> dict:
        return {
            "objective": self.objective,
            "evaluator": "fanova",
            "seed_sd": self.seed_sd,
            "configurations": self.configurations,
            "seeds": self.seeds,
            "left_out": self.left_out,
            "params": [
                {"name": p.name, "importance": p.importance, "effect": p.effect, "verdict": p.verdict, "note": p.note}
                for p in self.params
            ],
        }


def applies(spec: SweepSpec) -> bool:
    """Whether the sweep's parameters get an importance: an Optuna search, or a grid with an axis of two or more
    numbers."""
    if spec.optuna is not None:
        return True
    return any(len(values) > 1 and _numeric(values) for key, values in spec.grid.items() if key != "seed")


def _numeric(values: list) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def search_space(spec: SweepSpec) -> dict[str, Any]:
    """The sweep's parameters as Optuna distributions: an Optuna sweep's dimensions, a grid's axes of two or more
    values (numbers as a range, an integer one as integers; other values as choices, by their labels)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if spec.optuna is not None:
        space = {}
        for key, dim in spec.optuna.space.items():
            if dim.type == "choice":
                space[key] = CategoricalDistribution([label(v, key) for v in dim.values])
            elif dim.type == "int":
                space[key] = IntDistribution(int(dim.low), int(dim.high))
            else:
                space[key] = FloatDistribution(dim.low, dim.high, log=dim.type == "loguniform")
        return space
    space = {}
    for key, values in spec.grid.items():
        if key == "seed" or len(values) < 2:
            continue
        if _numeric(values) and all(isinstance(v, int) for v in values):
            space[key] = IntDistribution(min(values), max(values))
        elif _numeric(values):
            space[key] = FloatDistribution(float(min(values)), float(max(values)))
        else:
            space[key] = CategoricalDistribution([label(v, key) for v in values])
    return space


def configurations(
    rows: list[TrialRow], keys: list[str], value_of: Callable[[TrialRow], Any]
) -> tuple[list[Configuration], int]:
    """The finished trials grouped by their ``keys`` (a key a trial lacks is left out of its configuration), each
    configuration's finite ``value_of`` per seed; and how many trials were left out."""
    groups: dict[str, Configuration] = {}
    left_out = 0
    for row in rows:
        value = value_of(row) if row.status == "finished" else None
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)):
            left_out += 1
            continue
        params = {key: label(row.params[key], key) for key in keys if key in row.params}
        found = groups.setdefault(repr(sorted(params.items(), key=str)), Configuration(params, []))
        found.values.append(float(value))
    return list(groups.values()), left_out


def pooled_sd(configs: list[Configuration]) -> float | None:
    """The pooled standard deviation over seeds within configurations; None where none has two seeds."""
    freedom = sum(len(c.values) - 1 for c in configs)
    if freedom < 1:
        return None
    return math.sqrt(
        sum((len(c.values) - 1) * statistics.variance(c.values) for c in configs if len(c.values) > 1) / freedom
    )


def _encoded(value: Any, distribution: Any) -> float:
    """A parameter's value as a forest's feature: a choice by its place in the choices, a number as it is (its
    logarithm where the search samples it so)."""
    choices = getattr(distribution, "choices", None)
    if choices is not None:
        return float(choices.index(value))
    return math.log10(value) if getattr(distribution, "log", False) else float(value)


def effects(configs: list[Configuration], space: Mapping[str, Any], keys: list[str]) -> dict[str, float]:
    """The range of each of ``keys``' partial dependence (module doc): a seeded random forest fitted to the
    configurations' means, its mean prediction with the key set to each value it took, the others as they were."""
    import numpy as np
    from sklearn.ensemble import RandomForestRegressor

    features = np.array([[_encoded(c.params[key], space[key]) for key in keys] for c in configs])
    forest = RandomForestRegressor(n_estimators=TREES, bootstrap=False, random_state=SEED)
    forest.fit(features, [c.mean for c in configs])
    found = {}
    for j, key in enumerate(keys):
        means = []
        for value in np.unique(features[:, j]):
            held = features.copy()
            held[:, j] = value
            means.append(float(forest.predict(held).mean()))
        found[key] = max(means) - min(means)
    return found


def fanova(configs: list[Configuration], space: Mapping[str, Any]) -> dict[str, float]:
    """fANOVA's importance of the parameters every configuration sets: each one's share of the variance of the
    configurations' means (their fitted forest's, over the search space) that the main effects explain, summing to
    1; all zero where every mean is the same."""
    import optuna
    from optuna.importance import FanovaImportanceEvaluator, get_param_importances

    keys = [key for key in space if all(key in c.params for c in configs)]
    if not keys:
        return {}
    if len({c.mean for c in configs}) < 2:
        return dict.fromkeys(keys, 0.0)
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "A new study created in memory" line
    try:
        study = optuna.create_study()
        study.add_trials(
            [
                optuna.trial.create_trial(
                    params={key: c.params[key] for key in keys},
                    distributions={key: space[key] for key in keys},
                    value=c.mean,
                )
                for c in configs
            ]
        )
        found = get_param_importances(study, evaluator=FanovaImportanceEvaluator(seed=SEED), params=keys)
    finally:
        optuna.logging.set_verbosity(verbosity)
    return {key: float(value) for key, value in found.items()}


def param_importances(
    rows: list[TrialRow], spec: SweepSpec, objective: str, value_of: Callable[[TrialRow], Any] | None = None
) -> Importances | None:
    """The importances of ``spec``'s parameters for ``objective`` (a trial's metric, or ``value_of`` a trial), or
    None when the sweep gets none (:func:`applies`) or fewer than :data:`MIN_CONFIGURATIONS` configurations have a
    value."""
    if not applies(spec):
        return None
    space = search_space(spec)
    configs, left_out = configurations(rows, list(space), value_of or (lambda row: row.metrics.get(objective)))
    if len(configs) < MIN_CONFIGURATIONS or not space:
        return None
    spread = pooled_sd(configs)
    shares = fanova(configs, space)
    sizes = effects(configs, space, list(shares))
    params = []
    for key in space:
        size = sizes.get(key)
        verdict = UNKNOWN if spread is None or size is None else BELOW if size < spread else ABOVE
        having = sum(key in c.params for c in configs)
        note = "" if key in shares else f"set in {having} of {len(configs)} configurations: not weighed"
        params.append(ParamImportance(key, shares.get(key), size, verdict, note))
    params.sort(key=lambda p: (p.importance is None, -(p.importance or 0.0)))
    seeds = max(len(c.values) for c in configs)
    points = [(c.params, c.mean) for c in configs]
    return Importances(objective, params, spread, len(configs), seeds, left_out, points=points, space=space)
