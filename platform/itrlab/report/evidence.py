"""A sweep's evidence: what its verdicts are computed from, collected from MLflow once and kept in one file that later
tools (the claims board) read without MLflow.

``itrlab report`` collects it (:func:`collect_evidence`: the checked ``sweep/summary.json``, each trial's run and
its test ranks), judges it (:mod:`itrlab.report.findings`) and writes it beside the page;
:mod:`itrlab.report.evidence_file` holds that file's format, writer and checked reader, which lists the fields.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from itrlab.config.profiles import COMMAND_OVERRIDES_TAG
from itrlab.config.schema import PREHEAD
from itrlab.config.sweep import row_label
from itrlab.errors import UserInputError
from itrlab.eval.names import METRIC_NAMES
from itrlab.eval.rank_file import RANKS_FILE, QueryRanks, RankFileError, checked_ranks, load_ranks
from itrlab.report.convergence import Convergence, decay_choices, decay_epochs
from itrlab.report.diagnostics import row_keys, warmup_epochs
from itrlab.report.stats import finite
from itrlab.report.verdict import collapse_plateau, failures

RANKS_ARTIFACT = RANKS_FILE  # a trial's per-query test ranks, at its run's artifact root
PREHEAD_RANKS_ARTIFACT = f"{PREHEAD}_{RANKS_FILE}"  # the same, read before the projection head (eval.log_prehead)
TEST_METRICS = tuple(f"test_{name}" for name in METRIC_NAMES.values())
PREHEAD_TEST_METRICS = tuple(f"{PREHEAD}_{key}" for key in TEST_METRICS)


def test_column(metric: str, prehead: bool = False) -> str:
    """A trial's test metric as its run logs it: ``test_<metric>``, or ``prehead_test_<metric>`` read before the
    projection head."""
    return f"{PREHEAD}_test_{metric}" if prehead else f"test_{metric}"


class EvidenceError(UserInputError):
    """An evidence file (or a trial's ranks) that fails its check: one line, exit status 2."""


def load_test_ranks(path: Path, where: str) -> QueryRanks:
    """A trial's ``test_ranks.npz`` (``where`` names it in messages), checked; an EvidenceError else."""
    try:
        return load_ranks(path)
    except RankFileError as err:
        raise EvidenceError(f"{where}: {str(err).removeprefix(f'{path}: ')}") from None


def query_ranks(
    protocol: str,
    captions_per_image: np.ndarray | int,
    fold_sizes: np.ndarray,
    i2t: np.ndarray,
    t2i: np.ndarray,
    where: str,
) -> QueryRanks:
    """:class:`QueryRanks` of arrays read from a file (``where`` names it), checked
    (:func:`itrlab.eval.rank_file.checked_ranks`); an EvidenceError else."""
    try:
        return checked_ranks(protocol, captions_per_image, np.asarray(fold_sizes).reshape(-1), i2t, t2i)
    except RankFileError as err:
        raise EvidenceError(f"{where}: {err}") from None


@dataclass(frozen=True)
class TrialEvidence:
    """One trial of the sweep (see the module doc's ``trials``)."""

    trial: str
    run_id: str
    row: str
    seed: int | None
    status: str
    metrics: dict[str, float | None]
    curve: tuple[tuple[int, float], ...] = ()
    best_epoch: int | None = None
    decay_epochs: tuple[int, ...] = ()
    collapse: str = ""
    ranks: QueryRanks | None = None
    prehead_ranks: QueryRanks | None = None  # the test ranks read before the projection head (eval.log_prehead)
    decay_choices: tuple[int, ...] = ()  # the decays it chose ``decay_epochs`` among on validation; () fixed

    def ranks_of(self, prehead: bool = False) -> QueryRanks | None:
        """Its test ranks, or (``prehead``) those read before the projection head."""
        return self.prehead_ranks if prehead else self.ranks

    @property
    def finished(self) -> bool:
        return self.status == "finished"


@dataclass(frozen=True)
class Evidence:
    """A sweep's evidence (see the module doc)."""

    sweep: str
    profile: str | None
    run_id: str
    experiment: str
    test_protocol: str
    metric: str
    mode: str
    rows: tuple[str, ...]
    baseline: str | None
    pairs: tuple[tuple[str, str], ...]
    paper: str | None
    trials: tuple[TrialEvidence, ...]
    convergence: dict[str, dict[str, Any]] = field(default_factory=dict)
    identical: tuple[tuple[str, ...], ...] = ()
    steps: tuple[tuple[str, str], ...] = ()  # the pairs of ``table.steps``: the row built on its reference
    # the overrides the sweep's command line added to its preset and profile; None: not recorded (or unreadable)
    command_overrides: tuple[str, ...] | None = ()

    def finished(self, row: str) -> list[TrialEvidence]:
        """The finished trials of ``row`` that have a seed."""
        return [t for t in self.trials if t.row == row and t.finished and t.seed is not None]

    def values(self, row: str, metric: str | None = None, prehead: bool = False) -> dict[int, float]:
        """Seed -> the test value of ``metric`` (default: the sweep's, ``test_<metric>``; ``prehead``: read before
        the projection head, ``prehead_test_<metric>``) of ``row``'s finished trials that have one."""
        column = test_column(metric or self.metric, prehead)
        found = {t.seed: t.metrics.get(column) for t in self.finished(row)}
        return {seed: float(value) for seed, value in found.items() if finite(value)}

    def ranks(self, row: str, prehead: bool = False) -> dict[int, QueryRanks]:
        """Seed -> the test ranks (``prehead``: read before the projection head) of ``row``'s finished trials that
        logged them."""
        found = {t.seed: t.ranks_of(prehead) for t in self.finished(row)}
        return {seed: ranks for seed, ranks in found.items() if ranks is not None}

    def missing_ranks(self) -> list[str]:
        """The finished trials without test ranks."""
        return [t.trial for t in self.trials if t.finished and t.ranks is None]


def _int(value) -> int | None:
    return int(value) if finite(value) and float(value).is_integer() else None


def collect_evidence(
    summary: Mapping[str, Any],
    run: Mapping[str, Any],
    runs: Mapping[str, Mapping[str, Any]],
    ranks: Mapping[str, QueryRanks],
    profile: str | None = None,
    prehead_ranks: Mapping[str, QueryRanks] | None = None,
) -> Evidence:
    """The evidence of a sweep from its checked ``summary`` (:func:`itrlab.report.summary_schema.read_summary`),
    its parent ``run``'s record, its trials' ``runs`` (:meth:`~itrlab.tracking.MlflowTracker.trial_runs`: trial
    id -> metrics, params, history) and the ``ranks`` they logged (trial id -> :class:`QueryRanks`; and
    ``prehead_ranks``, those read before the projection head)."""
    trials_table, keys = summary.get("trials") or {}, row_keys(summary)
    report = summary.get("report") or {}
    kinds = report.get("row_kinds") or ["result"] * len(report.get("rows", []))
    rows = [cells[0] for cells, kind in zip(report.get("rows", []), kinds) if kind in ("result", "baseline")]
    baseline = next((cells[0] for cells, kind in zip(report.get("rows", []), kinds) if kind == "baseline"), None)
    mode, _, metric = str(summary.get("objective", "max rsum")).partition(" ")
    columns = {pair.get("column") for pair in summary.get("comparisons") or []} - {None}
    metric = next(iter(columns)).removeprefix("test_") if len(columns) == 1 else metric
    if f"test_{metric}" not in TEST_METRICS:
        metric, mode = "rsum", "max"  # an objective with no test counterpart (the loss): rows compare by rsum
    found = []
    for i, trial in enumerate(trials_table.get("trial", [])):
        label = row_label([trials_table[key][i] for key in keys]) if all(k in trials_table for k in keys) else trial
        if label not in rows:
            rows.append(label)
        found.append(
            _collected_trial(
                trials_table, i, label, runs.get(trial) or {}, ranks.get(trial), (prehead_ranks or {}).get(trial)
            )
        )
    declared = [p for p in summary.get("comparisons") or [] if "row" in p]
    pairs = tuple((str(p["row"]), str(p["reference"])) for p in declared)
    steps = tuple((str(p["row"]), str(p["reference"])) for p in declared if p.get("step") is True)
    return Evidence(
        str(summary["sweep"]),
        profile,
        str(run.get("run_id", "")),
        str(summary.get("experiment", "")),
        str(summary.get("test_protocol") or ""),
        metric,
        mode if mode in ("max", "min") else "max",
        tuple(rows),
        baseline,
        pairs,
        summary.get("table_paper"),
        tuple(found),
        steps=steps,
        command_overrides=recorded_overrides(run),
    )


def recorded_overrides(run: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The overrides the parent ``run``'s tag records (a JSON list of strings); None where the tag holds anything
    else. A run without the tag is taken as run as declared: sweeps recorded no other way before it."""
    text = (run.get("tags") or {}).get(COMMAND_OVERRIDES_TAG)
    if text is None:
        return ()
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        return None
    return tuple(value)


def _collected_trial(
    table: Mapping[str, list],
    i: int,
    row: str,
    run: Mapping[str, Any],
    ranks: QueryRanks | None,
    prehead_ranks: QueryRanks | None = None,
) -> TrialEvidence:
    """The ``i``-th trial of the summary's trials ``table``, of ``row``, from its ``run`` (the table's numbers
    where the run has none) and its ``ranks`` (and ``prehead_ranks``)."""
    params, history, logged = run.get("params") or {}, run.get("history") or {}, run.get("metrics") or {}
    kept = (*TEST_METRICS, *PREHEAD_TEST_METRICS)
    metrics = {key: table[key][i] for key in kept if key in table}
    metrics.update({key: value for key, value in logged.items() if key in kept})
    metrics = {key: float(value) if finite(value) else None for key, value in metrics.items()}
    status = table["status"][i]
    failed = failures(history, warmup_epochs({"params": params}), collapse_plateau(params), metrics.get("test_md"))
    return TrialEvidence(
        table["trial"][i],
        str(run.get("run_id", "")),
        row,
        _int(table["seed"][i]) if "seed" in table else None,
        status,
        metrics,
        tuple((int(e), float(v)) for e, v in history.get("rsum") or [] if finite(v)),
        _int(logged.get("best_epoch", table["best_epoch"][i] if "best_epoch" in table else None)),
        decay_epochs(params, logged),
        failed[0] if failed and status == "finished" else "",
        ranks,
        prehead_ranks,
        decay_choices(params),
    )


def with_findings(
    evidence: Evidence, convergence: Mapping[str, Convergence], identical: Sequence[Sequence[str]]
) -> Evidence:
    """``evidence`` with what the report derived from it: per row its convergence, the groups of identical rows."""
    return replace(
        evidence,
        convergence={row: found.to_dict() for row, found in convergence.items()},
        identical=tuple(tuple(group) for group in identical),
    )
