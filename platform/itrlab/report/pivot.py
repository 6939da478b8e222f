"""The sweep's pivot: the grid in the paper's layout, with intervals over seeds and honest comparisons.

One row per combination of the sweep's ``table.rows`` keys, in grid order. Per column (``test_rsum``, ...):
``<col>_mean`` and ``<col>_ci95`` (the mean over finished seeds and its Student-t 95% half-width, None with one
seed); ``<col>_diff`` and ``<col>_diff_ci95`` (the difference to the baseline row with Welch's interval);
``<col>_diff_paired``, ``_ci95`` and ``_seeds`` where the row shares two seeds or more with the baseline
(:func:`itrlab.report.stats.paired_interval`); ``<col>_paper`` and ``<col>_vs_paper`` only when the trials' data
have the paper's shape and test protocol (:mod:`itrlab.report.published`; else ``published`` says why). Per row:
``unfinished`` (``diverged 3/3: <reason>``; a row whose every seed failed stays, blank, rather than vanish),
``wall_s_mean`` and ``cpu_hours`` or ``gpu_hours`` (summed wall time x the devices a trial holds). Published rows
of other methods are no rows of the grid (:mod:`itrlab.report.anchors`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from itrlab.config.loader import config_dir, read_yaml
from itrlab.config.sweep import SweepSpec
from itrlab.data.shape import DataShape
from itrlab.report.anchors import load_anchors
from itrlab.report.paper_report import report_columns
from itrlab.report.published import PublishedSource
from itrlab.report.stats import Comparison, difference_interval, mean_interval, paired_interval
from itrlab.report.summary import TrialRow, row_key, row_label


@dataclass(frozen=True)
class PaperTable(PublishedSource):
    """A published table (``configs/paper/<name>.yaml``): numbers by the label of our row they stand
    beside, and the data they were measured on (:class:`~itrlab.report.published.PublishedSource`)."""

    rows: dict[str, dict[str, float]] = field(default_factory=dict)


def load_paper(name: str | None) -> PaperTable | None:
    """The published table ``configs/paper/<name>.yaml`` (None without a name)."""
    if not name:
        return None
    data = read_yaml(config_dir() / "paper" / f"{name}.yaml", "table.paper")
    return PaperTable(
        **PublishedSource.fields(name, data),
        rows={str(key): dict(values) for key, values in (data.get("rows") or {}).items()},
    )


def check_published(spec: SweepSpec) -> None:
    """The published files a sweep names (``table.paper``, ``table.anchors``) and their data shapes read
    and validate: a malformed one is a ConfigError before any training, not a report that fails after
    the whole sweep."""
    if spec.table is None:
        return
    for source in (load_paper(spec.table.paper), load_anchors(spec.table.anchors)):
        if source is not None:
            source.data_shape()


def _values(members: list[TrialRow], column: str) -> list[float]:
    return list(_by_seed(members, column).values())


def _by_seed(members: list[TrialRow], column: str) -> dict[int, float]:
    """The finished members' finite ``column`` by seed (a trial without a seed gets a key of its own)."""
    values: dict = {}
    for member in members:
        value = member.metrics.get(column)
        if member.status == "finished" and isinstance(value, (int, float)) and math.isfinite(value):
            seed = member.params.get("seed")  # never paired by chance: the trial id is no other row's
            values[seed if isinstance(seed, int) and seed not in values else ("trial", member.trial_id)] = float(value)
    return values


def _grid_order(rows: list[TrialRow], spec: SweepSpec) -> dict[tuple, list[TrialRow]]:
    """Every trial grouped by its row labels (finished or not: a row whose seeds all diverged is still a row),
    the groups in the order of the sweep's grid."""
    keys = spec.table.rows
    order = {row_key(point, keys): i for i, point in enumerate(spec.grid_points())}
    groups: dict[tuple, list[TrialRow]] = {}
    for row in rows:
        groups.setdefault(row_key(row.params, keys), []).append(row)
    return dict(sorted(groups.items(), key=lambda item: order.get(item[0], len(order))))


UNFINISHED = {
    "diverged": "diverged",
    "error": "failed",
    "stopped": "stopped early",
    "interrupted": "interrupted",
    "not started": "not started",
}
"""How the report names each status of a trial that did not finish (:class:`~itrlab.report.summary.TrialRow`)."""
REASON_CHARS = 160  # a row's reason in the table: the first trial's, cut to this length (the trials table has all)


def unfinished(members: list[TrialRow]) -> str:
    """What became of a row's trials that did not finish: ``diverged 3/3: <the first one's reason>``,
    statuses joined by ``, ``; ``""`` when every trial finished."""
    counts = {status: sum(m.status == status for m in members) for status in UNFINISHED}
    parts = [f"{UNFINISHED[status]} {count}/{len(members)}" for status, count in counts.items() if count]
    if not parts:
        return ""
    reason = next((" ".join(m.reason.split()) for m in members if m.status != "finished" and m.reason), "")
    if len(reason) > REASON_CHARS:
        reason = reason[: REASON_CHARS - 1] + "…"
    return ", ".join(parts) + (f": {reason}" if reason else "")


def comparisons(rows: list[TrialRow], spec: SweepSpec, column: str) -> list[Comparison]:
    """The ``table.compare`` and ``table.steps`` pairs of rows, each row's ``column`` minus its reference's over
    their finished seeds (a row without one gives no number: NaN), Welch's and, where they share seeds, paired."""
    groups = {row_label(key): members for key, members in _grid_order(rows, spec).items()}
    pairs = []
    declared = [(pair, False) for pair in spec.table.compare] + [(pair, True) for pair in spec.table.steps]
    for (row, reference), step in declared:
        mine, theirs = groups.get(row, []), groups.get(reference, [])
        welch = difference_interval(_values(mine, column), _values(theirs, column))
        pairs.append(
            Comparison(
                row, reference, column, welch, paired_interval(_by_seed(mine, column), _by_seed(theirs, column)), step
            )
        )
    return pairs


def pivot(
    rows: list[TrialRow], spec: SweepSpec, shape: DataShape | None = None, test_protocol: str = ""
) -> dict[str, list]:
    """The grid in the paper's layout (see the module doc); ``shape`` (of the trials' data, read from
    the files) and ``test_protocol`` decide whether published numbers appear. The columns are the
    sweep's ``table.columns`` and the report's (every recall and rsum)."""
    table_spec = spec.table
    groups = _grid_order(rows, spec)
    keys = list(groups)
    names = [row_label(group) for group in keys]
    baseline = table_spec.baseline if table_spec.baseline in names else (names[0] if names else None)
    paper = load_paper(table_spec.paper)
    absent = paper.comparable(shape, test_protocol) if paper else None

    table: dict[str, list] = {key: [group[i] for group in keys] for i, key in enumerate(table_spec.rows)}
    table["seeds"] = [sum(m.status == "finished" for m in groups[group]) for group in keys]
    base_members = groups[keys[names.index(baseline)]] if baseline is not None else []
    for column in dict.fromkeys([*table_spec.columns, *report_columns(spec)]):
        base, base_seeds = _values(base_members, column), _by_seed(base_members, column)
        means = [mean_interval(_values(groups[group], column)) for group in keys]
        diffs = [difference_interval(_values(groups[group], column), base) for group in keys]
        paired = [
            None if name == baseline else paired_interval(_by_seed(groups[group], column), base_seeds)
            for name, group in zip(names, keys)
        ]
        table[f"{column}_mean"] = [m.value if m.n else None for m in means]  # None: no finished seed
        table[f"{column}_ci95"] = [m.half_width for m in means]
        table[f"{column}_diff"] = [None if name == baseline or not d.n else d.value for name, d in zip(names, diffs)]
        table[f"{column}_diff_ci95"] = [None if name == baseline else d.half_width for name, d in zip(names, diffs)]
        table[f"{column}_diff_paired"] = [p.value if p else None for p in paired]
        table[f"{column}_diff_paired_ci95"] = [p.half_width if p else None for p in paired]
        table[f"{column}_diff_paired_seeds"] = [p.n if p else None for p in paired]
        if paper is not None and absent is None:
            published = [paper.rows.get(name, {}).get(column.removeprefix("test_")) for name in names]
            table[f"{column}_paper"] = published
            table[f"{column}_vs_paper"] = [
                None if p is None or not m.n else m.value - p for m, p in zip(means, published)
            ]
    table["baseline"] = [name == baseline for name in names]
    table["unfinished"] = [unfinished(groups[group]) for group in keys]
    cost_column, per_trial = trial_cost_unit(spec)
    seconds = [_values(groups[group], "run_seconds") for group in keys]
    table["wall_s_mean"] = [mean_interval(values).value if values else None for values in seconds]
    # a member of a group (itrlab.sweep.groups) holds its trial's devices with the others: its share
    shares = [_values(groups[group], "cost_seconds") or values for group, values in zip(keys, seconds)]
    table[cost_column] = [sum(values) * per_trial / 3600 if values else None for values in shares]
    if paper is not None:
        table["published"] = [absent or "" for _ in names]
    return table


def trial_cost_unit(spec: SweepSpec) -> tuple[str, float]:
    """The cost column of a row (``gpu_hours`` when trials hold GPUs, else ``cpu_hours``) and the
    devices one trial holds: a row costs the sum of its trials' wall times x those devices."""
    workers, cpus, gpus = spec.workers
    return ("gpu_hours", gpus * workers) if gpus else ("cpu_hours", cpus * workers)


def published_numbers(
    spec: SweepSpec, shape: DataShape | None, test_protocol: str
) -> tuple[dict[str, dict[str, float]] | None, str]:
    """The sweep's published table by row label, when the trials' data and protocol are the paper's,
    and a line that says where the numbers come from or why they are left out."""
    paper = load_paper(spec.table.paper)
    if paper is None:
        return None, ""
    reason = paper.comparable(shape, test_protocol)
    if reason:
        return None, f"Published numbers ({paper.name}) left out, {reason}."
    return paper.rows, f"Published: {paper.name}, {paper.description}, as the paper prints them."
