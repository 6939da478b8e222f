"""The sweep's report in a paper's layout: ``sweep/report.html`` and ``sweep/report.md`` on the parent run, and the
same table last on the console.

One row per grid row, in order; columns rsum first, then the recalls (and MD where the sweep reports it), each
cell "mean ± 95% interval" over seeds; the difference of the objective to the baseline with Welch's interval and,
where rows share seeds, the paired one; the cost; a note per row. Under them: a chance row
(:class:`~itrlab.report.chance.ChanceLevel`), the published numbers and anchors only where the trials' data have
the paper's shape (:mod:`itrlab.report.published`), the headline (:mod:`itrlab.report.headline`) and the plots.
Every text is escaped for its page (:mod:`itrlab.report.escape`).

The HTML page fits MLflow's artifact view without a horizontal scroll (about 500 px of a 1280-px window): its table
is cut into tables of a few columns, each led by the row's label, and cells and headers may wrap. The Markdown page
and the console keep the one wide table.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from itrlab.config.schema import PREHEAD
from itrlab.config.sweep import SweepSpec, seeds_by_row, seeds_text, shared_seeds
from itrlab.report.anchors import Anchor
from itrlab.report.chance import ChanceLevel
from itrlab.report.convergence import GAIN_FLOOR, SCHEDULE_GAP, TAIL, Convergence
from itrlab.report.escape import md_text, visible
from itrlab.report.headline import PAIRED, WELCH, Headline, RowMarks
from itrlab.report.importance import Importances
from itrlab.report.pages import Markup, escape
from itrlab.report.pages import render as render_page
from itrlab.report.stats import Comparison, finite
from itrlab.report.summary import markdown_table, metric_name, metric_text

RECALLS = ["test_rsum", "test_i2t_R1", "test_i2t_R5", "test_i2t_R10", "test_t2i_R1", "test_t2i_R5", "test_t2i_R10"]
HEADERS = {
    "test_i2t_R1": "i2t R@1",
    "test_i2t_R5": "i2t R@5",
    "test_i2t_R10": "i2t R@10",
    "test_t2i_R1": "t2i R@1",
    "test_t2i_R5": "t2i R@5",
    "test_t2i_R10": "t2i R@10",
    "test_rsum": "rsum",
    "test_md": "MD",
}
HEADERS.update({f"{PREHEAD}_{column}": f"{header} before the head" for column, header in list(HEADERS.items())})


CONVERGENCE_NOTE = "Still learning:"  # the first words of the note that gives the convergence rules
INTERVAL_NOTE = "The headline's interval:"  # the first words of the note on the headline's interval
QUOTED = ("published", "chance", "reference")  # row kinds that are no result of the grid
MODEL_COLUMNS = ["row", "trial", "model", "gallery"]
MODELS_NOTE = (
    "Each trial's model: itrlab.load_model, itrlab evaluate, itrlab retrieve and mlflow models serve take "
    "its URI (docs/models.md); its gallery (data from photos) opens in the MLflow UI at the link shown."
)


def report_columns(spec: SweepSpec) -> list[str]:
    """The paper's columns: rsum, every recall, and MD when the sweep's table asks for it (DBL), and the test
    metrics read before the projection head (``prehead_test_*``) that it asks for."""
    asked = [c for c in spec.table.columns if c in HEADERS and (c == "test_md" or c.startswith(f"{PREHEAD}_test_"))]
    return RECALLS + sorted(asked, key=lambda c: c.startswith(PREHEAD))  # MD, then the readings before the head


def _interval_apart(cell: str) -> Markup:
    """A cell, escaped, with its interval (``± 0.4``) kept whole: a narrow page wraps the cell before it."""
    return Markup(re.sub(r" (± \S+)", r' <span class="ci">\1</span>', str(escape(cell))))


def _png_uri(path: Path) -> str:
    """A PNG file as a ``data:`` URI: the page stays one self-contained file."""
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode()


def _breakable(label: str) -> Markup:
    """A header, escaped, that may break after each dot (``cooperative.<wbr>strategy``)."""
    return Markup(str(escape(label)).replace(".", ".<wbr>"))


def cell(mean, half, seeds: int, grid_seeds: int, column: str, signed: bool = False) -> str:
    """``72.1 ± 0.4``; ``70.3 (1 seed)`` where the grid has more; ``-`` without a value."""
    if not finite(mean):
        return "-"
    text = ("+" if signed and mean >= 0 else "") + metric_text(float(mean), column)
    if finite(half):
        text += f" ± {metric_text(float(half), column)}"
    if seeds != grid_seeds:
        text += f" ({seeds} seed{'s' if seeds != 1 else ''})"
    return text


@dataclass
class PaperReport:
    """The report's content; :meth:`markdown`, :meth:`html` and :meth:`text` render it."""

    title: str
    header: list[str]
    rows: list[list[str]]
    row_kinds: list[str]  # "result", "baseline", "published", "chance", "reference" (a published anchor)
    headline: str
    notes: list[str] = field(default_factory=list)
    provenance: list[str] = field(default_factory=list)
    # each trial's model: row label, trial, model URI (runs:/<id>/model), its gallery in the MLflow UI or ""
    models: list[list[str]] = field(default_factory=list)
    # the HTML page's tables: how many columns after the label each takes, in order (none: one table)
    column_groups: list[int] = field(default_factory=list)
    importance: Importances | None = None  # what the parameters did (itrlab.report.importance), after the notes

    def markdown(self, plots: dict[str, str] | None = None) -> str:
        """Markdown; ``plots`` maps a caption to an image path relative to the page."""
        lines = [
            f"## {md_text(self.title)}",
            "",
            *[f"- {md_text(item)}" for item in self.provenance],
            "",
            f"**{md_text(self.headline)}**",
            "",
            markdown_table(self.header, self.rows, [kind in QUOTED for kind in self.row_kinds]),
            "",
            *[md_text(note) + "\n" for note in self.notes],
        ]
        if self.importance is not None:
            lines += [self.importance.markdown(), ""]
        if self.models:
            lines += [f"{md_text(MODELS_NOTE)}\n", markdown_table(MODEL_COLUMNS, self.models), ""]
        for caption, path in (plots or {}).items():
            lines += [f"![{md_text(caption)}]({path})", ""]
        return "\n".join(lines).rstrip("\n") + "\n"

    def html(self, plots: dict[str, Path] | None = None) -> str:
        """One self-contained HTML page (``templates/sweep_report.html.j2``; ``plots``: caption -> PNG file, embedded
        as data URIs)."""
        return render_page(
            "sweep_report.html.j2",
            title=self.title,
            provenance=self.provenance,
            headline=self.headline,
            tables=[self._html_table(columns) for columns in self._html_columns()],
            notes=self.notes,
            importance=self.importance.page_part() if self.importance is not None else None,
            models=self.models,
            models_note=MODELS_NOTE,
            model_columns=MODEL_COLUMNS,
            plots=[{"caption": caption, "uri": _png_uri(path)} for caption, path in (plots or {}).items()],
        )

    def _html_columns(self) -> list[list[int]]:
        """The columns (indices of :attr:`header`) of each of the HTML page's tables, the label's first in each."""
        groups, start = [], 1
        for size in self.column_groups or [len(self.header) - 1]:
            groups.append([0, *range(start, min(start + size, len(self.header)))])
            start += size
        if start < len(self.header):
            groups.append([0, *range(start, len(self.header))])
        return [group for group in groups if len(group) > 1]

    def _html_table(self, columns: list[int]) -> dict:
        """One of the HTML page's tables: ``columns`` of every row that has a cell there besides its label; the
        label's header may break after each dot, an interval (``± 0.4``) stays whole."""
        note = self.header.index("note") if "note" in self.header else -1  # the note column: text, left-aligned
        header = [_breakable(self.header[j]) if j == 0 else self.header[j] for j in columns]
        rows = [
            {
                "kind": kind,
                "cells": [
                    {"text": row[j] if j in (0, note) else _interval_apart(row[j]), "note": j == note} for j in columns
                ],
            }
            for row, kind in zip(self.rows, self.row_kinds)
            if any(row[j] for j in columns[1:])
        ]
        return {"header": header, "rows": rows}

    def text(self) -> str:
        """The console's aligned table, with the headline under it (a label's newline shown as ``␊``)."""
        header, rows = [visible(h) for h in self.header], [[visible(c) for c in row] for row in self.rows]
        widths = [max(len(h), *(len(r[j]) for r in rows)) for j, h in enumerate(header)]
        lines = [visible(self.title), "  ".join(h.ljust(w) for h, w in zip(header, widths))]
        lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
        importance = [visible(line) for line in self.importance.text().splitlines()] if self.importance else []
        return "\n".join([*lines, *map(visible, self.notes), *importance, visible(self.headline)])


@dataclass(frozen=True)
class ReportInputs:
    """What the report is built from besides the pivot."""

    headline: Headline
    marks: RowMarks
    chance: ChanceLevel | None
    published: dict[str, dict[str, float]] | None  # row label -> published numbers, when comparable
    published_note: str  # where the published numbers come from, or why they are absent
    cost_column: str  # cpu_hours | gpu_hours
    devices_per_trial: float
    provenance: list[str]
    comparisons: list[Comparison] = field(default_factory=list)  # table.compare's pairs, in the objective
    anchors: list[Anchor] = field(default_factory=list)  # published anchors, when comparable
    anchors_note: str = ""  # what the anchors are, or why they are absent ("" when the sweep names none)
    convergence: dict[str, Convergence] | None = None  # per row label; None: the validation curves are unknown


def build_report(table: dict[str, list], spec: SweepSpec, inputs: ReportInputs) -> PaperReport:
    """The report of the pivot ``table`` (:func:`itrlab.report.pivot.pivot`)."""
    columns = report_columns(spec)
    objective = inputs.headline.column
    keys = spec.table.rows
    expected = seeds_by_row(spec)  # the seeds each row runs: the sweep's, or its own

    def grid_seeds(label: str) -> int:
        return len(expected.get(label, spec.seeds))

    base_label = next((label for i, label in enumerate(inputs.marks.labels) if table["baseline"][i]), None)
    unit = "GPU-h" if inputs.cost_column == "gpu_hours" else "CPU-h"
    baseline = inputs.headline.baseline or "baseline"
    versus = f"{HEADERS.get(objective, objective)} vs {baseline}"
    paired = any(finite(h) for h in table.get(f"{objective}_diff_paired_ci95", []))
    header = [
        " / ".join(keys),
        *(HEADERS[c] for c in columns),
        versus,
        *([f"{versus}, paired"] if paired else []),
        "wall / trial",
        unit,
        "note",
    ]
    rows, kinds = [], []
    for i, label in enumerate(inputs.marks.labels):
        seeds = table["seeds"][i]
        cells = [label] + [
            cell(
                table.get(f"{c}_mean", [None] * (i + 1))[i],
                table.get(f"{c}_ci95", [None] * (i + 1))[i],
                seeds,
                grid_seeds(label),
                c,
            )
            for c in columns
        ]
        is_base = bool(table["baseline"][i])
        cells.append(
            "baseline"
            if is_base
            else cell(
                table[f"{objective}_diff"][i],
                table[f"{objective}_diff_ci95"][i],
                seeds,
                grid_seeds(label),
                objective,
                signed=True,
            )
        )
        if paired:
            pairs = table[f"{objective}_diff_paired_seeds"][i]
            cells.append(
                "baseline"
                if is_base
                else cell(
                    table[f"{objective}_diff_paired"][i],
                    table[f"{objective}_diff_paired_ci95"][i],
                    pairs if pairs is not None else 0,
                    shared_seeds(spec, label, base_label),
                    objective,
                    signed=True,
                )
            )
        wall, hours = table["wall_s_mean"][i], table[inputs.cost_column][i]
        cells += [_duration(wall), "-" if not finite(hours) else f"{hours:.3g}"]
        note = [f"{seeds} of {grid_seeds(label)} seeds"] if inputs.marks.incomplete[i] else []
        if inputs.marks.what_became(i):
            note.append(inputs.marks.what_became(i))
        if inputs.marks.at_chance[i]:
            note.append("at chance")
        if inputs.marks.still_learning(i):
            note.append(f"still learning: {inputs.marks.still_learning(i)}")
        found = (inputs.convergence or {}).get(label)
        if found and found.chosen:
            note.append(f"decay chosen on validation: {found.chosen}")
        if found and found.schedule:
            note.append(f"schedule not tuned: {found.schedule}")
        if inputs.headline.winner == label:
            note.append("best")
        cells.append(", ".join(note))
        rows.append(cells)
        kinds.append("baseline" if is_base else "result")
        numbers = (inputs.published or {}).get(label)
        if numbers:
            rows.append([f"{label} (published)", *_printed(numbers, columns), *[""] * (len(header) - 1 - len(columns))])
            kinds.append("published")
    if inputs.chance is not None:
        level = inputs.chance
        low, high = level.rsum_band
        rows.append(
            ["chance"]
            + [
                f"{low:.1f}-{high:.1f}"
                if metric_name(c) == "rsum"
                else metric_text(level.recalls[metric_name(c)], c)
                if metric_name(c) != "md"
                else "-"
                for c in columns
            ]
            + [""] * (len(header) - 2 - len(columns))
            + ["random scores: rsum's 95% range, the recalls' expected values"]
        )
        kinds.append("chance")
    for anchor in inputs.anchors:  # below everything of ours: never a row of the grid
        rows.append(
            [
                f"{anchor.name} (published)",
                *_printed(anchor.numbers, columns),
                *[""] * (len(header) - 2 - len(columns)),
                anchor.note(),
            ]
        )
        kinds.append("reference")
    notes = [_cells_note(table, spec, baseline)]
    if paired:
        notes.append(
            f"'vs {baseline}, paired': the mean of the per-seed differences over the seeds both rows "
            f"finished (their count where it is not the grid's), with the Student-t 95% interval of those "
            f"differences: a seed fixes the data order and the initialisation of the parts two rows share, "
            f"so its share of the noise cancels."
        )
    notes.append(_interval_note(inputs.headline))
    notes.append(convergence_note(inputs.convergence, inputs.marks.labels))
    if inputs.chance is not None:
        low, high = inputs.chance.rsum_band
        notes.append(
            f"Chance: {inputs.chance.description}; a random model's rsum falls in {low:.1f}-{high:.1f} "
            f"95% of the time (the plot's grey band); a row is 'at chance' when its rsum "
            f"{'interval starts (its mean, with one seed)' if _any_interval(table) else 'is'} at or below "
            f"{high:.1f}, inside that band."
        )
    if inputs.comparisons:
        notes.append(
            "Other differences, with Welch's 95% interval: "
            + "; ".join(_comparison(c, min(grid_seeds(c.row), grid_seeds(c.reference))) for c in inputs.comparisons)
            + "."
        )
        paired_pairs = [c for c in inputs.comparisons if c.paired is not None]
        if paired_pairs:
            notes.append(
                "Other differences, paired by seed: "
                + "; ".join(_comparison(c, shared_seeds(spec, c.row, c.reference), paired=True) for c in paired_pairs)
                + "."
            )
    notes.append(inputs.published_note)
    notes.append(inputs.anchors_note)
    notes.append(
        f"Cost: wall / trial = the mean run time of a row's trials (building the method, training, the test "
        f"evaluation); {unit} = the row's summed trial wall time x the {inputs.devices_per_trial:g} "
        f"{'GPU' if unit == 'GPU-h' else 'CPU'}{'' if inputs.devices_per_trial == 1 else 's'} each trial "
        f"reserved (a run's own {inputs.cost_column} metric counts the same way); "
        f"total {_total(table, inputs.cost_column):.3g} {unit}."
    )
    prehead = sum(c.startswith(f"{PREHEAD}_") for c in columns)
    return PaperReport(
        f"{spec.name}: test results over seeds {seeds_text(spec)}",
        header,
        rows,
        kinds,
        inputs.headline.text,
        [n for n in notes if n],
        inputs.provenance,
        column_groups=[len(columns) - prehead, prehead],
    )


def _any_interval(table: dict[str, list]) -> bool:
    """Whether some row has an interval (two seeds or more)."""
    return any(isinstance(seeds, (int, float)) and seeds > 1 for seeds in table["seeds"])


def _cells_note(table: dict[str, list], spec: SweepSpec, baseline: str) -> str:
    """What a cell holds: "mean ± interval" only where rows have seeds to make one."""
    if _any_interval(table):
        return (
            f"Cells: mean ± 95% Student-t interval over seeds {seeds_text(spec)} (the seed count where a row has "
            f"fewer; one seed: its value, no interval); 'vs {baseline}': the difference of the means with "
            f"Welch's 95% interval."
        )
    seeds = ", ".join(map(str, spec.seeds))
    return (
        f"Cells: one run per row (seed {seeds}{', the others missing' if len(spec.seeds) > 1 else ''}): "
        f"no interval, so no difference can be told from noise; 'vs {baseline}': the difference of the two "
        f"runs' values. Two seeds or more give each cell a 95% interval."
    )


def _printed(numbers: dict[str, float], columns: list[str]) -> list[str]:
    """Published numbers (keyed ``i2t_R1``, ``rsum``...) in the report's ``columns``, ``-`` where absent."""
    return [
        metric_text(numbers[c.removeprefix("test_")], c) if c.removeprefix("test_") in numbers else "-" for c in columns
    ]


def _interval_note(top: Headline) -> str:
    """Which interval the headline's difference used."""
    if top.interval == PAIRED:
        return f"{INTERVAL_NOTE} the paired one (the per-seed differences over the seeds both rows finished)."
    if top.interval == WELCH:
        return f"{INTERVAL_NOTE} Welch's (the two rows share fewer than two finished seeds)."
    return ""


def convergence_note(found: Mapping[str, Convergence] | None, labels: list[str]) -> str:
    """The still-learning and schedule rules, and the rows of ``labels`` they mark (:mod:`.convergence`)."""
    if found is None:
        return ""
    learning = [label for label in labels if label in found and found[label].learning]
    untuned = [label for label in labels if label in found and found[label].schedule]
    unknown = [label for label in labels if label not in found]
    return (
        f"{CONVERGENCE_NOTE} a row whose best validation rsum so far rose over the last 1/{TAIL} of its epochs by "
        f"more, on average over its seeds, than its tolerance (half the smallest minimum detectable effect of its "
        f"comparisons; {GAIN_FLOOR:g} rsum where none is known); its numbers measure the budget, not the method, "
        f"and the headline calls no comparison with it a tie or a loss. Schedule not tuned: a row whose best "
        f"epoch lies at or before half its first learning-rate decay and {SCHEDULE_GAP} or more epochs before it, "
        f"or whose validation rsum had fallen from its best by more than its tolerance when the rate decayed"
        + (
            ", each seed judged at the decay it chose on validation (train.lr_decay_choices). "
            if any(found[label].chosen for label in labels if label in found)
            else ". "
        )
        + (f"Still learning here: {', '.join(learning)}." if learning else "No row was still learning.")
        + (f" Schedule not tuned here: {', '.join(untuned)}." if untuned else "")
        + (f" Not judged (no validation history): {', '.join(unknown)}." if unknown else "")
    )


def _comparison(comparison: Comparison, grid_seeds: int, paired: bool = False) -> str:
    interval = comparison.paired if paired else comparison.difference
    text = (
        f"{comparison.row} vs {comparison.reference} "
        f"{cell(interval.value, interval.half_width, interval.n, grid_seeds, comparison.column, signed=True)}"
    )
    if interval.half_width is not None:
        text += " (differs at 95%)" if interval.excludes_zero() else " (the interval holds 0)"
    return text


def _duration(seconds) -> str:
    if not finite(seconds):
        return "-"
    return (
        f"{seconds:.0f} s"
        if seconds < 120
        else (f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h")
    )


def _total(table: dict[str, list], column: str) -> float:
    return sum(value for value in table.get(column, []) if finite(value))
