"""The results page's verdicts (:mod:`itrlab.report.findings`): the table of the sweep's comparisons with their
numbers and verdict words, the notes that give the rule, and the sweep's stored table brought in line with
them (identical rows as one row, each row's convergence marks by the rule the verdicts use).

Pure data in, text out; every text is escaped where the page renders it (:mod:`itrlab.report.results_page`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from itrlab.report.analysis import ALPHA, POWER, SEEDS_AND_IMAGES, SEEDS_ONLY, Verdict
from itrlab.report.bootstrap import REPLICATES
from itrlab.report.convergence import Convergence
from itrlab.report.findings import EXPECTED_BETTER, FROM_PAPER, Findings
from itrlab.report.identical import merged_label
from itrlab.report.paper_report import CONVERGENCE_NOTE, INTERVAL_NOTE, convergence_note
from itrlab.report.summary import metric_text

HEADER = [
    "comparison",
    "seeds",
    "paired over seeds",
    "seeds + test images",
    "MDE",
    "p",
    "Holm p",
    "paper",
    "verdict",
    "why",
]
MERGED_ROWS = ("result", "baseline")  # the stored table's kinds of row that are rows of the grid


def _signed(value: float | None, metric: str) -> str:
    return "-" if value is None else ("+" if value >= 0 else "") + metric_text(value, metric)


def _p(value: float | None) -> str:
    return "-" if value is None else f"{value:.2g}"


def verdict_row(verdict: Verdict) -> list[str]:
    """One comparison's cells, in :data:`HEADER`'s order."""
    s, metric = verdict.stats, verdict.stats.metric
    paired = (
        f"{_signed(s.paired.value, metric)} ± {metric_text(s.paired.half_width, metric)}"
        if s.paired is not None and s.paired.half_width is not None
        else _signed(s.difference, metric)
    )
    boot = s.bootstrap
    both = f"{_signed(boot.value, metric)} [{_signed(boot.low, metric)}, {_signed(boot.high, metric)}]" if boot else "-"
    return [
        f"{s.row} vs {s.reference}",
        str(s.seeds),
        paired,
        both,
        "-" if s.mde is None else metric_text(s.mde, metric),
        _p(s.p),
        _p(verdict.holm_p),
        _signed(verdict.paper_effect, metric),
        verdict.word,
        verdict.reason,
    ]


def verdict_notes(found: Findings) -> list[str]:
    """What the verdicts table holds, its rule, the directions, the rows taken as one and what is missing."""
    count = sum(v.holm_p is not None for v in found.verdicts)
    notes = [
        f"Each comparison in {found.metric} over the seeds both rows finished: 'paired over seeds', the mean of "
        f"the per-seed differences with their Student-t 95% interval; 'seeds + test images', the same mean with "
        f"the 95% percentile interval of a paired bootstrap ({REPLICATES:,} replicates, a fixed seed) that "
        f"resamples the test images within each fold (each with its captions, the same draw for both rows and "
        f"every seed) and the shared seeds; 'MDE', the smallest difference a two-sided paired t-test at "
        f"{ALPHA:g} over these seeds, with their spread, detects {POWER:.0%} of the time; 'p', that paired "
        f"t-test's; 'Holm p', adjusted by Holm's step-down method over the comparisons of this sweep that have "
        f"one ({count}); 'paper', the paper's own difference.",
        f"The verdict, fixed before the data (itrlab.report.analysis): reproduced when the deciding interval "
        f"('{SEEDS_AND_IMAGES}' where both rows have test ranks for every seed, else '{SEEDS_ONLY}') excludes 0 "
        f"in the expected direction and the Holm p is below {ALPHA:g}; contradicted when it excludes 0 the "
        f"other way with the Holm p below {ALPHA:g}; no effect detected otherwise, with the MDE and whether the "
        f"paper's effect lies outside the interval; inconclusive when a row is still learning, failed (no "
        f"finished seed, a loss on its plateau, collapsed embeddings) or is a step (the row adds one component to "
        f"its reference) measured on a reference whose own comparison with the baseline was not reproduced. "
        f"Every verdict holds in this setting (data, "
        f"backbone, budget) only.",
    ]
    from_paper = [f"{row} vs {ref}" for (row, ref), how in found.directions.items() if how == FROM_PAPER]
    expected = [f"{row} vs {ref}" for (row, ref), how in found.directions.items() if how == EXPECTED_BETTER]
    notes.append(
        "Expected direction: "
        + "; ".join(
            part
            for part in (
                f"{FROM_PAPER}: {', '.join(from_paper)}" if from_paper else "",
                f"{EXPECTED_BETTER}: {', '.join(expected)}" if expected else "",
            )
            if part
        )
        + "."
    )
    for group in found.identical:
        notes.append(
            f"{merged_label(group)}: identical to every digit (every seed's test metrics, validation curves and "
            f"test ranks where logged): listed and judged as one row."
        )
    if found.failed:
        notes.append("Failed to train: " + "; ".join(f"{row} ({why})" for row, why in found.failed.items()) + ".")
    if found.missing_ranks:
        notes.append(
            f"Trials without test ranks (their comparisons are judged on seeds only): {', '.join(found.missing_ranks)}."
        )
    return notes


def _note_without(note: str, phrase: str) -> str:
    return re.sub(r"^(, )+|(, )+$", "", note.replace(phrase, "").replace(", , ", ", "))


def aligned_table(
    report: Mapping[str, Any], stored: Mapping[str, Mapping[str, Any]], found: Findings
) -> tuple[list[list[str]], list[str], list[str]]:
    """The sweep's stored table (``report``: header, rows, row kinds, notes) with the rows identical to every
    digit as one (``D = F``, the first row's place), each row's note marked by ``found``'s convergence in place
    of the ``stored`` one (``summary["convergence"]``), and the convergence and headline-interval notes given
    by the rule the verdicts use: (rows, row kinds, notes)."""
    header, rows = report["header"], [list(row) for row in report["rows"]]
    kinds = list(report.get("row_kinds") or ["result"] * len(rows))
    note_at = header.index("note") if "note" in header else None
    first = {group[0]: group for group in found.identical}
    dropped = {row for group in found.identical for row in group[1:]}
    kept_rows, kept_kinds = [], []
    for row, kind in zip(rows, kinds):
        label = row[0]
        if kind in MERGED_ROWS and label in dropped:
            continue
        if kind in MERGED_ROWS and note_at is not None:
            row[note_at] = _marks(row[note_at], stored.get(label, {}), found.convergence.get(label))
        if kind in MERGED_ROWS and label in first:
            row[0] = merged_label(first[label])
        kept_rows.append(row)
        kept_kinds.append(kind)
    labels = [row[0] for row, kind in zip(kept_rows, kept_kinds) if kind in MERGED_ROWS]
    converged = {found.label(row): c for row, c in found.convergence.items()}
    notes = []
    for note in report.get("notes", []):
        if note.startswith(CONVERGENCE_NOTE):
            note = convergence_note(converged, labels)
        elif note.startswith(INTERVAL_NOTE):
            continue  # the page's headline is the verdicts'
        notes.append(note)
    return kept_rows, kept_kinds, notes


def _marks(note: str, stored: Mapping[str, Any], now: Convergence | None) -> str:
    """A row's note with its stored still-learning mark replaced by ``now``'s, its schedule mark added, and the
    sweep headline's ``best`` mark dropped (the page's headline is the verdicts')."""
    if stored.get("still_learning"):
        note = _note_without(note, f"still learning: {stored['still_learning']}")
    if stored.get("schedule"):
        note = _note_without(note, f"schedule not tuned: {stored['schedule']}")
    note = ", ".join(part for part in note.split(", ") if part != "best")  # the sweep's winner: the verdicts speak
    marks = []
    if now is not None and now.learning:
        marks.append(f"still learning: {now.learning}")
    if now is not None and now.schedule:
        marks.append(f"schedule not tuned: {now.schedule}")
    return ", ".join(part for part in (note, *marks) if part)


def convergence_table(found: Findings) -> dict[str, list]:
    """The page's "Converged?" table: one row per row label (identical rows once, merged), the rule's figures."""
    rows = {found.label(row): c for row, c in found.convergence.items()}
    return {
        "row": list(rows),
        "seeds": [c.seeds for c in rows.values()],
        "epochs": [c.epochs for c in rows.values()],
        "best_epoch": [c.best_epoch for c in rows.values()],
        "since": [c.since for c in rows.values()],
        "gain": [round(c.gain, 2) for c in rows.values()],
        "tolerance": [round(c.tolerance, 2) for c in rows.values()],
        "still_learning": [c.learning for c in rows.values()],
        "first_decay": [c.decay for c in rows.values()],
        **({"decay_chosen": [c.chosen for c in rows.values()]} if any(c.chosen for c in rows.values()) else {}),
        "schedule": [c.schedule for c in rows.values()],
    }
