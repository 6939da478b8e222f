"""The sweep's trials: one row per trial, ranked by the objective, and the table formats (Markdown,
console) shared with the pivot (:mod:`itrlab.report.pivot`), the report and the results page."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from itrlab.config.schema import PREHEAD
from itrlab.config.sweep import VARIANT, SweepSpec, label, row_key, row_label  # noqa: F401  (re-exported)
from itrlab.eval.names import METRIC_NAMES
from itrlab.report.escape import md_cell, md_text, visible


@dataclass(frozen=True)
class TrialRow:
    trial_id: str
    params: dict[str, Any]
    metrics: dict[str, Any]
    # finished | diverged (its loss turned NaN/inf) | error (failed: input error, crash, killed too often)
    # | stopped (early, by ASHA) | interrupted (running when the sweep was interrupted) | not started
    status: str
    reason: str | None = None  # why a trial did not finish, on one line


def metric_name(column: str) -> str:
    """The recall table's metric a column holds (``rsum`` of ``test_rsum``, ``prehead_test_rsum``, ``best_val_rsum``;
    ``i2t_R1`` of ``test_i2t_R1``), or ``column`` itself."""
    return column.removeprefix(f"{PREHEAD}_").removeprefix("test_").removeprefix("best_val_")


def is_metric(column: str) -> bool:
    """Whether ``column`` is a recall table's metric (``rsum``, ``test_i2t_R1``, ``best_val_rsum``, ``test_md``,
    ``prehead_test_rsum``)."""
    return metric_name(column) in METRIC_NAMES.values()


def metric_text(value: float, column: str) -> str:
    """A result as the papers print it, one format per metric wherever it is shown (the report, the trials
    table, the console, the results page): recalls, rsum and ranks with one decimal, MD (similarity
    units, often well below 1) with 3 significant digits."""
    if column.endswith("_md") or column == "md":
        return f"{value:.3g}"
    return f"{value:.1f}"


def fmt_cell(value: Any, column: str = "") -> str:
    """A cell: a metric as :func:`metric_text` prints it, any other number as short as it is exact (``5e-05``)."""
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return metric_text(value, column) if is_metric(column) else f"{value:.6g}"
    return str(value)


def objective_value(row: TrialRow, metric: str) -> Any:
    """The value a trial is ranked by: its best epoch's (the epoch whose checkpoint gave the test
    table: ``best_val_rsum``) where the trial reported it, else the last reported epoch's."""
    best = row.metrics.get(f"best_val_{metric}")
    return best if isinstance(best, (int, float)) and not math.isnan(best) else row.metrics.get(metric)


def ranked(rows: list[TrialRow], metric: str, mode: str) -> list[TrialRow]:
    """Rows sorted best first by ``metric`` (:func:`objective_value`); rows without a finite value last."""

    def key(row: TrialRow) -> tuple[int, float]:
        value = objective_value(row, metric)
        if not isinstance(value, (int, float)) or math.isnan(value):
            return (1, 0.0)
        return (0, -value if mode == "max" else value)

    return sorted(rows, key=key)


def best_row(rows: list[TrialRow], metric: str, mode: str) -> TrialRow | None:
    """The best finished trial (None when no trial finished)."""
    return next(iter(ranked([row for row in rows if row.status == "finished"], metric, mode)), None)


def ranking_note(spec: SweepSpec) -> str:
    """What the trials table is ranked by, and what its epoch columns are."""
    metric = spec.objective.metric
    by = f"their best epoch's validation {metric}" if metric == "rsum" else f"validation {metric} at their last epoch"
    return (
        f"ranked by {by}, {'highest' if spec.objective.mode == 'max' else 'lowest'} first; best_epoch: the "
        f"epoch of the highest validation rsum, whose checkpoint gave the test_* columns; epoch: the epochs "
        f"it trained"
    )


def ranked_table(
    rows: list[TrialRow], spec: SweepSpec, links: dict[str, dict[str, str]] | None = None
) -> dict[str, list]:
    """Columns for ``mlflow.log_table`` / Markdown: trial, status, params, objective, test metrics, ``links``
    (column -> trial -> text: each trial's model URI, its gallery; a column only where a trial has one), and
    why a trial did not finish (``reason``, last)."""
    metric = spec.objective.metric
    param_keys = sorted({k for row in rows for k in row.params})
    # the objective at the best epoch (whose checkpoint gave the test columns), and that epoch
    metric_keys = [metric, "best_epoch", "test_rsum", "test_i2t_R1", "test_t2i_R1", "test_md", "epoch"]
    links = {column: by_trial for column, by_trial in (links or {}).items() if by_trial}
    table: dict[str, list] = {
        key: [] for key in ["rank", "trial", "status", *param_keys, *metric_keys, *links, "reason"]
    }
    for position, row in enumerate(ranked(rows, metric, spec.objective.mode), start=1):
        table["rank"].append(position)
        table["trial"].append(row.trial_id)
        table["status"].append(row.status)
        for key in param_keys:
            table[key].append(label(row.params.get(key), key))
        for key in metric_keys:
            table[key].append(objective_value(row, key) if key == metric else row.metrics.get(key))
        for column, by_trial in links.items():
            table[column].append(by_trial.get(row.trial_id, ""))
        table["reason"].append(row.reason or "")
    return table


def markdown_table(header: list[str], rows: list[list[Any]], emphasised: list[bool] | None = None) -> str:
    """A Markdown table of text cells, each escaped (:func:`~itrlab.report.escape.md_cell`: a ``|`` or a
    newline in a label never shifts a column, ``<script>`` stays text); the non-empty cells of the rows
    ``emphasised`` marks in italics. Every row has the header's cells."""
    lines = ["| " + " | ".join(md_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    for row, italic in zip(rows, emphasised or [False] * len(rows)):
        cells = [md_cell(c) for c in row]
        lines.append("| " + " | ".join(f"*{c}*" if italic and c and c != "-" else c for c in cells) + " |")
    return "\n".join(lines)


def columns_markdown(columns: dict[str, list]) -> str:
    """A Markdown table of ``columns`` (equal lengths), each value as :func:`fmt_cell` shows it."""
    keys = list(columns)
    count = len(columns[keys[0]]) if keys else 0
    return markdown_table(keys, [[fmt_cell(columns[k][i], k) for k in keys] for i in range(count)])


def to_markdown(table: dict[str, list], title: str) -> str:
    return f"### {md_text(title)}\n\n" + columns_markdown(table)


def to_text(table: dict[str, list], title: str, limit: int = 40) -> str:
    """A plain aligned table for the console (a label's newline shown as ``␊``)."""
    keys = list(table)
    cells = [
        [visible(fmt_cell(table[k][i], k)) for k in keys] for i in range(min(limit, len(table[keys[0]]) if keys else 0))
    ]
    widths = [max([len(k)] + [len(r[j]) for r in cells]) for j, k in enumerate(keys)]
    out = [title, "  ".join(k.ljust(w) for k, w in zip(keys, widths))]
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in cells]
    return "\n".join(out)
