"""What the runs show beside their recall: each row's training loss at its first and its last epoch, and
the parts of its loss at the last epoch (the terms a method logs beside its total: CODER's PGC losses and
attention statistics, DBL's boosting term, a warm-up's loss), as means over the row's finished seeds.

A claim that does not appear is read against these, not against adjectives: a loss whose last epoch sits
at its first epoch's level has not left its plateau; a part that stays at its starting value (PGC at
ln K, a top attention weight near 1) says which term did not learn. ``itrlab report`` reads the trials'
runs from MLflow (:meth:`itrlab.tracking.MlflowTracker.trial_runs`) and this module turns them into the
results page's table: pure data in, a table out.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from itrlab.config.sweep import row_label

PART_PREFIX = "loss_"  # the parts of an epoch's loss, as the training loop logs them (itrlab.train.loop)


def row_keys(summary: dict[str, Any]) -> list[str]:
    """The keys whose labels name a trial's row of the table: ``table_rows`` where the summary records
    them, else the grid's keys (a table's rows default to them)."""
    return list(summary.get("table_rows") or summary.get("grid") or [])


def finished_rows(summary: dict[str, Any]) -> dict[str, str]:
    """Trial id -> the label of its row (``"F"``, ``"oss / F"``), for the trials that finished."""
    trials, keys = summary.get("trials") or {}, row_keys(summary)
    ids, statuses = trials.get("trial", []), trials.get("status", [])
    if not keys or any(key not in trials for key in keys):
        return {}
    return {trial: row_label([trials[key][i] for key in keys])
            for i, (trial, status) in enumerate(zip(ids, statuses)) if status == "finished"}


def _mean(values: list[float]) -> float | None:
    """The mean of the finite values, to 4 significant digits (what a reader compares), or None."""
    finite = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return float(f"{statistics.fmean(finite):.4g}") if finite else None


def diagnostics(summary: dict[str, Any], runs: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The table of what the runs show (``header``, ``rows``, ``notes``), rows in the order of the
    report's table (else of first appearance); None when no finished trial has a loss history.
    ``runs``: trial id -> ``{"metrics": latest metrics, "loss": [(epoch, mean training loss), ...]}``."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for trial, row in finished_rows(summary).items():
        run = runs.get(trial)
        if run and run.get("loss"):
            rows.setdefault(row, []).append(run)
    if not rows:
        return None
    report_order = [r[0] for r in (summary.get("report") or {}).get("rows", []) if r and r[0] in rows]
    order = report_order + [row for row in rows if row not in report_order]
    parts = sorted({key for group in rows.values() for run in group for key in run["metrics"]
                    if key.startswith(PART_PREFIX)})
    header = ["row", "seeds", "loss, epoch 1", "loss, last epoch", "last / first",
              *[part.removeprefix(PART_PREFIX) for part in parts]]
    table = []
    for row in order:
        group = rows[row]
        first = _mean([run["loss"][0][1] for run in group])
        last = _mean([run["loss"][-1][1] for run in group])
        ratio = _mean([run["loss"][-1][1] / run["loss"][0][1] for run in group if run["loss"][0][1]])
        table.append([row, len(group), first, last, ratio, *[_mean([run["metrics"].get(part) for run in group])
                                                              for part in parts]])
    epochs = sorted({run["loss"][-1][0] for group in rows.values() for run in group})
    notes = [f"Means over each row's finished seeds (their count in 'seeds') of the trials' MLflow runs: the "
             f"training loss (the mean over an epoch's steps) at epoch 1 and at the last epoch "
             f"({', '.join(map(str, epochs))}), their ratio per seed, and each part of the loss the method logs, "
             f"at the last epoch; blank where a row does not log that part."]
    return {"header": header, "rows": table, "notes": notes}
