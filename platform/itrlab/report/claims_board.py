"""The claims board: every paper's claims (:mod:`itrlab.config.claims`) judged by the one analysis
(:mod:`itrlab.report.analysis`) on the evidence the results pages keep (:mod:`itrlab.report.evidence_file`).

For each claim the board takes the newest evidence of its sweep and profile (``docs/results/evidence/``, written
by ``itrlab report``) and computes, in the claim's metric, the paired difference over the seeds both rows
finished, the seeds + test images bootstrap interval, the minimum detectable effect and the paired t-test's p.
The p-values are Holm-adjusted twice: within the claim's family (one paper's table) and across every claim on
the board. The verdict follows mechanically (:func:`itrlab.report.analysis.judge`) from the family's adjusted p,
as a paper's own table would be read; the board-wide adjusted p stands beside it. A claim is **inconclusive**
when either of its rows is still learning, failed to train or has no finished seed, or when a claim it builds on
(``depends_on``) is not reproduced. A claim whose sweep has no evidence yet is listed apart with the command that
measures it.

The paper's own effect is compared in its own metric (a table that prints R@1 only): the board computes that
metric's interval too and says whether the paper's effect lies outside it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from itrlab.config.claims import Claim
from itrlab.report.analysis import REPRODUCED, ComparisonStats, Verdict, compare, holm, judge
from itrlab.report.escape import md_cell, md_text
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


def _stats(measured: Measured, claim: Claim, metric: str) -> ComparisonStats:
    evidence = measured.evidence
    return compare(
        evidence.values(claim.row, metric),
        evidence.values(claim.baseline, metric),
        evidence.ranks(claim.row),
        evidence.ranks(claim.baseline),
        metric,
        claim.row,
        claim.baseline,
    )


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
    board = holm(p)
    families: dict[str, dict[str, float]] = {}
    for claim in claims:
        if claim.id in p:
            families.setdefault(claim.family, {})[claim.id] = p[claim.id]
    within = {claim_id: adjusted for family in families.values() for claim_id, adjusted in holm(family).items()}
    results: dict[str, ClaimResult] = {}
    for claim in _dependency_order(claims):
        found = measured.get(claim_key(claim))
        if found is None:
            results[claim.id] = ClaimResult(claim)
            continue
        evidence = found.evidence
        blockers, notes = [], []
        for row in (claim.row, claim.baseline):
            more, noted = _row_blockers(evidence, row)
            blockers += more
            notes += noted
        for group in evidence.identical:
            if claim.row in group and claim.baseline in group:
                notes.append(f"{claim.row} and {claim.baseline} gave the same numbers to every digit")
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


def claim_key(claim: Claim, presets: Mapping[str, str] | None = None) -> tuple[str, str | None]:
    """(the sweep file's name, the profile) of the evidence a claim reads; ``presets``: preset -> sweep file name
    (:func:`itrlab.config.sweep.sweep_presets`; default: read once)."""
    if presets is None:
        from itrlab.config.sweep import sweep_presets

        presets = _PRESETS.setdefault("presets", sweep_presets())
    return presets[claim.sweep], claim.profile


_PRESETS: dict[str, dict[str, str]] = {}


def _number(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:+.{digits}f}"


def _p(value: float | None) -> str:
    return "—" if value is None else f"{value:.2g}"


def _ours(stats: ComparisonStats) -> str:
    paired = stats.paired
    if paired is None:
        return f"{_number(stats.difference)} ({stats.seeds} seed{'s' if stats.seeds != 1 else ''})"
    half = "" if paired.half_width is None else f" ± {paired.half_width:.1f}"
    return f"{paired.value:+.1f}{half} ({stats.seeds} seeds)"


def _bootstrap(stats: ComparisonStats) -> str:
    found = stats.bootstrap
    return "—" if found is None else f"{found.value:+.1f} [{found.low:+.1f}, {found.high:+.1f}]"


def _paper(result: ClaimResult) -> str:
    effect = result.claim.paper_effect
    outside = {True: ", outside ours", False: ", inside ours", None: ""}[result.paper_outside]
    return f"{effect.metric} {effect.value:+.1f}{outside}"


HEADERS = (
    "claim",
    "paper",
    "ours, paired over seeds",
    "seeds + test images (95%)",
    "MDE (80%)",
    "Holm p: family / board",
    "other metrics, seeds + test images",
    "schedule",
    "verdict",
)


def render(results: Sequence[ClaimResult], families: Mapping[str, str], results_link: str = "results/") -> str:
    """The board as Markdown: one table per family (the claims it judges together), every cell escaped, the
    reasons under each table, and the claims not measured yet with the command that measures them."""
    lines = [
        "# Claims board",
        "",
        "Every claim of the papers this project reproduces, judged by one analysis fixed before the data "
        '(docs/claims-files.md says how a claim is written; docs/sweeps.md, "The verdicts", how it is '
        "judged). Ours is always *in this setting*: the data, features and schedules each results page lists "
        "under its deviations from the paper. Generated by `itrlab claims`; do not edit.",
        "",
        "Verdicts: **reproduced** (the seeds + test images interval excludes 0 in the paper's direction and the "
        "family's Holm-adjusted p < 0.05), **contradicted** (the same, the other way), **no effect detected** "
        "(the interval holds 0: the MDE says what this many seeds could have seen), **inconclusive** (a row "
        "still learning or failed, or a claim built on one that is not reproduced).",
        "",
    ]
    by_family: dict[str, list[ClaimResult]] = {}
    for result in results:
        by_family.setdefault(result.claim.family, []).append(result)
    waiting = [result for result in results if result.verdict is None]
    for family, members in by_family.items():
        measured = [result for result in members if result.verdict is not None]
        if not measured:
            continue
        lines += [f"## {md_text(family)}", "", md_text(families.get(family, "")), ""]
        lines += ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
        for result in measured:
            verdict, stats = result.verdict, result.verdict.stats
            page = result.measured.page
            cells = [
                f"{md_cell(result.claim.id)}: {md_cell(result.claim.row)} vs {md_cell(result.claim.baseline)}, "
                f"{md_cell(result.claim.metric)} ([page]({results_link}{page}))",
                md_cell(_paper(result)),
                md_cell(_ours(stats)),
                md_cell(_bootstrap(stats)),
                md_cell("—" if stats.mde is None else f"{stats.mde:.1f}"),
                md_cell(f"{_p(verdict.holm_p if verdict.holm_p is not None else stats.p)} / {_p(result.board_p)}"),
                md_cell("; ".join(f"{other.metric} {_bootstrap(other)}" for other in result.also) or "—"),
                md_cell(result.schedule),
                f"**{md_cell(verdict.word)}**",
            ]
            lines.append("| " + " | ".join(cells) + " |")
        lines += ["", "Why:", ""]
        for result in measured:
            lines.append(f"- {md_text(result.claim.id)}: {md_text(result.verdict.reason)}")
        lines.append("")
    if waiting:
        lines += ["## Not measured yet", "", "| claim | measured by |", "|---|---|"]
        for result in waiting:
            claim = result.claim
            command = f"python jobs/sweep.py --preset {claim.sweep}" + (
                f" --profile {claim.profile}" if claim.profile else ""
            )
            lines.append(
                f"| {md_cell(claim.id)}: {md_cell(claim.claim)} | `{md_cell(command)}`, then `itrlab report` |"
            )
        lines.append("")
    return "\n".join(lines)


def counts(results: Sequence[ClaimResult]) -> dict[str, int]:
    """How many claims got each verdict word (``not measured`` for those without evidence)."""
    found: dict[str, int] = {}
    for result in results:
        word = result.verdict.word if result.verdict is not None else "not measured"
        found[word] = found.get(word, 0) + 1
    return found


def newest_evidence(folder: Path, read) -> dict[tuple[str, str | None], Measured]:
    """(sweep, profile) -> the newest evidence in ``folder`` (by its page's name: its date, then its number), read
    with ``read`` (:func:`itrlab.report.evidence_file.read_evidence`)."""
    found: dict[tuple[str, str | None], tuple[str, Measured]] = {}
    for path in sorted(folder.glob("*.npz")):
        evidence = read(path)
        key = (evidence.sweep, evidence.profile)
        order = _page_order(path.stem)
        if key not in found or order > found[key][0]:
            found[key] = (order, Measured(evidence, f"{path.stem}.md"))
    return {key: measured for key, (_, measured) in found.items()}


def _page_order(stem: str) -> str:
    """A page's name as it sorts by time: its date, then its number (``-2``, ``-3``; none is the first)."""
    head, _, number = stem.rpartition("-")
    return f"{head}-{int(number):04d}" if head and number.isdigit() else f"{stem}-0001"


__all__ = ["ClaimResult", "Measured", "claim_key", "counts", "judge_claims", "newest_evidence", "render"]
