"""What a sweep leaves on its MLflow parent run when it ends, and what it prints last.

``sweep/trials.json`` (every trial ranked by its objective, with the reason of those that did not finish); for a
grid with a ``table`` section, ``sweep/table.json`` (the pivot), the paper-shaped report
(:mod:`itrlab.report.paper_report`), its headline as tags and metrics, and the same table printed last; for a
sweep without a pivot, ``sweep/best.json`` and the report of its configurations (:mod:`itrlab.report.search_report`);
for a search or a numeric grid, what the parameters did (:mod:`itrlab.report.importance`) and their
parallel-coordinates plot; the parent run's description (links to the report and the trials' view, then the
headline); ``sweep/plots/`` and ``sweep/summary.json`` (what ``itrlab report`` pages from). The tables are
rewritten whole, so a resumed sweep's rows replace the previous invocation's; the summary writes a missing number
as null (JSON has no NaN).
"""

from __future__ import annotations

import logging
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from itrlab.config.schema import ExperimentConfig
from itrlab.config.sweep import SweepSpec, row_key, row_label, seeds_text
from itrlab.data.shape import DataShape
from itrlab.errors import failure_reason
from itrlab.report.analysis import smallest_mdes
from itrlab.report.anchors import reference_rows
from itrlab.report.chance import ChanceLevel, chance_on_test, config_data_shape
from itrlab.report.convergence import (
    Convergence,
    chosen_decays,
    decay_choices,
    decay_epochs,
    row_convergence,
    tolerance,
)
from itrlab.report.escape import md_text
from itrlab.report.headline import Headline, headline, objective_column, row_marks
from itrlab.report.importance import Importances, param_importances
from itrlab.report.paper_report import PaperReport, ReportInputs, build_report
from itrlab.report.pivot import comparisons, pivot, published_numbers, trial_cost_unit
from itrlab.report.plots import plot_curves, plot_parallel, plot_pivot
from itrlab.report.search_report import build_search_report, configuration_label, swept_keys, test_objective
from itrlab.report.stats import Comparison
from itrlab.report.summary import TrialRow, best_row, objective_value, ranked_table, ranking_note, to_markdown, to_text
from itrlab.sweep.outcome import RETRIED
from itrlab.sweep.runs_table import trials_view_id
from itrlab.tracking import MlflowTracker
from itrlab.tracking.models import GALLERY_TAG, MODEL_TAG
from itrlab.tracking.store import ui_fragment, ui_link

_log = logging.getLogger(__name__)

STATUSES = ("finished", "diverged", "stopped", "error", "interrupted", "not started")
REPORT = "sweep/report.html"
REPORT_LINK = "The report"  # the text of the description's link to REPORT


@dataclass(frozen=True)
class SweepReport:
    """What :func:`report_sweep` left on the parent run that the sweep's result names."""

    headline: str | None  # the pivot's one headline (itrlab.report.headline); None without a pivot
    page: str | None  # the report's artifact path (REPORT); None when none was written (no trial finished)


def report_sweep(
    spec: SweepSpec,
    rows: list[TrialRow],
    parent: MlflowTracker,
    config: ExperimentConfig,
    invocation_seconds: float | None = None,
) -> SweepReport:
    """Log and print the sweep's results (see the module doc); returns the pivot's headline and whether a report
    was written. ``invocation_seconds``: this invocation's wall time so far, the one wall time a sweep reports (a
    resumed sweep's earlier invocations, and the gaps between them, are not in it)."""
    title = f"{spec.name}: trials {ranking_note(spec)}"
    runs = trial_curves(parent)
    links = trial_links(parent, runs)
    trials = ranked_table(rows, spec, links)
    parent.replace_table(trials, "sweep/trials.json")
    _log.info("\n" + to_text({key: column for key, column in trials.items() if key != "reason"}, title))
    for row in rows:  # reasons on stderr
        if row.status == "error":
            _log.warning(f"trial {row.trial_id} failed: {row.reason}")
        elif row.metrics.get(RETRIED):  # finished after a lost node or a killed process
            _log.warning(f"trial {row.trial_id} {row.metrics[RETRIED]}")
    counts = {status: sum(r.status == status for r in rows) for status in STATUSES}
    parent.log_final_metrics({f"trials_{k.replace(' ', '_')}": v for k, v in counts.items()})
    shape, protocol = config_data_shape(config), config.eval.test_protocol
    summary = {
        "sweep": spec.name,
        "description": spec.description,
        "experiment": spec.experiment,
        "grid": spec.grid,
        "seeds": spec.seeds,
        "objective": f"{spec.objective.mode} {spec.objective.metric}",
        "dataset": config.dataset.name,
        "data_shape": shape.to_dict() if shape else None,
        "test_protocol": protocol,
        "trial_counts": counts,
        "trials": trials,
        "ranking": ranking_note(spec),
        "table_rows": spec.table.rows if spec.table is not None else None,
        "invocation_seconds": round(invocation_seconds, 1) if invocation_seconds is not None else None,
        # the trials in MLflow's runs table (itrlab.sweep.runs_table), under the UI's address
        "runs_table": ui_link("", parent.experiment_id, view=trials_view_id(parent.run_id)),
    }
    importance = sweep_importance(spec, rows)
    if importance is not None:
        parent.log_dict(json_safe(importance.to_dict()), "sweep/importance.json")
        summary["importance"] = json_safe(importance.to_dict())
    grid, report, chance, top = None, None, None, None
    if spec.table is not None and spec.optuna is None:
        grid = pivot(rows, spec, shape, protocol)
        parent.replace_table(grid, "sweep/table.json")
        chance = chance_on_test(shape, protocol)
        curves, decays, chosen = validation_curves(spec, rows, runs)
        converged = row_convergence(curves, row_tolerances(spec, grid, rows), decays, chosen)
        synthetic = config.dataset.name if shape is not None and shape.synthetic else None
        top = headline(grid, spec, chance, {row: found.learning for row, found in converged.items()}, synthetic)
        summary["convergence"] = {row: found.to_dict() for row, found in converged.items()}
        if top is not None:
            pairs = comparisons(rows, spec, top.column)
            report = build_report(grid, spec, report_inputs(grid, spec, config, shape, chance, top, pairs, converged))
            report.models = model_rows(spec, rows, links)
            report.importance = importance
            summary["comparisons"] = [pair.to_dict() for pair in pairs]
    else:
        log_best_trial(spec, rows, parent)
        report = build_search_report(spec, rows, importance, provenance(spec, config, shape))
        if report is not None:
            report.models = model_rows(spec, rows, links)
    with tempfile.TemporaryDirectory() as tmp:
        plots = draw_plots(spec, rows, runs, grid, chance, Path(tmp), importance)
        for path in plots.values():
            parent.log_file(path, "sweep/plots")
        summary["plots"] = [f"sweep/plots/{path.name}" for path in plots.values()]
        markdown = to_markdown(trials, title)
        if report is not None:
            parent.log_text(report.html(plots), "sweep/report.html")
            parent.log_text(
                report.markdown({caption: f"plots/{path.name}" for caption, path in plots.items()}), "sweep/report.md"
            )
            markdown = report.markdown() + "\n" + markdown
        if top is not None:
            parent.set_tags(top.tags())
            parent.log_final_metrics(top.metrics)
            summary.update(
                report=report_dict(report),
                headline=top.text,
                table_paper=spec.table.paper,
                table_anchors=spec.table.anchors,
            )
        parent.log_text(markdown, "sweep/summary.md")
    parent.set_description(description(spec, parent, report.headline if report is not None else None, importance))
    parent.log_dict(json_safe(summary), "sweep/summary.json")
    if report is not None:
        _log.info("\n" + report.text())
    return SweepReport(top.text if top is not None else None, REPORT if report is not None else None)


def sweep_importance(spec: SweepSpec, rows: list[TrialRow]) -> Importances | None:
    """What the sweep's parameters did (:mod:`itrlab.report.importance`) on its test objective; None where the sweep
    gets none, or, said on one line, where it cannot be computed: the sweep's results are logged without it."""
    try:
        return param_importances(rows, spec, test_objective(spec))
    except Exception as err:  # noqa: BLE001 - the importance must never fail a finished sweep's report
        _log.warning(f"itrlab: the parameters' importance was not computed: {failure_reason(err)}")
        return None


def trial_links(parent: MlflowTracker, runs: dict[str, dict]) -> dict[str, dict[str, str]]:
    """Each trial's model (``model``: its URI, ``runs:/<id>/model``, what ``itrlab.load_model`` and ``itrlab
    evaluate`` take) and retrieval gallery (``gallery``: its page in the MLflow UI, under the UI's address), from
    the tags its run set when it logged them."""
    models = {trial: run["tags"][MODEL_TAG] for trial, run in runs.items() if run["tags"].get(MODEL_TAG)}
    galleries = {
        trial: ui_link("", parent.experiment_id, run["run_id"], artifact=run["tags"][GALLERY_TAG])
        for trial, run in runs.items()
        if run["tags"].get(GALLERY_TAG)
    }
    return {"model": models, "gallery": galleries}


def model_rows(spec: SweepSpec, rows: list[TrialRow], links: dict[str, dict[str, str]]) -> list[list[str]]:
    """The report's list of models: row label (a pivot's row, else the configuration), trial, model URI, gallery
    link, for each trial that logged a model, in the order of the rows."""
    models, galleries = links.get("model", {}), links.get("gallery", {})
    keys = swept_keys(spec)
    pivoted = spec.table is not None and spec.optuna is None
    return [
        [
            row_label(row_key(row.params, keys)) if pivoted else configuration_label(row.params, keys),
            row.trial_id,
            models[row.trial_id],
            galleries.get(row.trial_id, ""),
        ]
        for row in rows
        if row.trial_id in models
    ]


def description(spec: SweepSpec, parent: MlflowTracker, text: str | None, importance: Importances | None) -> str:
    """The parent run's MLflow description (Markdown, the top of its Overview): a line of links within the UI, to the
    report (when one was written) and to the trials' view, then ``text`` (the headline, or the best configuration) and
    the parameters' importance, every text escaped."""
    report = ui_fragment(parent.experiment_id, parent.run_id, artifact=REPORT)
    trials = ui_fragment(parent.experiment_id, view=trials_view_id(parent.run_id))
    contents = ["the table over seeds", *(["what the parameters did"] if importance is not None else []), "the plots"]
    links = [
        *([f"[**{REPORT_LINK}**]({report}) ({REPORT}: {', '.join(contents)}, each trial's model)"] if text else []),
        f"[The trials]({trials}) (one row each, best first)",
    ]
    parts = [" · ".join(links), *([f"**{md_text(text)}**"] if text else [])]
    if importance is not None:
        parts.append(md_text(importance.summary()) + ".")
    return "\n\n".join(parts)


def json_safe(value: Any) -> Any:
    """``value`` with every NaN or infinity (a diverged trial's metric) as None: strict JSON, as ``itrlab
    report`` reads it."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def trial_curves(parent: MlflowTracker) -> dict[str, dict]:
    """The trials' runs with their validation rsum and training loss per epoch (the plots, and which rows
    still learn); none, said on one line, when the store cannot give them: a finished sweep's results are
    logged without them (no row is then judged still learning)."""
    try:
        return parent.trial_runs(parent.run_id, parts=False)
    except Exception as err:  # noqa: BLE001 - the curves must never fail a finished sweep's report
        _log.warning(f"itrlab: the trials' curves were not read: {failure_reason(err)}")
        return {}


def validation_curves(
    spec: SweepSpec, rows: list[TrialRow], runs: dict[str, dict]
) -> tuple[dict[str, list], dict[str, list], dict[str, str]]:
    """Per pivot row label, from its finished trials' MLflow runs: their validation rsum per epoch, each one's
    learning-rate decays in the same order (the one it chose on validation, else ``train.lr_decay_epochs``:
    :func:`~itrlab.report.convergence.decay_epochs`), and which decay each seed chose, where they chose."""
    curves: dict[str, list] = {}
    decays: dict[str, list] = {}
    seeds: dict[str, list] = {}
    choosing: set[str] = set()
    for row in rows:
        run = runs.get(row.trial_id) or {}
        history = run.get("history", {}).get("rsum")
        if row.status == "finished" and history:
            label = row_label(row_key(row.params, spec.table.rows))
            params = run.get("params") or {}
            curves.setdefault(label, []).append(history)
            decays.setdefault(label, []).append(decay_epochs(params, run.get("metrics")))
            seeds.setdefault(label, []).append(row.params.get("seed"))
            if decay_choices(params):
                choosing.add(label)
    chosen = {label: chosen_decays(seeds[label], decays[label]) for label in choosing}
    return curves, decays, chosen


def row_tolerances(spec: SweepSpec, grid: dict[str, list], rows: list[TrialRow]) -> dict[str, float]:
    """Per row label, the tolerance its best validation rsum's gain is held to (:func:`itrlab.report.convergence.
    tolerance`): half the smallest minimum detectable effect of its comparisons in the test objective (each row
    against the baseline, and the ``table.compare`` pairs), over their shared seeds."""
    column = objective_column(grid, spec)[0]
    values: dict[str, dict[int, float]] = {}
    for row in rows:
        value, seed = row.metrics.get(column), row.params.get("seed")
        if (
            row.status == "finished"
            and isinstance(seed, int)
            and isinstance(value, (int, float))
            and math.isfinite(value)
        ):
            values.setdefault(row_label(row_key(row.params, spec.table.rows)), {})[seed] = float(value)
    baseline = next((label for label, flag in zip(row_marks(grid, spec, None).labels, grid["baseline"]) if flag), None)
    pairs = [(label, baseline) for label in values if baseline is not None and label != baseline]
    mdes = smallest_mdes(values, [*pairs, *spec.table.compare, *spec.table.steps])
    return {label: tolerance(mdes.get(label)) for label in values}


def report_inputs(
    grid: dict[str, list],
    spec: SweepSpec,
    config: ExperimentConfig,
    shape: DataShape | None,
    chance: ChanceLevel | None,
    top: Headline,
    pairs: list[Comparison],
    converged: dict[str, Convergence] | None = None,
) -> ReportInputs:
    published, published_note = published_numbers(spec, shape, config.eval.test_protocol)
    anchors, anchors_note = reference_rows(spec, shape, config.eval.test_protocol)
    cost_column, devices = trial_cost_unit(spec)
    learning = {row: found.learning for row, found in (converged or {}).items()}
    return ReportInputs(
        top,
        row_marks(grid, spec, chance, learning),
        chance,
        published,
        published_note,
        cost_column,
        devices,
        provenance(spec, config, shape),
        pairs,
        anchors,
        anchors_note,
        converged,
    )


def provenance(spec: SweepSpec, config: ExperimentConfig, shape: DataShape | None) -> list[str]:
    """The report's first lines: the experiment and its overrides, the data and test protocol, the objective."""
    search = f"; Optuna: {spec.optuna.num_trials} configurations (TPE, seed {spec.optuna.seed})" if spec.optuna else ""
    return [
        f"experiment {spec.experiment}" + (f" with {' '.join(spec.overrides)}" if spec.overrides else ""),
        f"data {config.dataset.name}: {shape.describe() if shape else 'shape unknown'}; "
        f"test protocol {config.eval.test_protocol}",
        f"objective {spec.objective.mode} {spec.objective.metric}; seeds {seeds_text(spec)}{search}",
    ]


def report_dict(report: PaperReport) -> dict:
    return {
        "title": report.title,
        "header": report.header,
        "rows": report.rows,
        "row_kinds": report.row_kinds,
        "headline": report.headline,
        "notes": report.notes,
        "provenance": report.provenance,
    }


def log_best_trial(spec: SweepSpec, rows: list[TrialRow], parent: MlflowTracker) -> None:
    """A sweep without a pivot (Optuna's): its best trial is its result."""
    best = best_row(rows, spec.objective.metric, spec.objective.mode)
    if best is None:
        return
    parent.log_dict(
        {
            "trial": best.trial_id,
            "params": best.params,
            "metrics": {k: v for k, v in best.metrics.items() if isinstance(v, (int, float))},
        },
        "sweep/best.json",
    )
    parent.set_tags({"itrlab.best_trial": best.trial_id})
    value = objective_value(best, spec.objective.metric)
    finals = {
        f"best_trial_{k}": v for k, v in best.metrics.items() if k.startswith("test_") and isinstance(v, (int, float))
    }
    parent.log_final_metrics(
        {**({f"best_{spec.objective.metric}": value} if isinstance(value, (int, float)) else {}), **finals}
    )


def draw_plots(
    spec: SweepSpec,
    rows: list[TrialRow],
    runs: dict[str, dict],
    grid: dict[str, list] | None,
    chance: ChanceLevel | None,
    folder: Path,
    importance: Importances | None = None,
) -> dict[str, Path]:
    """The pivot's plot, the configurations in parallel coordinates (with an ``importance``) and the trials' curves
    grouped by row (``runs``: their MLflow runs, :meth:`~itrlab.tracking.MlflowTracker.trial_runs`), as PNG files in
    ``folder``: caption -> file. A plot that fails is reported on one line: the sweep's results are logged without
    it."""
    plots: dict[str, Path] = {}
    try:
        if importance is not None:
            mode = spec.objective.mode if importance.objective == f"test_{spec.objective.metric}" else "max"
            path = plot_parallel(
                importance.points, importance.space, importance.objective, folder / "parallel_coordinates.png", mode
            )
            if path is not None:
                plots[f"the configurations in parallel coordinates, by mean {importance.objective}"] = path
        if grid is not None:
            path = plot_pivot(
                grid, spec, folder / "pivot_test_rsum.png", chance=chance.rsum_band if chance is not None else None
            )
            if path is not None:
                plots["test rsum per row"] = path
        keys = spec.table.rows if spec.table is not None else []
        row_of = {row.trial_id: row_label(row_key(row.params, keys)) for row in rows} if keys else {}
        curves = {
            run["name"]: {
                "row": row_of.get(trial, run["name"]),
                **{key: run["history"].get(key, []) for key in ("rsum", "loss")},
            }
            for trial, run in runs.items()
        }
        path = plot_curves(curves, spec, folder / "trial_curves.png")
        if path is not None:
            plots["validation rsum and training loss per epoch"] = path
    except Exception as err:  # noqa: BLE001 - a plot must never fail a finished sweep
        _log.warning(f"itrlab: the sweep's plots were not drawn: {failure_reason(err)}")
    return plots
