"""What a sweep's evidence says: every comparison of its table with its numbers and verdict, the rows still learning
or on a schedule not tuned for them, the identical rows, and the headline.

**The family**: every row against the baseline, then the ``table.compare`` and ``table.steps`` pairs, in the
sweep's metric; identical rows (:mod:`itrlab.report.identical`) count once under their merged label (``D = F``);
Holm's adjustment runs over the comparisons with a paired p. **The direction** is the sign of the paper's own
effect where ``table.paper`` gives both rows (the claim is the paper's), else the row is expected better than its
reference. **Inconclusive** when either row has no finished seed, is still learning (:mod:`itrlab.report.convergence`)
or failed to train (:mod:`itrlab.report.verdict`), or, for a step, when the reference's own comparison with the
baseline is not reproduced. The two rows of a ``table.compare`` pair are siblings: each stands on its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from itrlab.report.analysis import REPRODUCED, ComparisonStats, Verdict, compare, holm, judge, smallest_mdes
from itrlab.report.convergence import Convergence, chosen_decays, row_convergence, tolerance
from itrlab.report.evidence import Evidence
from itrlab.report.identical import identical_groups, merged_label

EXPECTED_BETTER = "the row better than its reference (no published effect for it)"
FROM_PAPER = "the sign of the paper's own effect"


@dataclass(frozen=True)
class Findings:
    """The verdicts of a sweep (see the module doc): per comparison (``verdicts``, in the family's order) and
    where each direction came from (``directions``: ``(row, reference)`` -> :data:`FROM_PAPER` or
    :data:`EXPECTED_BETTER`); per row its ``convergence`` and why a seed failed (``failed``); the groups of
    ``identical`` rows; the finished trials without test ranks (``missing_ranks``)."""

    metric: str
    baseline: str | None
    verdicts: list[Verdict]
    directions: dict[tuple[str, str], str] = field(default_factory=dict)
    convergence: dict[str, Convergence] = field(default_factory=dict)
    identical: list[tuple[str, ...]] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    missing_ranks: list[str] = field(default_factory=list)

    def label(self, row: str) -> str:
        """``row``'s label in the verdicts: the merged one for a member of identical rows."""
        return next((merged_label(group) for group in self.identical if row in group), row)


def _fingerprints(evidence: Evidence) -> dict[str, dict[int, tuple]]:
    """Row -> seed -> what its trial measured (every test metric, the validation curve, the ranks' bytes)."""
    prints: dict[str, dict[int, tuple]] = {}
    for t in evidence.trials:
        if t.finished and t.seed is not None:
            ranks = (t.ranks.i2t.tobytes(), t.ranks.t2i.tobytes()) if t.ranks is not None else None
            prints.setdefault(t.row, {})[t.seed] = (tuple(sorted(t.metrics.items())), t.curve, ranks)
    return {row: prints.get(row, {}) for row in evidence.rows}


def first_labels(groups: list[tuple[str, ...]]) -> dict[str, str]:
    """Row -> the first label of its group of identical rows: the label a comparison of it stands under."""
    return {row: group[0] for group in groups for row in group}


def family(evidence: Evidence, groups: list[tuple[str, ...]]) -> list[tuple[str, str]]:
    """The sweep's comparisons (row, reference) as the module doc lists them, by the rows' first labels (a group
    of identical rows stands under its first row); without duplicates or a row against itself. A declared pair
    (``table.compare``) stands for its two rows in the order it names them: the baseline's comparison with the
    same row is not judged again the other way round (VSE against VSE++ where the sweep declares VSE++ against
    VSE)."""
    first = first_labels(groups)
    declared = {frozenset((first.get(row, row), first.get(ref, ref))) for row, ref in evidence.pairs}
    pairs = [
        (row, evidence.baseline)
        for row in evidence.rows
        if evidence.baseline is not None
        and frozenset((first.get(row, row), first.get(evidence.baseline, evidence.baseline))) not in declared
    ]
    seen, found = set(), []
    for row, reference in [*pairs, *evidence.pairs]:
        pair = (first.get(row, row), first.get(reference, reference))
        if pair[0] != pair[1] and pair not in seen:
            seen.add(pair)
            found.append(pair)
    return found


def _paper_effect(published: Mapping[str, Mapping[str, float]], group_of, pair, metric) -> float | None:
    """The paper's effect of ``pair`` in ``metric`` (every member of a merged row giving the same), or None."""
    effects = {
        published[row][metric] - published[ref][metric]
        for row in group_of(pair[0])
        for ref in group_of(pair[1])
        if metric in published.get(row, {}) and metric in published.get(ref, {})
    }
    return effects.pop() if len(effects) == 1 else None


def findings(evidence: Evidence, published: Mapping[str, Mapping[str, float]] | None = None) -> Findings:
    """The findings of ``evidence`` (the module doc); ``published``: the sweep's published table by row label
    (metric name -> number), for the paper's directions and effects."""
    metric, published = evidence.metric, published or {}
    groups = identical_groups(_fingerprints(evidence))
    members = {group[0]: group for group in groups}

    def group_of(row: str) -> tuple[str, ...]:
        return members.get(row, (row,))

    pairs = family(evidence, groups)
    first = first_labels(groups)
    steps = {(first.get(row, row), first.get(ref, ref)) for row, ref in evidence.steps}
    stats: dict[tuple[str, str], ComparisonStats] = {}
    for row, reference in pairs:
        stats[(row, reference)] = compare(
            evidence.values(row),
            evidence.values(reference),
            evidence.ranks(row),
            evidence.ranks(reference),
            metric,
            merged_label(group_of(row)),
            merged_label(group_of(reference)),
        )
    mdes = smallest_mdes({row: evidence.values(row) for row in evidence.rows}, pairs)
    smallest = {member: mdes[row] for row in mdes for member in group_of(row)}
    curves = {row: series for row in evidence.rows if (series := [t.curve for t in evidence.finished(row) if t.curve])}
    curved = {row: [t for t in evidence.finished(row) if t.curve] for row in curves}  # in the order of the curves
    decays = {row: [t.decay_epochs for t in trials] for row, trials in curved.items()}
    chosen = {
        row: chosen_decays([t.seed for t in trials], decays[row])
        for row, trials in curved.items()
        if any(t.decay_choices for t in trials)
    }
    converged = row_convergence(curves, {row: tolerance(smallest.get(row)) for row in curves}, decays, chosen)
    failed = {  # a row's first failed seed
        row: why
        for row in evidence.rows
        if (why := next((f"seed {t.seed}: {t.collapse}" for t in evidence.finished(row) if t.collapse), ""))
    }
    adjusted = holm({pair: found.p for pair, found in stats.items() if found.p is not None})
    order = sorted(pairs, key=lambda pair: pair[1] != evidence.baseline)  # the baseline's comparisons first
    verdicts: dict[tuple[str, str], Verdict] = {}
    directions: dict[tuple[str, str], str] = {}
    for pair in order:
        effect = _paper_effect(published, group_of, pair, metric)
        better = 1 if evidence.mode == "max" else -1
        direction = (1 if effect > 0 else -1) if effect else better
        directions[pair] = FROM_PAPER if effect else EXPECTED_BETTER
        blockers, notes = [], []
        for row in pair:
            found = _marks(merged_label(group_of(row)), evidence.values(row), failed.get(row), converged.get(row))
            blockers += found[0]
            notes += found[1]
        base = verdicts.get((pair[1], evidence.baseline)) if pair in steps else None
        if base is not None and base.word != REPRODUCED:
            blockers.append(
                f"measured on {merged_label(group_of(pair[1]))}, whose own comparison with "
                f"{merged_label(group_of(evidence.baseline))} is {base.word}"
            )
        verdicts[pair] = judge(stats[pair], direction, adjusted.get(pair), effect, blockers, notes)
    return Findings(
        metric,
        evidence.baseline,
        [verdicts[pair] for pair in pairs],
        {(merged_label(group_of(r)), merged_label(group_of(f))): how for (r, f), how in directions.items()},
        converged,
        groups,
        failed,
        evidence.missing_ranks(),
    )


def _marks(label: str, values: dict, failed: str | None, converged: Convergence | None) -> tuple[list[str], list[str]]:
    """What makes a comparison that reads the row ``label`` inconclusive, and what its verdict says of the row."""
    blockers = (
        [f"{label} has no finished seed"] if not values else [f"{label} failed to train ({failed})"] if failed else []
    )
    if converged is not None and converged.learning:
        blockers.append(f"{label} still learning ({converged.learning})")
    notes = (
        [f"schedule not tuned for {label} ({converged.schedule})"]
        if converged is not None and converged.schedule
        else []
    )
    return blockers, notes
