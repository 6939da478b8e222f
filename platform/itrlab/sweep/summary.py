"""The sweep's result tables: all trials ranked by the objective, and the paper's pivot.

The pivot groups trials by the sweep's ``table.rows`` keys (say ``cooperative.strategy``) and
shows each column's mean and standard deviation over the seeds, with the published number beside
ours and the difference when ``configs/paper/<name>.yaml`` has one.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from itrlab.config.loader import config_dir, read_yaml
from itrlab.sweep.spec import SweepSpec


@dataclass(frozen=True)
class TrialRow:
    trial_id: str
    params: dict[str, Any]
    metrics: dict[str, Any]
    # finished | diverged (its loss turned NaN/inf) | error (failed: input error, crash, killed too often)
    # | stopped (early, by ASHA) | interrupted (running when the sweep was interrupted) | not started
    status: str
    reason: str | None = None  # why a trial did not finish, on one line


def label(value: Any) -> Any:
    """A grid value as a table cell: a named variant by its name, other dict values (whole sections)
    as ``key=value`` pairs."""
    if isinstance(value, dict) and "name" in value and any("." in str(k) for k in value):
        return value["name"]
    if isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in value.items())
    return value


def _fmt(value: Any, column: str = "") -> str:
    """A cell: recalls with 2 decimals, MD (similarity units, often well below 1) with 3."""
    if value is None:
        return "-"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return f"{value:.3f}" if "md" in column.split("_") else f"{value:.2f}"
    return str(value)


def ranked(rows: list[TrialRow], metric: str, mode: str) -> list[TrialRow]:
    """Rows sorted best first by ``metric``; rows without a finite value last."""
    def key(row: TrialRow) -> tuple[int, float]:
        value = row.metrics.get(metric)
        if not isinstance(value, (int, float)) or math.isnan(value):
            return (1, 0.0)
        return (0, -value if mode == "max" else value)
    return sorted(rows, key=key)


def best_row(rows: list[TrialRow], metric: str, mode: str) -> TrialRow | None:
    """The best finished trial (None when no trial finished)."""
    return next(iter(ranked([row for row in rows if row.status == "finished"], metric, mode)), None)


def ranked_table(rows: list[TrialRow], spec: SweepSpec, reasons: bool = True) -> dict[str, list]:
    """Columns for ``mlflow.log_table`` / Markdown: trial, status, params, objective, test metrics (and
    with ``reasons``, why a trial did not finish)."""
    metric = spec.objective.metric
    param_keys = sorted({k for row in rows for k in row.params})
    metric_keys = [metric, "test_rsum", "test_i2t_R1", "test_t2i_R1", "test_md", "epoch"]
    table: dict[str, list] = {"rank": [], "trial": [], "status": []}
    for key in param_keys + metric_keys:
        table[key] = []
    for position, row in enumerate(ranked(rows, metric, spec.objective.mode), start=1):
        table["rank"].append(position)
        table["trial"].append(row.trial_id)
        table["status"].append(row.status)
        for key in param_keys:
            table[key].append(label(row.params.get(key)))
        for key in metric_keys:
            table[key].append(row.metrics.get(key))
    if reasons:
        table["reason"] = [row.reason or "" for row in ranked(rows, metric, spec.objective.mode)]
    return table


def load_paper(name: str | None) -> dict[str, dict[str, float]]:
    """Published numbers: ``rows: {<row label>: {<column>: value}}`` from configs/paper/<name>.yaml."""
    if not name:
        return {}
    data = read_yaml(config_dir() / "paper" / f"{name}.yaml", "table.paper")
    return {str(label): dict(values) for label, values in (data.get("rows") or {}).items()}


def pivot(rows: list[TrialRow], spec: SweepSpec) -> dict[str, list]:
    """The grid in the paper's layout: one row per combination, mean and std over seeds."""
    table_spec = spec.table
    groups: dict[tuple, list[TrialRow]] = {}
    for row in rows:
        if row.status != "finished":
            continue
        groups.setdefault(tuple(label(row.params.get(k)) for k in table_spec.rows), []).append(row)
    paper = load_paper(table_spec.paper)
    table: dict[str, list] = {key: [] for key in table_spec.rows}
    table["seeds"] = []
    for column in table_spec.columns:
        table[f"{column}_mean"], table[f"{column}_std"] = [], []
        if paper:
            table[f"{column}_paper"], table[f"{column}_diff"] = [], []
    for group, members in groups.items():
        for key, value in zip(table_spec.rows, group):
            table[key].append(value)
        table["seeds"].append(len(members))
        published = paper.get(" / ".join(str(v) for v in group), {})
        for column in table_spec.columns:
            values = [float(m.metrics[column]) for m in members if isinstance(m.metrics.get(column), (int, float))]
            mean = statistics.fmean(values) if values else math.nan
            table[f"{column}_mean"].append(mean)
            table[f"{column}_std"].append(statistics.stdev(values) if len(values) > 1 else 0.0)
            if paper:
                ours_key = column.removeprefix("test_")
                theirs = published.get(ours_key)
                table[f"{column}_paper"].append(theirs)
                table[f"{column}_diff"].append(mean - theirs if theirs is not None else None)
    return table


def compact_pivot(table: dict[str, list], spec: SweepSpec) -> dict[str, list]:
    """The pivot for the console: one cell per column, ``mean ± std`` and the published number."""
    rows = len(table["seeds"])
    compact: dict[str, list] = {key: table[key] for key in [*spec.table.rows, "seeds"]}
    for column in spec.table.columns:
        cells = []
        for index in range(rows):
            cell = f"{_fmt(table[f'{column}_mean'][index], column)} ± {_fmt(table[f'{column}_std'][index], column)}"
            published = table.get(f"{column}_paper", [None] * rows)[index]
            cells.append(cell if published is None else f"{cell} ({_fmt(float(published), column)})")
        compact[column.removeprefix("test_")] = cells
    return compact


def to_markdown(table: dict[str, list], title: str) -> str:
    keys = list(table)
    lines = [f"### {title}", "", "| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for index in range(len(table[keys[0]]) if keys else 0):
        lines.append("| " + " | ".join(_fmt(table[k][index], k) for k in keys) + " |")
    return "\n".join(lines)


def to_text(table: dict[str, list], title: str, limit: int = 40) -> str:
    """A plain aligned table for the console."""
    keys = list(table)
    cells = [[_fmt(table[k][i], k) for k in keys] for i in range(min(limit, len(table[keys[0]]) if keys else 0))]
    widths = [max([len(k)] + [len(r[j]) for r in cells]) for j, k in enumerate(keys)]
    out = [title, "  ".join(k.ljust(w) for k, w in zip(keys, widths))]
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in cells]
    return "\n".join(out)
