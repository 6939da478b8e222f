"""The sweep's one headline: a winner only when the data say so.

The row with the best mean of the test objective (``test_<objective.metric>``, else test rsum) is
named the winner only when

* it is not the baseline, and its difference to the baseline has a 95% Welch interval that excludes
  0 on the better side (two seeds or more on both sides: one seed has no interval, so no winner);
* it has every seed of the grid whenever some row has (a row cut short by Ctrl-C or failures is
  marked and never named over a complete one).

Otherwise the headline says "no row differs from <baseline> at 95% (n seeds)". Rows whose numbers a
random model could produce (:mod:`itrlab.report.chance`) are marked "at chance", and a winner at
chance is no winner either. The same headline is printed, tagged (``itrlab.headline``,
``itrlab.best_row`` only for a winner) and logged as metrics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from itrlab.config.sweep import SweepSpec
from itrlab.report.chance import ChanceLevel
from itrlab.report.summary import number, row_label


@dataclass(frozen=True)
class RowMarks:
    """Per pivot row: its label, whether it lacks seeds of the grid, whether it is at chance (its rsum
    reaches ``chance_high``, the upper end of a random model's 95% range, when the chance level is known)."""

    labels: list[str]
    incomplete: list[bool]
    at_chance: list[bool]
    chance_high: float | None = None


@dataclass(frozen=True)
class Headline:
    text: str
    column: str
    winner: str | None  # the row named best (None: no row differs from the baseline at 95%)
    baseline: str | None
    metrics: dict[str, float] = field(default_factory=dict)

    def tags(self) -> dict[str, str]:
        return {"itrlab.headline": self.text, **({"itrlab.best_row": self.winner} if self.winner else {})}


def objective_column(table: dict[str, list], spec: SweepSpec) -> tuple[str, str]:
    """The test column the rows are compared by, and ``max`` or ``min``."""
    column, mode = f"test_{spec.objective.metric}", spec.objective.mode
    if f"{column}_mean" not in table:  # an objective with no test counterpart (the loss): test rsum
        column, mode = "test_rsum", "max"
    return column, mode


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def row_marks(table: dict[str, list], spec: SweepSpec, chance: ChanceLevel | None) -> RowMarks:
    labels = [row_label(table[key][i] for key in spec.table.rows) for i in range(len(table["seeds"]))]
    incomplete = [seeds < len(spec.seeds) for seeds in table["seeds"]]
    at_chance = [False] * len(labels)
    if chance is not None and "test_rsum_mean" in table:
        for i, (mean, half) in enumerate(zip(table["test_rsum_mean"], table["test_rsum_ci95"])):
            if _finite(mean):
                at_chance[i] = chance.reaches(mean - half if _finite(half) else mean)
    return RowMarks(labels, incomplete, at_chance, chance.rsum_high if chance is not None else None)


def headline(table: dict[str, list], spec: SweepSpec, chance: ChanceLevel | None = None) -> Headline | None:
    """The headline of the pivot ``table`` (see the module doc); None when no row has a finite mean."""
    column, mode = objective_column(table, spec)
    marks = row_marks(table, spec, chance)
    means = table.get(f"{column}_mean", [])
    rows = [i for i, mean in enumerate(means) if _finite(mean)]
    if not rows:
        return None
    complete = [i for i in rows if not marks.incomplete[i]]
    candidates = complete or rows
    best = (max if mode == "max" else min)(candidates, key=lambda i: means[i])
    base = next((i for i, flag in enumerate(table["baseline"]) if flag), None)
    baseline = marks.labels[base] if base is not None else None
    name = column.removeprefix("test_")
    seeds = table["seeds"][best]
    metrics = {f"best_row_{name}_mean": float(means[best]), "best_row_seeds": float(seeds)}
    diff, half = table[f"{column}_diff"][best], table[f"{column}_diff_ci95"][best]
    better = _finite(diff) and _finite(half) and (diff - half > 0 if mode == "max" else diff + half < 0)
    chance_note = _chance_note(marks) + _incomplete_note(table, marks, best, means, mode, column)
    if best != base and better and not marks.at_chance[best]:
        metrics[f"best_row_{name}_vs_baseline"] = float(diff)
        metrics[f"best_row_{name}_vs_baseline_ci95"] = float(half)
        text = (f"best row: {marks.labels[best]}, test {name} {number(float(means[best]), column)}"
                f"{_pm(table[f'{column}_ci95'][best], column)}, {_signed(diff, column)} ± {number(float(half), column)} "
                f"over {baseline} at 95% ({seeds} seeds)")
        return Headline(text + chance_note, column, marks.labels[best], baseline, metrics)
    counts = sorted({table["seeds"][i] for i in rows})
    seeds_text = f"{counts[0]} seed{'s' if counts[0] != 1 else ''}" if len(counts) == 1 else \
        f"{counts[0]}-{counts[-1]} seeds"
    if baseline is None or len(rows) == 1:
        text = f"one row: {marks.labels[best]}, test {name} {number(float(means[best]), column)}" \
               f"{_pm(table[f'{column}_ci95'][best], column)} ({seeds_text})"
    else:
        differs = any(_finite(d) and _finite(h) and abs(d) > h
                      for d, h in zip(table[f"{column}_diff"], table[f"{column}_diff_ci95"]))
        text = f"no row {'beats' if differs else 'differs from'} {baseline} at 95% ({seeds_text})"
        if best != base and _finite(diff):
            text += f"; highest mean: {marks.labels[best]}, {_signed(diff, column)}" + \
                    (f" ± {number(float(half), column)}" if _finite(half) else " (no interval with one seed)")
    return Headline(text + chance_note, column, None, baseline, metrics)


def _pm(half, column: str) -> str:
    return f" ± {number(float(half), column)}" if _finite(half) else ""


def _signed(value: float, column: str) -> str:
    return ("+" if value >= 0 else "") + number(float(value), column)


def _chance_note(marks: RowMarks) -> str:
    at = [label for label, flag in zip(marks.labels, marks.at_chance) if flag]
    if not at:
        return ""
    reach = f" (rsum within a random model's 95% range, up to {marks.chance_high:.1f})" \
        if marks.chance_high is not None else ""
    if len(at) == len(marks.labels):
        return f"; every row is at chance{reach}"
    return f"; at chance{reach}: {', '.join(at)}"


def _incomplete_note(table: dict[str, list], marks: RowMarks, best: int, means: list, mode: str, column: str) -> str:
    """Rows with fewer seeds than the grid, and whether one of them has a better mean than the headline's row."""
    short = [i for i, flag in enumerate(marks.incomplete) if flag and _finite(means[i])]
    if not short:
        return ""
    listed = ", ".join(f"{marks.labels[i]} ({table['seeds'][i]} seed{'s' if table['seeds'][i] != 1 else ''})"
                       for i in short)
    ahead = [i for i in short if (means[i] > means[best] if mode == "max" else means[i] < means[best])]
    note = f"; fewer seeds than the grid: {listed}"
    if ahead:
        note += f", never named over a complete row ({marks.labels[ahead[0]]}'s mean is higher)" if mode == "max" \
            else f", never named over a complete row ({marks.labels[ahead[0]]}'s mean is lower)"
    return note
