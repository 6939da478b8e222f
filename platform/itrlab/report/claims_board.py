"""The claims board's verdicts: every paper's claims (:mod:`itrlab.config.claims`) and the experiments that
separate our setting from the paper's method (:mod:`itrlab.config.separating`), judged by the one analysis
(:mod:`itrlab.report.analysis`) on the evidence files (:mod:`itrlab.report.evidence_file`);
:mod:`itrlab.report.claims_page` writes the board.

A claim reads the newest evidence of its sweep and profile that ran as declared (:func:`as_declared`). Its p is
Holm-adjusted within its family (one paper's table), which the verdict follows, and across the board, which
stands beside it. It is inconclusive when a row is still learning, failed or has no finished seed, or a claim it
``depends_on`` is not reproduced; a claim without evidence is listed with the command that measures it. The
paper's own effect is compared in its own metric. A separating experiment is judged alike in its own embedding's
metric, its Holm families and board-wide adjustment holding separating experiments only (they never change a
claim's p), and its word picks the reading fixed in its file (:meth:`SeparatingResult.reading`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from itrlab.config.claims import Claim
from itrlab.config.comparison import Comparison
from itrlab.config.separating import OPEN, Separating
from itrlab.report.analysis import INCONCLUSIVE, REPRODUCED, ComparisonStats, Verdict, compare, holm, judge
from itrlab.report.evidence import Evidence


@dataclass(frozen=True)
class Measured:
    """A sweep's evidence as the board reads it: the evidence and the results page it sits beside."""

    evidence: Evidence
    page: str  # the page's file name (``2026-11-29-dbl_table4-flickr8k.md``)


@dataclass(frozen=True)
class ClaimResult:
    """One claim on the board: its verdict (None: not measured yet), the Holm p across the whole board, the paper
    effect's own comparison where its metric is not the claim's, and where the numbers come from."""

    claim: Claim
    verdict: Verdict | None = None
    board_p: float | None = None
    paper_stats: ComparisonStats | None = None
    paper_outside: bool | None = None
    measured: Measured | None = None
    schedule: str = ""
    also: tuple[ComparisonStats, ...] = ()  # the claim's other metrics (``also``), shown beside its verdict


@dataclass(frozen=True)
class SeparatingResult:
    """One separating experiment on the board: its verdict (None: not measured yet), the Holm p across every
    separating experiment on the board, and where the numbers come from."""

    experiment: Separating
    verdict: Verdict | None = None
    board_p: float | None = None
    measured: Measured | None = None
    schedule: str = ""
    also: tuple[ComparisonStats, ...] = ()

    def reading(self) -> tuple[str, str]:
        """(where the served claim's failure belongs: setting, method or open; why), by the experiment's
        reading of its verdict word; open while it is not measured or inconclusive."""
        if self.verdict is None:
            return OPEN, "not measured yet"
        if self.verdict.word == INCONCLUSIVE:
            return OPEN, "inconclusive: it separates nothing yet"
        found = self.experiment.reads[self.verdict.word]
        return found.belongs_to, found.because


def command(entry: Comparison) -> str:
    """The command that measures a claim or separating experiment: its preset (and profile) swept."""
    return f"python jobs/sweep.py --preset {entry.sweep}" + (f" --profile {entry.profile}" if entry.profile else "")


def prehead(entry: Comparison) -> bool:
    """Whether ``entry`` reads the embedding before the projection head (a separating experiment that says so)."""
    return isinstance(entry, Separating) and entry.prehead


def _stats(measured: Measured, entry: Comparison, metric: str) -> ComparisonStats:
    evidence, before = measured.evidence, prehead(entry)
    return compare(
        evidence.values(entry.row, metric, before),
        evidence.values(entry.baseline, metric, before),
        evidence.ranks(entry.row, before),
        evidence.ranks(entry.baseline, before),
        metric,
        entry.row,
        entry.baseline,
    )


def _blockers(evidence: Evidence, entry: Comparison) -> tuple[list[str], list[str]]:
    """What makes a comparison of ``entry``'s two rows inconclusive, and what its verdict notes of them."""
    blockers, notes = [], []
    for row in (entry.row, entry.baseline):
        more, noted = _row_blockers(evidence, row)
        blockers += more
        notes += noted
    for group in evidence.identical:
        if entry.row in group and entry.baseline in group:
            notes.append(f"{entry.row} and {entry.baseline} gave the same numbers to every digit")
    return blockers, notes


def _family_holm(entries: Sequence[Comparison], p: Mapping[str, float]) -> dict[str, float]:
    """Id -> the Holm-adjusted p within its family, of the entries that have a p."""
    families: dict[str, dict[str, float]] = {}
    for entry in entries:
        if entry.id in p:
            families.setdefault(entry.family, {})[entry.id] = p[entry.id]
    return {entry_id: adjusted for family in families.values() for entry_id, adjusted in holm(family).items()}


def _row_blockers(evidence: Evidence, row: str) -> tuple[list[str], list[str]]:
    """What makes a comparison reading ``row`` inconclusive, and what its verdict notes of it."""
    finished = evidence.finished(row)
    if not finished:
        return [f"{row} has no finished seed"], []
    failed = next((f"seed {t.seed}: {t.collapse}" for t in finished if t.collapse), "")
    blockers = [f"{row} failed to train ({failed})"] if failed else []
    converged = evidence.convergence.get(row) or {}
    if converged.get("still_learning"):
        blockers.append(f"{row} still learning ({converged['still_learning']})")
    notes = [f"schedule not tuned for {row} ({converged['schedule']})"] if converged.get("schedule") else []
    return blockers, notes


def _schedule(evidence: Evidence, rows: Sequence[str]) -> str:
    """``A 8 ep. x0.1 after 3, best 5; B 14 ep. x0.1 after 8, best 11``: each row's epochs, decays and best epoch; a
    decay chosen on validation as each seed chose it (``C 30 ep. x0.1 chosen after 3 (seeds 0, 1), after 9 (seed
    2), best 6``)."""
    shown = []
    for row in dict.fromkeys(rows):
        converged = evidence.convergence.get(row) or {}
        trial = next(iter(evidence.finished(row)), None)
        if trial is None:
            continue
        epochs = converged.get("epochs") or max((epoch for epoch, _ in trial.curve), default=0)
        decay = ", ".join(str(epoch) for epoch in trial.decay_epochs)
        chosen = converged.get("decay_chosen")
        decay = f" x0.1 chosen {chosen}" if chosen else f" x0.1 after {decay}" if decay else ""
        best = converged.get("best_epoch")
        shown.append(f"{row} {epochs} ep." + decay + (f", best {best}" if best else ""))
    return "; ".join(shown)


def _dependency_order(claims: Sequence[Claim]) -> list[Claim]:
    """The claims with each after the claims it builds on (the loader refuses circles)."""
    by_id, done, order = {claim.id: claim for claim in claims}, set(), []

    def visit(claim: Claim) -> None:
        if claim.id in done:
            return
        done.add(claim.id)
        for needed in claim.depends_on:
            visit(by_id[needed])
        order.append(claim)

    for claim in claims:
        visit(claim)
    return order


def judge_claims(claims: Sequence[Claim], measured: Mapping[tuple[str, str | None], Measured]) -> list[ClaimResult]:
    """Every claim judged (the module doc), in the order given; ``measured``: (sweep file's name, profile) ->
    the newest evidence of that sweep, keyed as :func:`claim_key` keys a claim."""
    stats = {c.id: _stats(measured[claim_key(c)], c, c.metric) for c in claims if claim_key(c) in measured}
    p = {claim_id: found.p for claim_id, found in stats.items() if found.p is not None}
    board, within = holm(p), _family_holm(claims, p)
    results: dict[str, ClaimResult] = {}
    for claim in _dependency_order(claims):
        found = measured.get(claim_key(claim))
        if found is None:
            results[claim.id] = ClaimResult(claim)
            continue
        evidence = found.evidence
        blockers, notes = _blockers(evidence, claim)
        for needed in claim.depends_on:
            base = results[needed].verdict
            word = base.word if base is not None else "not measured"
            if word != REPRODUCED:
                blockers.append(f"measured on the base of claim {needed}, which is {word}")
        effect = claim.paper_effect
        same_metric = effect.metric == claim.metric
        direction = 1 if claim.direction == "greater" else -1
        verdict = judge(
            stats[claim.id], direction, within.get(claim.id), effect.value if same_metric else None, blockers, notes
        )
        paper_stats, outside = None, verdict.paper_outside
        if not same_metric:
            paper_stats = _stats(found, claim, effect.metric)
            outside = judge(paper_stats, direction, None, effect.value).paper_outside
        results[claim.id] = ClaimResult(
            claim,
            verdict,
            board.get(claim.id),
            paper_stats,
            outside,
            found,
            _schedule(evidence, (claim.row, claim.baseline)),
            tuple(_stats(found, claim, metric) for metric in claim.also),
        )
    return [results[claim.id] for claim in claims]


def judge_separating(
    experiments: Sequence[Separating], measured: Mapping[tuple[str, str | None], Measured]
) -> list[SeparatingResult]:
    """Every separating experiment judged (the module doc), in the order given; ``measured`` as
    :func:`judge_claims` takes it."""
    stats = {e.id: _stats(measured[claim_key(e)], e, e.metric) for e in experiments if claim_key(e) in measured}
    p = {entry_id: found.p for entry_id, found in stats.items() if found.p is not None}
    board, within = holm(p), _family_holm(experiments, p)
    results = []
    for experiment in experiments:
        found = measured.get(claim_key(experiment))
        if found is None:
            results.append(SeparatingResult(experiment))
            continue
        blockers, notes = _blockers(found.evidence, experiment)
        direction = 1 if experiment.direction == "greater" else -1
        verdict = judge(stats[experiment.id], direction, within.get(experiment.id), None, blockers, notes)
        results.append(
            SeparatingResult(
                experiment,
                verdict,
                board.get(experiment.id),
                found,
                _schedule(found.evidence, (experiment.row, experiment.baseline)),
                tuple(_stats(found, experiment, metric) for metric in experiment.also),
            )
        )
    return results


def claim_key(claim: Comparison, presets: Mapping[str, str] | None = None) -> tuple[str, str | None]:
    """(the sweep file's name, the profile) of the evidence a claim (or separating experiment) reads; ``presets``:
    preset -> sweep file name (:func:`itrlab.config.sweep.sweep_presets`; default: read once)."""
    if presets is None:
        from itrlab.config.sweep import sweep_presets

        presets = _PRESETS.setdefault("presets", sweep_presets())
    return presets[claim.sweep], claim.profile


_PRESETS: dict[str, dict[str, str]] = {}


def counts(results: Sequence[ClaimResult | SeparatingResult]) -> dict[str, int]:
    """How many claims (or separating experiments) got each verdict word (``not measured`` for those without
    evidence)."""
    found: dict[str, int] = {}
    for result in results:
        word = result.verdict.word if result.verdict is not None else "not measured"
        found[word] = found.get(word, 0) + 1
    return found


WHERE_THE_DATA_LIE = "dataset.root="  # the one override a sweep's command line adds that keeps its preset as declared


def as_declared(overrides: tuple[str, ...] | None) -> bool:
    """Whether a sweep run with these command-line ``overrides`` ran its preset and profile as declared: none, or
    only where the data lie (a cluster's absolute folder). None (not readable) is not."""
    return overrides is not None and all(item.startswith(WHERE_THE_DATA_LIE) for item in overrides)


def newest_evidence(folder: Path, read) -> dict[tuple[str, str | None], Measured]:
    """(sweep, profile) -> the newest evidence in ``folder`` (by its page's name: its date, then its number), read
    with ``read`` (:func:`itrlab.report.evidence_file.read_evidence`), of a sweep run as declared: a run whose
    command line changed its recipe (``loss.reading=infonce``) measures another experiment than the claim's."""
    found: dict[tuple[str, str | None], tuple[str, Measured]] = {}
    for path in sorted(folder.glob("*.npz")):
        evidence = read(path)
        if not as_declared(evidence.command_overrides):
            continue
        key = (evidence.sweep, evidence.profile)
        order = _page_order(path.stem)
        if key not in found or order > found[key][0]:
            found[key] = (order, Measured(evidence, f"{path.stem}.md"))
    return {key: measured for key, (_, measured) in found.items()}


def _page_order(stem: str) -> str:
    """A page's name as it sorts by time: its date, then its number (``-2``, ``-3``; none is the first)."""
    head, _, number = stem.rpartition("-")
    return f"{head}-{int(number):04d}" if head and number.isdigit() else f"{stem}-0001"


__all__ = [
    "ClaimResult",
    "Measured",
    "SeparatingResult",
    "claim_key",
    "command",
    "counts",
    "judge_claims",
    "judge_separating",
    "newest_evidence",
    "prehead",
]
