"""The sweep's one headline: a winner only when the data say so.

The row with the best mean of the test objective is the winner only when it is not the baseline, its difference
to the baseline has a 95% interval that excludes 0 on the better side (the paired one where the rows share two
seeds or more, else Welch's; :attr:`Headline.interval` says which), it has every seed the grid gives it whenever
some row has, and it is not at chance (:mod:`itrlab.report.chance`). Otherwise: "no row differs from <baseline>
at 95% (n seeds)", except that a row still learning (:mod:`itrlab.report.convergence`) measured the budget and is
called inconclusive, never a tie or a loss. The headline is printed, tagged (``itrlab.headline``,
``itrlab.best_row`` for a winner) and logged as metrics. The results page's headline speaks in the verdicts'
words instead (:func:`verdict_headline`, :mod:`itrlab.report.findings`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from itrlab.config.sweep import SweepSpec, seeds_by_row
from itrlab.report.analysis import INCONCLUSIVE, NO_EFFECT, WORDS, Verdict
from itrlab.report.chance import ChanceLevel
from itrlab.report.stats import finite
from itrlab.report.summary import metric_text, row_label

PAIRED, WELCH = "paired", "Welch"


@dataclass(frozen=True)
class RowMarks:
    """Per pivot row: its label, whether it lacks seeds of the grid, whether it is at chance (its rsum
    reaches ``chance_high``, the upper end of a random model's 95% range, when the chance level is known),
    why it is still learning (``""``: it is not, or it is not known) and what became of its trials that did
    not finish (the pivot's ``unfinished``)."""

    labels: list[str]
    incomplete: list[bool]
    at_chance: list[bool]
    chance_high: float | None = None
    learning: list[str] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)

    def still_learning(self, i: int) -> str:
        return self.learning[i] if i < len(self.learning) else ""

    def what_became(self, i: int) -> str:
        return self.unfinished[i] if i < len(self.unfinished) else ""


@dataclass(frozen=True)
class Headline:
    text: str
    column: str
    winner: str | None  # the row named best (None: no row differs from the baseline at 95%)
    baseline: str | None
    metrics: dict[str, float] = field(default_factory=dict)
    interval: str = ""  # the interval the headline's difference used: "paired", "Welch", "" (none)

    def tags(self) -> dict[str, str]:
        return {"itrlab.headline": self.text, **({"itrlab.best_row": self.winner} if self.winner else {})}


def objective_column(table: dict[str, list], spec: SweepSpec) -> tuple[str, str]:
    """The test column the rows are compared by, and ``max`` or ``min``."""
    column, mode = f"test_{spec.objective.metric}", spec.objective.mode
    if f"{column}_mean" not in table:  # an objective with no test counterpart (the loss): test rsum
        column, mode = "test_rsum", "max"
    return column, mode


def row_marks(
    table: dict[str, list], spec: SweepSpec, chance: ChanceLevel | None, learning: Mapping[str, str] | None = None
) -> RowMarks:
    """The marks of the pivot's rows; ``learning``: row label -> why it is still learning."""
    labels = [row_label(table[key][i] for key in spec.table.rows) for i in range(len(table["seeds"]))]
    expected = seeds_by_row(spec)  # the sweep's seeds, or a row's own
    incomplete = [seeds < len(expected.get(label, spec.seeds)) for label, seeds in zip(labels, table["seeds"])]
    at_chance = [False] * len(labels)
    if chance is not None and "test_rsum_mean" in table:
        for i, (mean, half) in enumerate(zip(table["test_rsum_mean"], table["test_rsum_ci95"])):
            if finite(mean):
                at_chance[i] = chance.reaches(mean - half if finite(half) else mean)
    return RowMarks(
        labels,
        incomplete,
        at_chance,
        chance.rsum_high if chance is not None else None,
        [(learning or {}).get(label, "") for label in labels],
        list(table.get("unfinished") or [""] * len(labels)),
    )


def difference(table: dict[str, list], column: str, i: int) -> tuple[float | None, float | None, str, int | None]:
    """Row ``i``'s difference to the baseline in ``column``: the paired one where it has an interval, else
    Welch's: ``(value, half-width, "paired" | "Welch" | "", paired seeds)``."""
    paired, half = table.get(f"{column}_diff_paired", []), table.get(f"{column}_diff_paired_ci95", [])
    if i < len(half) and finite(half[i]) and finite(paired[i]):
        return float(paired[i]), float(half[i]), PAIRED, table[f"{column}_diff_paired_seeds"][i]
    diff, welch = table[f"{column}_diff"][i], table[f"{column}_diff_ci95"][i]
    return (
        float(diff) if finite(diff) else None,
        float(welch) if finite(welch) else None,
        WELCH if finite(welch) else "",
        None,
    )


def headline(
    table: dict[str, list],
    spec: SweepSpec,
    chance: ChanceLevel | None = None,
    learning: Mapping[str, str] | None = None,
    synthetic: str | None = None,
) -> Headline | None:
    """The headline of the pivot ``table`` (see the module doc); None when the pivot has no row.
    ``learning``: row label -> why it is still learning (:func:`itrlab.report.convergence.row_convergence`);
    ``synthetic``: the name of the data set when its data are synthetic, said at the end (a finding about the
    generator's data, not a paper's)."""
    found = _headline(table, spec, chance, learning)
    if found is None or synthetic is None:
        return found
    return replace(found, text=f"{found.text}; on synthetic data: {synthetic}")


def _headline(
    table: dict[str, list], spec: SweepSpec, chance: ChanceLevel | None, learning: Mapping[str, str] | None
) -> Headline | None:
    column, mode = objective_column(table, spec)
    marks = row_marks(table, spec, chance, learning)
    if not marks.labels:
        return None
    means = table.get(f"{column}_mean", [None] * len(marks.labels))
    rows = [i for i, mean in enumerate(means) if finite(mean)]
    base = next((i for i, flag in enumerate(table["baseline"]) if flag), None)
    baseline = marks.labels[base] if base is not None else None
    name = column.removeprefix("test_")
    if not rows:
        return Headline("no row finished: " + _listed(marks, range(len(marks.labels))), column, None, baseline)
    complete = [i for i in rows if not marks.incomplete[i]]
    candidates = complete or rows
    best = (max if mode == "max" else min)(candidates, key=lambda i: means[i])
    seeds = table["seeds"][best]
    metrics = {f"best_row_{name}_mean": float(means[best]), "best_row_seeds": float(seeds)}
    diff, half, interval, paired_seeds = difference(table, column, best)
    better = diff is not None and half is not None and (diff - half > 0 if mode == "max" else diff + half < 0)
    notes = (
        _chance_note(marks, rows)
        + _incomplete_note(table, marks, best, means, mode, column)
        + _no_result_note(marks, [i for i in range(len(means)) if i not in rows and i != base])
    )
    if best != base and better and not marks.at_chance[best]:
        metrics[f"best_row_{name}_vs_baseline"] = diff
        metrics[f"best_row_{name}_vs_baseline_ci95"] = half
        text = (
            f"best row: {marks.labels[best]}, test {name} {metric_text(float(means[best]), column)}"
            f"{_pm(table[f'{column}_ci95'][best], column)}, {_signed(diff, column)} ± {metric_text(half, column)} "
            f"over {baseline} at 95% ({seeds} seeds){_paired_words(interval, paired_seeds, seeds)}"
        )
        return Headline(
            text + _learning_note(marks, [base, best]) + notes, column, marks.labels[best], baseline, metrics, interval
        )
    counts = sorted({table["seeds"][i] for i in rows})
    seeds_text = (
        f"{counts[0]} seed{'s' if counts[0] != 1 else ''}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]} seeds"
    )
    if baseline is None or len(rows) == 1 and base in rows:
        text = (
            f"one row: {marks.labels[best]}, test {name} {metric_text(float(means[best]), column)}"
            f"{_pm(table[f'{column}_ci95'][best], column)} ({seeds_text})" + _learning_note(marks, [best])
        )
        return Headline(text + notes, column, None, baseline, metrics)
    if base not in rows:
        became = marks.what_became(base) or "no finished seed"
        text = (
            f"no comparison: the baseline {baseline} has no result ({became})"
            f"; highest mean: {marks.labels[best]}, test {name} {metric_text(float(means[best]), column)}"
            f"{_pm(table[f'{column}_ci95'][best], column)}"
        )
        return Headline(text + notes, column, None, baseline, metrics)
    text, used = _comparison_text(table, column, marks, base, [i for i in rows if i != base], seeds_text)
    if best != base and diff is not None:
        text += f"; highest mean: {marks.labels[best]}, {_signed(diff, column)}" + (
            f" ± {metric_text(half, column)}{_paired_words(interval, paired_seeds, seeds)}"
            if half is not None
            else " (no interval with one seed)"
        )
    return Headline(text + notes, column, None, baseline, metrics, interval if best != base else used)


def _comparison_text(
    table: dict[str, list], column: str, marks: RowMarks, base: int, others: list[int], seeds_text: str
) -> tuple[str, str]:
    """ "no row differs from A" when every row converged; "A beats every row" when each converged row is below
    it at 95%; "inconclusive" where the baseline or every other row was still learning; else a statement on
    the converged rows, the others named inconclusive. With the interval the differences named used ("" when
    none is named)."""
    baseline = marks.labels[base]
    learning = [i for i in others if marks.still_learning(i)]
    if marks.still_learning(base) or len(learning) == len(others):
        named = ([base] if marks.still_learning(base) else []) + learning
        return f"inconclusive against {baseline} ({seeds_text}): still learning: {_reasons(marks, named)}", ""
    converged = [i for i in others if i not in learning]
    differs = any(_differs(table, column, i) for i in converged)
    used = ""
    if converged and all(_differs(table, column, i) for i in converged):  # the baseline beats every row
        text = (
            f"{baseline} beats {'every converged row' if learning else 'every row'} at 95% ({seeds_text}): "
            + ", ".join(_difference_words(table, column, marks, i) for i in converged)
        )
        used = ", ".join(sorted({difference(table, column, i)[2] for i in converged}))
    else:
        text = (
            f"{'no row' if not learning else 'no converged row'} {'beats' if differs else 'differs from'} "
            f"{baseline} at 95% ({seeds_text})"
        )
    if learning:
        text += f"; inconclusive for the rows still learning: {_reasons(marks, learning)}"
    return text, used


def _difference_words(table: dict[str, list], column: str, marks: RowMarks, i: int) -> str:
    """``VSE -8.7 ± 2.4 (paired by seed)``: row ``i``'s difference to the baseline and its interval's kind."""
    diff, half, interval, _ = difference(table, column, i)
    return f"{marks.labels[i]} {_signed(diff, column)} ± {metric_text(half, column)} ({interval or 'no interval'})"


def _differs(table: dict[str, list], column: str, i: int) -> bool:
    diff, half, _, _ = difference(table, column, i)
    return diff is not None and half is not None and abs(diff) > half


def _paired_words(interval: str, paired_seeds: int | None, seeds: int) -> str:
    if interval != PAIRED:
        return ""
    return ", paired by seed" if paired_seeds == seeds else f", paired over the {paired_seeds} seeds both finished"


def _reasons(marks: RowMarks, rows: list[int]) -> str:
    return ", ".join(f"{marks.labels[i]} ({marks.still_learning(i)})" for i in rows)


def _learning_note(marks: RowMarks, rows: list[int | None]) -> str:
    """The rows of a statement that were still learning: what it says holds at this budget only."""
    named = [i for i in dict.fromkeys(rows) if i is not None and marks.still_learning(i)]
    return f"; still learning, so at this budget only: {_reasons(marks, named)}" if named else ""


def _listed(marks: RowMarks, rows) -> str:
    return ", ".join(f"{marks.labels[i]} ({marks.what_became(i) or 'no finished seed'})" for i in rows)


def _no_result_note(marks: RowMarks, rows: list[int]) -> str:
    """Rows whose every seed diverged or failed: named, with what became of them (never left out)."""
    return f"; no result: {_listed(marks, rows)}" if rows else ""


def _pm(half, column: str) -> str:
    return f" ± {metric_text(float(half), column)}" if finite(half) else ""


def _signed(value: float, column: str) -> str:
    return ("+" if value >= 0 else "") + metric_text(float(value), column)


def _chance_note(marks: RowMarks, rows: list[int]) -> str:
    """The rows (of ``rows``, those with a result) at chance."""
    at = [label for label, flag in zip(marks.labels, marks.at_chance) if flag]
    if not at:
        return ""
    reach = (
        f" (rsum within a random model's 95% range, up to {marks.chance_high:.1f})"
        if marks.chance_high is not None
        else ""
    )
    if len(at) == len(rows):
        return f"; every row is at chance{reach}"
    return f"; at chance{reach}: {', '.join(at)}"


def _incomplete_note(table: dict[str, list], marks: RowMarks, best: int, means: list, mode: str, column: str) -> str:
    """Rows with fewer seeds than the grid, and whether one of them has a better mean than the headline's row."""
    short = [i for i, flag in enumerate(marks.incomplete) if flag and finite(means[i])]
    if not short:
        return ""
    listed = ", ".join(
        f"{marks.labels[i]} ({table['seeds'][i]} seed{'s' if table['seeds'][i] != 1 else ''}"
        + (f"; {marks.what_became(i).split(': ', 1)[0]}" if marks.what_became(i) else "")
        + ")"
        for i in short
    )
    ahead = [i for i in short if (means[i] > means[best] if mode == "max" else means[i] < means[best])]
    note = f"; fewer seeds than the grid: {listed}"
    if ahead:
        note += (
            f", never named over a complete row ({marks.labels[ahead[0]]}'s mean is higher)"
            if mode == "max"
            else f", never named over a complete row ({marks.labels[ahead[0]]}'s mean is lower)"
        )
    return note


def verdict_headline(verdicts: Sequence[Verdict], baseline: str | None, metric: str) -> str:
    """The results page's headline from a sweep's verdicts (:mod:`itrlab.report.findings`): each word of
    :data:`~itrlab.report.analysis.WORDS` with its comparisons (``F +6.1 [+1.9, +10.4]``, the deciding
    interval; a pair whose reference is not ``baseline`` as ``row vs reference``), in that order."""
    if not verdicts:
        return ""
    kinds = sorted({v.interval_kind for v in verdicts if v.interval is not None})
    parts = []
    for word in WORDS:
        named = [_verdict_words(v, baseline, metric) for v in verdicts if v.word == word]
        if named:
            parts.append(f"{word}: {', '.join(named)}")
    judged = f", on {' or '.join(kinds)}" if kinds else ""
    return (
        f"{metric} against {baseline or 'the reference'} ({len(verdicts)} comparison"
        f"{'s' if len(verdicts) != 1 else ''}{judged}, Holm within the sweep): " + "; ".join(parts)
    )


def _verdict_words(verdict: Verdict, baseline: str | None, metric: str) -> str:
    stats = verdict.stats
    name = stats.row if stats.reference == baseline else f"{stats.row} vs {stats.reference}"
    if verdict.word == INCONCLUSIVE or verdict.interval is None or stats.difference is None:
        return name
    low, high = verdict.interval
    text = f"{name} {_signed(stats.difference, metric)} [{_signed(low, metric)}, {_signed(high, metric)}]"
    if verdict.word == NO_EFFECT and stats.mde is not None:
        text += f" (MDE {metric_text(stats.mde, metric)})"
    return text
