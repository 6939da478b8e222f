"""What ``itrlab report --register`` puts in MLflow's model registry (:mod:`itrlab.tracking.model_registry` writes
it): per row of a sweep's table a registered model, per finished seed that logged its model a version.

Every version's description carries its row's numbers as the results page gives them (the test mean over seeds
with its interval, each comparison of the row with its intervals and verdict), then the version's own seed,
trial and test value, so each version says how far its row's seeds spread. Descriptions are Markdown: every
label is escaped (:func:`~itrlab.report.escape.md_text`).
"""

from __future__ import annotations

from collections.abc import Mapping

from itrlab.config.profiles import DEFAULT_PROFILE, PROFILE_TAG
from itrlab.errors import UserInputError
from itrlab.report.escape import md_code, md_text
from itrlab.report.evidence import Evidence, TrialEvidence
from itrlab.report.findings import Findings
from itrlab.report.stats import mean_interval
from itrlab.report.summary import metric_text
from itrlab.report.verdict_table import verdict_row
from itrlab.tracking.model_registry import SEED_TAG, RowModels, VersionSpec, model_names

SWEEP_TAG, ROW_TAG, SEEDS_TAG = "itrlab.sweep", "itrlab.row", "itrlab.row_seeds"  # a registered model's, a version's
PARENT_TAG, TRIAL_TAG = "itrlab.parent_run", "itrlab.trial_id"


def row_numbers(evidence: Evidence, row: str) -> str:
    """The row's test mean in the sweep's metric with its interval and seed count, as one phrase."""
    values = evidence.values(row)
    metric = evidence.metric
    if not values:
        return f"test {metric}: no finished seed"
    interval = mean_interval(list(values.values()))
    seeds = ", ".join(str(seed) for seed in sorted(values))
    if interval.half_width is None:
        return f"test {metric} {metric_text(interval.value, metric)} (1 seed: {seeds}; no interval)"
    return (
        f"test {metric} {metric_text(interval.value, metric)} ± {metric_text(interval.half_width, metric)} (mean ± 95% "
        f"Student-t interval over {interval.n} seeds: {seeds})"
    )


def row_comparisons(found: Findings | None, row: str) -> list[str]:
    """Each comparison of the report that reads ``row`` (under its merged label), as one phrase: its paired
    interval over seeds, its seeds + test images interval and its verdict."""
    if found is None:
        return []
    label = found.label(row)
    lines = []
    for verdict in found.verdicts:
        if label not in (verdict.stats.row, verdict.stats.reference):
            continue
        name, seeds, paired, both, *_ = verdict_row(verdict)
        lines.append(
            f"{name} in {verdict.stats.metric}: paired over {seeds} seeds {paired}; seeds + test images {both}; "
            f"{verdict.word}"
        )
    return lines


def check_registrable(sweep: str, run_id: str, logged: Mapping[str, str]) -> None:
    """UserInputError (one line) when no finished trial of the sweep logged its model (``logged``: trial id ->
    run id, :func:`itrlab.tracking.model_registry.logged_models`): there is nothing to register."""
    if not logged:
        raise UserInputError(
            f"--register: no finished trial of sweep '{sweep}' (parent run {run_id}) logged its model "
            f"(output.log_model was 'none', or its trials ran before models were logged): nothing to register; "
            f"drop --register, or run the sweep with output.log_model=best"
        )


def registered_rows(evidence: Evidence, found: Findings | None, logged: Mapping[str, str]) -> list[RowModels]:
    """The registered model of each row with a finished seed whose trial logged its model (``logged``: trial id
    -> run id, :func:`itrlab.tracking.model_registry.logged_models`), its versions one per such trial in seed order
    (:func:`check_registrable` first)."""
    trials = [t for t in evidence.trials if t.finished and t.trial in logged]
    check_registrable(evidence.sweep, evidence.run_id, {t.trial: logged[t.trial] for t in trials})
    profile = evidence.profile or DEFAULT_PROFILE
    names = model_names(evidence.sweep, profile, list(evidence.rows))
    rows = []
    for row in evidence.rows:
        members = sorted((t for t in trials if t.row == row), key=lambda t: (t.seed is None, t.seed or 0, t.trial))
        if not members:
            continue
        head = (
            f"Row {md_text(row)} of sweep {md_text(evidence.sweep)} (profile {md_text(profile)}), parent run "
            f"{md_code(evidence.run_id)}: {md_text(row_numbers(evidence, row))}."
        )
        about = [head, "\n".join(f"- {md_text(line)}" for line in row_comparisons(found, row))]
        tags = {
            SWEEP_TAG: evidence.sweep,
            PROFILE_TAG: profile,
            ROW_TAG: row,
            PARENT_TAG: evidence.run_id,
            SEEDS_TAG: str(len(evidence.values(row))),
        }
        versions = tuple(_version(evidence, trial, logged[trial.trial], about, tags) for trial in members)
        description = _paragraphs(*about, "One version per seed's model, each tagged with its seed.")
        rows.append(RowModels(names[row], description, tags, versions))
    return rows


def _version(
    evidence: Evidence, trial: TrialEvidence, run_id: str, about: list[str], tags: dict[str, str]
) -> VersionSpec:
    """The version of ``trial``'s model: its row's description, then its own seed, trial and test value."""
    metric = evidence.metric
    value = trial.metrics.get(f"test_{metric}")
    own = f"test {metric} {metric_text(value, metric)}" if value is not None else f"no test {metric}"
    seed = "no seed" if trial.seed is None else f"seed {trial.seed}"
    line = f"This version: {seed}'s model, trial {md_text(trial.trial)}, run {md_code(run_id)}: {md_text(own)}."
    return VersionSpec(
        run_id,
        _paragraphs(*about, line),
        {**tags, SEED_TAG: "" if trial.seed is None else str(trial.seed), TRIAL_TAG: trial.trial},
    )


def _paragraphs(*parts: str) -> str:
    """The non-empty ``parts`` as Markdown paragraphs."""
    return "\n\n".join(part for part in parts if part)
