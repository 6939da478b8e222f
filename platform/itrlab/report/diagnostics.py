"""What the runs show beside their recall: each row's training loss and each part of it, read against its own first
epoch and, where known, its floor or plateau, as means over the row's finished seeds (pure data in, the results
page's table out). A loss still at its first value has not left its plateau; a part that stays at its start (a
cluster loss at ln K) says which term did not learn.

Each series (``loss`` and every ``loss_<part>``) is read from its **own first epoch**: the first after the loss's
warm-up at which it is not exactly 0 (a term switched on later logs 0 before); the total from the first epoch at
which every term it sums that is on at the end is on. ``last - first`` is given for every series, the share of the
way to a **floor** only where the method declares one (:class:`itrlab.losses.parts.PartBound`): a ratio to 0 says
nothing of a part that can go below zero. One "last / first" of the total across rows would read a warm-up's other
loss, a late term and a negative loss as one quantity.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from itrlab.config.sweep import row_label
from itrlab.report.stats import finite

if TYPE_CHECKING:  # the bounds come as data (the CLI reads them from the methods): no torch here
    from itrlab.losses.parts import PartBound

TOTAL = "loss"  # an epoch's mean training loss, as the training loop logs it (itrlab.train.loop)
PART_PREFIX = "loss_"  # the parts of an epoch's loss, logged beside it
WARMUP_PARAM = "loss.warmup_epochs"  # the epochs that train the warm-up loss (itrlab.config.schema.LossConfig)
METHOD_TAG = "method"  # a trial run's method (itrlab.train.experiment.run_tags)


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
    return {
        trial: row_label([trials[key][i] for key in keys])
        for i, (trial, status) in enumerate(zip(ids, statuses))
        if status == "finished"
    }


def _mean(values: list) -> float | None:
    """The mean of the finite values, to 4 significant digits (what a reader compares), or None."""
    kept = [v for v in values if finite(v)]
    return float(f"{statistics.fmean(kept):.4g}") if kept else None


def warmup_epochs(run: dict[str, Any]) -> int:
    """The trial's warm-up epochs (0 where its run does not record them)."""
    try:
        return max(int(str((run.get("params") or {}).get(WARMUP_PARAM, 0))), 0)
    except ValueError:
        return 0


@dataclass(frozen=True)
class Reading:
    """One series of one trial read from its own first epoch: ``(start, first)`` to ``(end, last)``."""

    start: int
    first: float
    end: int
    last: float


def _first_on(history: list[tuple[int, float]], after: int) -> tuple[int, float] | None:
    """The first (epoch, value) after epoch ``after`` whose value is finite and not 0."""
    return next(((int(e), float(v)) for e, v in history if e > after and finite(v) and v != 0), None)


def read_trial(run: dict[str, Any], bounds: Mapping[str, PartBound]) -> dict[str, Reading]:
    """Series name (``loss`` or a part's name) -> its :class:`Reading` (see the module doc); a series never on
    after the warm-up is left out. ``run``: ``history`` (series -> [(epoch, value)]) or, as older callers
    give it, ``loss`` alone; ``params`` (the trial's config)."""
    history = dict(run.get("history") or {TOTAL: run.get("loss") or []})
    total = sorted(history.get(TOTAL) or [])
    if not total:
        return {}
    warmup, end = warmup_epochs(run), int(total[-1][0])
    readings: dict[str, Reading] = {}
    starts = []
    for key, series in history.items():
        if not key.startswith(PART_PREFIX):
            continue
        name, series = key.removeprefix(PART_PREFIX), sorted(series)
        first = _first_on(series, warmup)
        at_end = [float(v) for e, v in series if e == end and finite(v)]
        if first is None or not at_end:
            continue
        readings[name] = Reading(first[0], first[1], end, at_end[0])
        if not _statistic(bounds.get(name)) and at_end[0] != 0:
            starts.append(first[0])  # a term the total sums from this epoch on
    first = _first_on(total, max([warmup, *[s - 1 for s in starts]]))
    if first is not None and finite(total[-1][1]):
        readings[TOTAL] = Reading(first[0], first[1], end, float(total[-1][1]))
    return readings


def _statistic(bound: PartBound | None) -> bool:
    return bool(getattr(bound, "statistic", False))


def _epochs(values: list[int]) -> str:
    low, high = min(values), max(values)
    return str(low) if low == high else f"{low}-{high}"


def _to_floor(readings: list[Reading], floor: float | None) -> float | None:
    """The mean share (%) of the way from each seed's first value to the floor that its last value went."""
    if floor is None:
        return None
    shares = [100 * (r.first - r.last) / (r.first - floor) for r in readings if r.first != floor]
    return round(statistics.fmean(shares), 1) if shares else None


def diagnostics(
    summary: dict[str, Any],
    runs: dict[str, dict[str, Any]],
    bounds: Mapping[str, Mapping[str, PartBound]] | None = None,
) -> dict[str, Any] | None:
    """The table of what the runs show (``header``, ``rows``, ``notes``): per row of the report (in its
    order, else of first appearance), the total and each part, means over its finished seeds. None when no
    finished trial has a loss history. ``runs``: trial id -> ``{"history": {series: [(epoch, value)]},
    "params": {...}, "tags": {...}}`` (:meth:`~itrlab.tracking.MlflowTracker.trial_runs`); ``bounds``:
    method name -> part -> :class:`~itrlab.losses.parts.PartBound` (the methods' ``part_bounds``)."""
    rows: dict[str, list[dict[str, Reading]]] = {}
    row_bounds: dict[str, dict[str, PartBound]] = {}
    warmups: set[int] = set()
    for trial, row in finished_rows(summary).items():
        run = runs.get(trial)
        method_bounds = (bounds or {}).get(((run or {}).get("tags") or {}).get(METHOD_TAG, ""), {})
        readings = read_trial(run, method_bounds) if run else {}
        if TOTAL in readings:
            rows.setdefault(row, []).append(readings)
            row_bounds.setdefault(row, {}).update(method_bounds)
            warmups.add(warmup_epochs(run))
    if not rows:
        return None
    report_order = [r[0] for r in (summary.get("report") or {}).get("rows", []) if r and r[0] in rows]
    order = report_order + [row for row in rows if row not in report_order]
    header = [
        "row",
        "seeds",
        "part",
        "from epoch",
        "first",
        "to epoch",
        "last",
        "last - first",
        "% of the way to its floor",
        "floor / plateau",
    ]
    table = []
    for row in order:
        group = rows[row]
        names = [TOTAL, *sorted({name for readings in group for name in readings} - {TOTAL})]
        for name in names:
            found = [readings[name] for readings in group if name in readings]
            bound = row_bounds[row].get(name) if name != TOTAL else None  # a total's terms vary: no floor
            floor, plateau = getattr(bound, "floor", None), getattr(bound, "plateau", "")
            said = (
                (["statistic"] if _statistic(bound) else [])
                + ([f"floor {floor:g}"] if floor is not None else [])
                + ([plateau] if plateau else [])
            )
            table.append(
                [
                    row,
                    len(found),
                    "loss (total)" if name == TOTAL else name,
                    _epochs([r.start for r in found]),
                    _mean([r.first for r in found]),
                    _epochs([r.end for r in found]),
                    _mean([r.last for r in found]),
                    _mean([r.last - r.first for r in found]),
                    None if _statistic(bound) else _to_floor(found, floor),
                    "; ".join(said),
                ]
            )
    trained = sorted(w for w in warmups if w)
    warmup = (
        f" (here {' or '.join(map(str, trained))} epoch{'s' if trained != [1] else ''} of another loss, not read)"
        if trained
        else ""
    )
    notes = [
        f"Means over each row's finished seeds (their count in 'seeds') of the trials' MLflow runs. Each part "
        f"of the loss is read from its own first epoch ('from epoch'): the first epoch after the loss's warm-up, "
        f"if it has one{warmup}, at which it is not 0 (a term switched on later logs 0 before); the total from "
        f"the first epoch at which every term it sums is on. 'first' and 'last' are its values there and at the "
        f"last epoch, 'last - first' their difference per seed. A ratio is given only against a floor the "
        f"method declares: '% of the way to its floor' is how far the part went from its first value towards "
        f"it; a part that can go below zero, or whose floor is unknown, gets none, since a ratio to 0 says "
        f"nothing of it. A statistic is a figure logged beside the loss, no term of it."
    ]
    return {"header": header, "rows": table, "notes": notes}
