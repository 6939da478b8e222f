"""The report of a sweep without a pivot (an Optuna search; a grid without a ``table`` section): its configurations
over seeds, as a :class:`~itrlab.report.paper_report.PaperReport`, with what the parameters did
(:mod:`itrlab.report.importance`) and the parallel-coordinates plot.

One row per configuration, ranked by what the search optimised (the mean over finished seeds of the objective at
each trial's best epoch), beside its test objective over seeds; at most :data:`MAX_ROWS` rows
(``sweep/trials.json`` holds every trial). The headline names the best configuration: picked on validation,
reported on test.
"""

from __future__ import annotations

import statistics
from typing import Any

from itrlab.config.sweep import SweepSpec, label
from itrlab.eval.names import METRIC_NAMES
from itrlab.report.importance import Importances
from itrlab.report.paper_report import HEADERS, PaperReport, cell
from itrlab.report.stats import finite, mean_interval
from itrlab.report.summary import TrialRow, objective_value

MAX_ROWS = 20


def swept_keys(spec: SweepSpec) -> list[str]:
    """The keys a trial is told apart by, besides its seed: the table's rows, else the grid's or the search's keys."""
    if spec.table is not None and spec.optuna is None:
        keys = list(spec.table.rows)
    elif spec.optuna is not None:
        keys = list(spec.optuna.space)
    else:
        keys = list(spec.grid or {})
    return [key for key in keys if key != "seed"]


def test_objective(spec: SweepSpec) -> str:
    """The test column a sweep's result is read in: ``test_<objective>`` for a recall table's metric, else
    ``test_rsum`` (the loss has no test counterpart)."""
    return f"test_{spec.objective.metric}" if spec.objective.metric in METRIC_NAMES.values() else "test_rsum"


def short_names(keys: list[str]) -> list[str]:
    """Each dotted key by its last part (``gamma`` for ``cooperative.gamma``), the whole key where two share one."""
    last = [key.rsplit(".", 1)[-1] for key in keys]
    return [part if last.count(part) == 1 else key for part, key in zip(last, keys)]


def shown(value: Any) -> str:
    """A parameter's value in a cell: a float to 3 significant digits, a missing one (a conditional dimension that
    does not apply) as ``-``."""
    if value is None:
        return "-"
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def configuration_label(params: dict[str, Any], keys: list[str]) -> str:
    """``strategy=F gamma=0.21``: a configuration's values, each key by its last part."""
    return " ".join(f"{name}={shown(params[key])}" for name, key in zip(short_names(keys), keys) if key in params)


def configuration_rows(spec: SweepSpec, rows: list[TrialRow]) -> list[tuple[dict[str, Any], list[TrialRow]]]:
    """Every configuration's params (labels) and its finished trials, best first by the mean objective at the
    trials' best epochs; configurations with no finished trial left out."""
    keys, metric = swept_keys(spec), spec.objective.metric
    groups: dict[str, tuple[dict[str, Any], list[TrialRow]]] = {}
    for row in rows:
        if row.status != "finished" or not finite(objective_value(row, metric)):
            continue
        params = {key: label(row.params[key], key) for key in keys if key in row.params}
        groups.setdefault(repr(sorted(params.items(), key=str)), (params, []))[1].append(row)
    sign = -1.0 if spec.objective.mode == "max" else 1.0
    return sorted(
        groups.values(), key=lambda group: sign * statistics.fmean(objective_value(r, metric) for r in group[1])
    )


def build_search_report(
    spec: SweepSpec, rows: list[TrialRow], importance: Importances | None, provenance: list[str]
) -> PaperReport | None:
    """The report of ``rows`` (module doc); None when no trial finished."""
    ranked = configuration_rows(spec, rows)
    if not ranked:
        return None
    keys, metric, test = swept_keys(spec), spec.objective.metric, test_objective(spec)
    grid_seeds = len(spec.seeds)
    header = [*short_names(keys), f"val {metric}", f"test {HEADERS.get(test, test)}", "seeds"]
    table = []
    for params, members in ranked[:MAX_ROWS]:
        found = mean_interval([float(m.metrics[test]) for m in members if finite(m.metrics.get(test))])
        validation = statistics.fmean(objective_value(m, metric) for m in members)
        table.append(
            [
                *(shown(params.get(key)) for key in keys),
                f"{validation:.1f}",
                cell(found.value, found.half_width, found.n, grid_seeds, test),
                str(len(members)),
            ]
        )
    best_params, best = ranked[0]
    result = mean_interval([float(m.metrics[test]) for m in best if finite(m.metrics.get(test))])
    seeds = f"{len(best)} seed{'s' if len(best) != 1 else ''}"
    headline = (
        f"best of {len(ranked)} configurations by validation {metric} (mean over its {seeds}): "
        f"{configuration_label(best_params, keys) or 'the base experiment'}: test {HEADERS.get(test, test)} "
        f"{cell(result.value, result.half_width, result.n, result.n, test)}"
    )
    what = "Optuna's configurations" if spec.optuna is not None else "the grid's points"
    notes = [
        f"Rows: {what}, ranked by their mean validation {metric} at each trial's best epoch (what the search "
        f"optimised); test: mean ± 95% Student-t interval over the configuration's finished seeds (the seed count "
        f"where it is not the sweep's {grid_seeds}; one seed: its value, no interval)."
        + (
            f" The {len(ranked) - MAX_ROWS} configurations ranked below these are in sweep/trials.json."
            if len(ranked) > MAX_ROWS
            else ""
        )
    ]
    left = sum(row.status != "finished" for row in rows)
    if left:
        notes.append(f"{left} of {len(rows)} trials did not finish (sweep/trials.json says why): left out.")
    report = PaperReport(
        f"{spec.name}: {what} over seeds {spec.seeds}",
        header,
        table,
        ["result"] * len(table),
        headline,
        notes,
        provenance,
    )
    report.importance = importance
    return report
