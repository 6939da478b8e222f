"""The sweep's pivot: the grid in the paper's layout, with intervals over seeds and honest comparisons.

One row per combination of the sweep's ``table.rows`` keys (say ``cooperative.strategy``), in grid
order. For each column (``test_rsum``, ...):

* ``<col>_mean`` and ``<col>_ci95``: the mean over the row's finished seeds and the half-width of its
  95% Student-t interval (None with one seed: the console says "1 seed", never ``± 0.00``);
* ``<col>_diff`` and ``<col>_diff_ci95``: the difference to the baseline row (``table.baseline``, by
  default the first row) with Welch's 95% interval, so that "F beats A" is a statement with a margin;
* ``wall_s_mean`` and ``cpu_hours`` (``gpu_hours`` when trials hold GPUs): the cost of the row, its
  trials' mean wall time and their summed wall time x the devices a trial holds;
* ``<col>_paper`` and ``<col>_vs_paper``: the published number and ours minus it, only when the
  trials ran on the data set and test protocol the paper's numbers come from (``configs/paper/*.yaml``:
  ``matches: {dataset: f30k_precomp, test_protocol: f30k_1k}``). Otherwise the ``published`` column
  says why the numbers are absent (a result on synthetic data beside a Flickr30K number means nothing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from itrlab.config.loader import config_dir, read_yaml
from itrlab.config.sweep import SweepSpec
from itrlab.report.stats import difference_interval, mean_interval
from itrlab.report.summary import TrialRow, fmt_cell, row_key, row_label


@dataclass(frozen=True)
class PaperTable:
    """A published table (``configs/paper/<name>.yaml``) and the data its numbers were measured on."""

    name: str
    rows: dict[str, dict[str, float]]
    description: str  # "Flickr30K 1K test"
    dataset: str | None  # the itrlab data set that reproduces the paper's (f30k_precomp, coco_precomp)
    test_protocol: str | None  # f30k_1k, coco_1k, coco_5k

    def comparable(self, dataset: str, test_protocol: str) -> str | None:
        """None when results on ``dataset`` under ``test_protocol`` may stand beside these numbers,
        else why not (one line)."""
        if self.dataset is None or self.test_protocol is None:
            return f"not comparable: {self.name} does not say which data set and protocol its numbers use"
        if (dataset, test_protocol) != (self.dataset, self.test_protocol):
            return (f"not comparable: these trials ran on {dataset} ({test_protocol}); the paper's numbers are "
                    f"{self.description} ({self.dataset}, {self.test_protocol})")
        return None


def load_paper(name: str | None) -> PaperTable | None:
    """The published table ``configs/paper/<name>.yaml`` (None without a name)."""
    if not name:
        return None
    data = read_yaml(config_dir() / "paper" / f"{name}.yaml", "table.paper")
    matches = data.get("matches") or {}
    return PaperTable(name, {str(key): dict(values) for key, values in (data.get("rows") or {}).items()},
                      str(data.get("dataset", "")), matches.get("dataset"), matches.get("test_protocol"))


def _values(members: list[TrialRow], column: str) -> list[float]:
    return [float(m.metrics[column]) for m in members
            if isinstance(m.metrics.get(column), (int, float)) and math.isfinite(m.metrics[column])]


def _grid_order(rows: list[TrialRow], spec: SweepSpec) -> dict[tuple, list[TrialRow]]:
    """Finished trials grouped by their row labels, the groups in the order of the sweep's grid."""
    keys = spec.table.rows
    order = {row_key(point, keys): i for i, point in enumerate(spec.grid_points())}
    groups: dict[tuple, list[TrialRow]] = {}
    for row in rows:
        if row.status == "finished":
            groups.setdefault(row_key(row.params, keys), []).append(row)
    return dict(sorted(groups.items(), key=lambda item: order.get(item[0], len(order))))


def pivot(rows: list[TrialRow], spec: SweepSpec, dataset: str = "", test_protocol: str = "") -> dict[str, list]:
    """The grid in the paper's layout (see the module doc); ``dataset`` and ``test_protocol`` are the
    trials' (``dataset.name``, ``eval.test_protocol``), which decide whether published numbers appear."""
    table_spec = spec.table
    groups = _grid_order(rows, spec)
    keys = list(groups)
    names = [row_label(group) for group in keys]
    baseline = table_spec.baseline if table_spec.baseline in names else (names[0] if names else None)
    paper = load_paper(table_spec.paper)
    absent = paper.comparable(dataset, test_protocol) if paper else None

    table: dict[str, list] = {key: [group[i] for group in keys] for i, key in enumerate(table_spec.rows)}
    table["seeds"] = [len(groups[group]) for group in keys]
    for column in table_spec.columns:
        base = _values(groups[keys[names.index(baseline)]], column) if baseline is not None else []
        means = [mean_interval(_values(groups[group], column)) for group in keys]
        diffs = [difference_interval(_values(groups[group], column), base) for group in keys]
        table[f"{column}_mean"] = [m.value for m in means]
        table[f"{column}_ci95"] = [m.half_width for m in means]
        table[f"{column}_diff"] = [None if name == baseline else d.value for name, d in zip(names, diffs)]
        table[f"{column}_diff_ci95"] = [None if name == baseline else d.half_width for name, d in zip(names, diffs)]
        if paper is not None and absent is None:
            published = [paper.rows.get(name, {}).get(column.removeprefix("test_")) for name in names]
            table[f"{column}_paper"] = published
            table[f"{column}_vs_paper"] = [None if p is None else m.value - p for m, p in zip(means, published)]
    table["baseline"] = [name == baseline for name in names]
    cost_column, per_trial = trial_cost_unit(spec)
    seconds = [_values(groups[group], "run_seconds") for group in keys]
    table["wall_s_mean"] = [mean_interval(values).value if values else None for values in seconds]
    table[cost_column] = [sum(values) * per_trial / 3600 if values else None for values in seconds]
    if paper is not None:
        table["published"] = [absent or "" for _ in names]
    return table


def trial_cost_unit(spec: SweepSpec) -> tuple[str, float]:
    """The cost column of a row (``gpu_hours`` when trials hold GPUs, else ``cpu_hours``) and the
    devices one trial holds: a row costs the sum of its trials' wall times x those devices."""
    workers, cpus, gpus = spec.workers
    return ("gpu_hours", gpus * workers) if gpus else ("cpu_hours", cpus * workers)


def _cell(value: float | None, half_width: float | None, n: int, column: str, signed: bool = False) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    text = fmt_cell(value, column)
    if signed and value >= 0:
        text = "+" + text
    if half_width is None:
        return f"{text} (1 seed)" if n == 1 else text
    return f"{text} ± {fmt_cell(half_width, column)}"


def compact_pivot(table: dict[str, list], spec: SweepSpec, diff_column: str | None = None) -> dict[str, list]:
    """The pivot for the console: ``mean ± 95% CI`` per column, the published number in brackets
    where comparable, and ``diff_column``'s difference to the baseline row with its interval (by
    default test rsum's)."""
    count = len(table["seeds"])
    compact: dict[str, list] = {key: table[key] for key in [*spec.table.rows, "seeds"]}
    for column in spec.table.columns:
        cells = []
        for i in range(count):
            cell = _cell(table[f"{column}_mean"][i], table[f"{column}_ci95"][i], table["seeds"][i], column)
            published = table.get(f"{column}_paper", [None] * count)[i]
            cells.append(cell if published is None else f"{cell} ({fmt_cell(float(published), column)})")
        compact[column.removeprefix("test_")] = cells
    columns = spec.table.columns
    cost_column, _ = trial_cost_unit(spec)
    compact["wall (s)"] = [fmt_cell(v) for v in table.get("wall_s_mean", [None] * count)]
    compact[cost_column.replace("_", "-")] = [None if v is None else f"{v:.3f}" for v in table.get(cost_column, [None] * count)]
    diff_column = diff_column or ("test_rsum" if "test_rsum" in columns else (columns[0] if columns else None))
    if diff_column in spec.table.columns and count > 1:
        compact[f"{diff_column.removeprefix('test_')} vs baseline"] = [
            "baseline" if table["baseline"][i] else
            _cell(table[f"{diff_column}_diff"][i], table[f"{diff_column}_diff_ci95"][i],
                  min(table["seeds"][i], 2), diff_column, signed=True)
            for i in range(count)]
    return compact


def pivot_note(table: dict[str, list], spec: SweepSpec) -> str:
    """The line under the console pivot: what the ± means, and where the published numbers are (or why not)."""
    note = f"mean ± 95% Student-t interval over seeds {spec.seeds}; differences to the baseline row with Welch's interval"
    reasons = [reason for reason in table.get("published", []) if reason]
    if reasons:
        return f"{note}\npublished numbers ({spec.table.paper}) left out, {reasons[0]}"
    if spec.table.paper:
        return f"{note}; the published number in brackets"
    return note


@dataclass(frozen=True)
class RowWinner:
    """The pivot row with the best mean of a test column over seeds, with its interval and margin."""

    label: str
    column: str
    mean: float
    half_width: float | None
    seeds: int
    diff: float | None  # to the baseline row (None: the winner is the baseline)
    diff_half_width: float | None

    def metrics(self) -> dict[str, float]:
        name = self.column.removeprefix("test_")
        out = {f"best_row_{name}_mean": self.mean, "best_row_seeds": float(self.seeds)}
        if self.half_width is not None:
            out[f"best_row_{name}_ci95"] = self.half_width
        if self.diff is not None:
            out[f"best_row_{name}_vs_baseline"] = self.diff
        return out

    def describe(self) -> str:
        interval = f" ± {self.half_width:.2f}" if self.half_width is not None else ""
        margin = ("it is the baseline" if self.diff is None else
                  f"{self.diff:+.2f}" + (f" ± {self.diff_half_width:.2f}" if self.diff_half_width is not None else "")
                  + " against the baseline")
        return (f"best row by mean {self.column}: {self.label}, {self.mean:.2f}{interval} over {self.seeds} seed(s); "
                f"{margin}")


def best_by_mean(table: dict[str, list], spec: SweepSpec) -> RowWinner | None:
    """The row whose mean test objective (``test_<objective.metric>``, else test rsum) is best."""
    column, mode = f"test_{spec.objective.metric}", spec.objective.mode
    if f"{column}_mean" not in table:  # an objective with no test counterpart (the loss): rank by test rsum
        column, mode = "test_rsum", "max"
    means = table.get(f"{column}_mean", [])
    finite = [i for i, value in enumerate(means) if isinstance(value, (int, float)) and math.isfinite(value)]
    if not finite:
        return None
    pick = max if mode == "max" else min
    best = pick(finite, key=lambda i: means[i])
    label_text = row_label(table[key][best] for key in spec.table.rows)
    return RowWinner(label_text, column, means[best], table[f"{column}_ci95"][best], table["seeds"][best],
                     table[f"{column}_diff"][best], table[f"{column}_diff_ci95"][best])
