"""A dated results page (``docs/results/<date>-<sweep>.md``) from a sweep parent run's checked summary
(:mod:`itrlab.report.summary_schema`) and its verdicts (:mod:`itrlab.report.findings`): pure data in, Markdown
out. Measured results are never hand-edited prose: the page says where every number comes from (the run, the
commit, the data set and protocol) and how it was counted; every text is escaped (:mod:`itrlab.report.escape`).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from itrlab.config.profiles import DEFAULT_PROFILE, DEVIATIONS_TAG, PROFILE_TAG
from itrlab.config.sweep import grid_seeds_text
from itrlab.data.shape import DataShape
from itrlab.errors import UserInputError
from itrlab.report.convergence import TAIL
from itrlab.report.escape import md_code, md_text
from itrlab.report.findings import Findings
from itrlab.report.headline import verdict_headline
from itrlab.report.summary import fmt_cell
from itrlab.report.summary import markdown_table as table_of_rows
from itrlab.report.summary_schema import NAME
from itrlab.report.verdict_table import HEADER as VERDICT_HEADER
from itrlab.report.verdict_table import aligned_table, convergence_table, verdict_notes, verdict_row
from itrlab.tracking.store import COMMIT_TAG, COMMITS_TAG

CONVERGENCE_KEYS = ("seeds", "epochs", "best_epoch", "since", "gain", "tolerance", "rise", "spread")
CONVERGENCE_KEYS += ("still_learning", "decay", "decay_chosen", "schedule")


def page_date(run: dict[str, Any]) -> str:
    """The run's start date (UTC), ``YYYY-MM-DD``: the page's date."""
    started = run.get("start_time") or 0
    return dt.datetime.fromtimestamp(started / 1000, tz=dt.UTC).strftime("%Y-%m-%d")


def other_profile(run: dict[str, Any]) -> str | None:
    """The profile the sweep ran under when it is not the default (``budget``), else None."""
    profile = run.get("tags", {}).get(PROFILE_TAG)
    return profile if profile and profile != DEFAULT_PROFILE else None


def check_profile(run: dict[str, Any]) -> None:
    """The run's profile tag names the page's file too: a plain name, else one line (exit status 2)."""
    profile = run.get("tags", {}).get(PROFILE_TAG)
    if profile is not None and not NAME.fullmatch(profile):
        shown = repr(profile) if len(profile) <= 80 else f"{profile[:60]!r}... ({len(profile):,} characters)"
        raise UserInputError(
            f"run {run.get('run_id')}: tag {PROFILE_TAG}: got {shown}; a profile's name (letters, "
            f"digits, '_', '.', '-', no path)"
        )


def page_name(run: dict[str, Any], summary: dict[str, Any]) -> str:
    """``<date>-<sweep>``, and ``-<profile>`` for a profile other than the default (``budget``): the file
    stem of the page (a sweep's and a profile's names are folder names)."""
    profile = other_profile(run)
    return f"{page_date(run)}-{summary['sweep']}" + (f"-{profile}" if profile else "")


def _parent_run(run_id: str) -> str:
    """How a page names its sweep's parent run (its provenance line), and how a page is recognised as that run's."""
    return f"parent run `{run_id}`"


def unused_page_name(out: Path, name: str, run_id: str) -> str:
    """``name``, else ``name-2``, ``name-3``, ...: the first whose page in ``out`` does not hold another
    sweep's results (the same sweep run twice on one day: on a GPU, then on a CPU). A page of the same
    parent run is written again in place."""
    candidate, count = name, 1
    while (page := out / f"{candidate}.md").is_file() and _parent_run(run_id) not in page.read_text(encoding="utf-8"):
        count += 1
        candidate = f"{name}-{count}"
    return candidate


def markdown_table(columns: dict[str, list]) -> str:
    """A Markdown table of ``columns`` (equal lengths); numbers shown as the console shows them, None blank."""
    names = list(columns)
    rows = len(next(iter(columns.values()), []))
    return table_of_rows(
        names,
        [
            [
                "" if c is None else (fmt_cell(c, name) if isinstance(c, float) else str(c))
                for c, name in ((columns[name][i], name) for name in names)
            ]
            for i in range(rows)
        ],
    )


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    return (
        f"{seconds // 3600} h {seconds % 3600 // 60} min"
        if seconds >= 3600
        else f"{seconds // 60} min {seconds % 60} s"
    )


def wall_time(summary: dict[str, Any], run: dict[str, Any]) -> str | None:
    """The sweep's wall time, one definition: the invocation that wrote the summary, from its start to its
    report (a resumed sweep's earlier invocations, and the gaps between them, not counted). A summary
    written before it was recorded: the parent run's span, said to be so."""
    if isinstance(summary.get("invocation_seconds"), (int, float)):
        return (
            f"wall time of the invocation that wrote these results: {_duration(summary['invocation_seconds'])} "
            f"(its start to its report; a resumed sweep's earlier invocations are not counted)"
        )
    start, end = run.get("start_time"), run.get("end_time")
    if not start or not end:
        return None
    return f"the parent run's span: {_duration((end - start) / 1000)} (every invocation and the gaps between them)"


def convergence_columns(convergence: dict[str, dict[str, Any]]) -> dict[str, list]:
    """The summary's ``convergence`` (row label -> :meth:`~itrlab.report.convergence.Convergence.to_dict`)
    as the page's columns (those its rows hold)."""
    keys = [key for key in CONVERGENCE_KEYS if any(key in row for row in convergence.values())]
    return {"row": list(convergence), **{key: [row.get(key) for row in convergence.values()] for key in keys}}


def _shape(summary: dict[str, Any]) -> str:
    shape = summary.get("data_shape")
    return f" {md_text(f'({DataShape.from_dict(shape).describe()})')}" if shape else ""


def render(
    summary: dict[str, Any],
    run: dict[str, Any],
    plots: dict[str, str] | None = None,
    diagnostics: dict[str, Any] | None = None,
    findings: Findings | None = None,
) -> str:
    """The page: title, provenance, the sweep's report (:mod:`itrlab.report.paper_report`: the headline,
    mean ± 95% interval over seeds, differences to the baseline, the chance row, published numbers
    where the data are the paper's, the cost), the verdicts (``findings``, :mod:`itrlab.report.findings`:
    then the headline is theirs, identical rows are one row and the convergence marks follow the verdicts'
    rule: :mod:`itrlab.report.verdict_table`), which rows converged, what the runs show (``diagnostics``,
    :mod:`itrlab.report.diagnostics`: losses and their parts per row), the trials and the plots (``plots``:
    artifact path -> the image's path relative to the page). The profile's deviations from the paper (the parent
    run's tag) come first: the setting every verdict of the page holds in."""
    tags = run.get("tags", {})
    counts = summary.get("trial_counts", {})
    total = sum(counts.values())
    profile = other_profile(run)
    lines = [
        f"# {md_text(summary['sweep'])}"
        + (f" --profile {md_text(profile)}" if profile else "")
        + f": {page_date(run)}",
        "",
    ]
    if summary.get("description"):
        lines += [md_text(summary["description"].strip()), ""]
    runs_table = (
        f"; its trials, one row each: {md_code('<MLflow UI>' + summary['runs_table'])}"
        if summary.get("runs_table")
        else ""
    )
    provenance = [
        f"- MLflow: {_parent_run(run['run_id'])} ({md_text(run.get('status', '?'))}) in experiment "
        f"{md_code(run.get('experiment', '?'))}{runs_table}",
        f"- experiment {md_code(summary['experiment'])}, objective {md_text(summary['objective'])}, "
        f"seeds {md_text(grid_seeds_text(summary.get('grid') or {}, summary['seeds']))}",
        f"- data: {md_code(summary.get('dataset') or '?')}{_shape(summary)}, test protocol "
        f"{md_code(summary.get('test_protocol') or '?')}",
        f"- trials: {total} ({md_text(', '.join(f'{v} {k}' for k, v in counts.items() if v))})",
    ]
    if tags.get(COMMITS_TAG):  # resumed at other code: every invocation's commit
        commits = ", then ".join(md_code(commit[:12]) for commit in tags[COMMITS_TAG].split())
        provenance.append(
            f"- code: commits {commits} (the sweep was resumed at other code; each trial's MLflow run names the "
            f"commits it ran under)"
        )
    elif tags.get(COMMIT_TAG):
        provenance.append(f"- code: commit {md_code(tags[COMMIT_TAG][:12])}")
    if wall_time(summary, run):
        provenance.append(f"- {md_text(wall_time(summary, run))}")
    lines += provenance + [""]
    deviations = [line for line in tags.get(DEVIATIONS_TAG, "").splitlines() if line.strip() and line != "none"]
    if deviations:  # what every verdict below holds in: this setting, not the paper's
        lines += ["## Setting: how it deviates from the paper", "", *[f"- {md_text(line)}" for line in deviations], ""]
    report = summary.get("report")
    judged = findings is not None and findings.verdicts and report
    if report:
        headline, rows, notes = report["headline"], report["rows"], report["notes"]
        if judged:
            headline = verdict_headline(findings.verdicts, findings.label(findings.baseline or ""), findings.metric)
            rows, _, notes = aligned_table(report, summary.get("convergence") or {}, findings)
        lines += [
            "## Results",
            "",
            f"**{md_text(headline)}**",
            "",
            table_of_rows(report["header"], rows),
            "",
            *[f"{md_text(note)}\n" for note in notes],
        ]
    if judged:
        lines += [
            "## Verdicts",
            "",
            table_of_rows(VERDICT_HEADER, [verdict_row(verdict) for verdict in findings.verdicts]),
            "",
            *[f"{md_text(note)}\n" for note in verdict_notes(findings)],
        ]
    if findings is not None and findings.convergence:
        lines += [
            "## Converged?",
            "",
            markdown_table(convergence_table(findings)),
            "",
            f"Per row: the epochs every seed trained, the median of its seeds' best epochs, the gain of each "
            f"seed's best validation rsum so far over the last 1/{TAIL} of the epochs (from 'since'; their mean) "
            f"and the tolerance it is held to; 'still learning' and 'schedule' say why a row is marked "
            f"(itrlab.report.convergence).",
            "",
        ]
    elif summary.get("convergence"):
        lines += [
            "## Converged?",
            "",
            markdown_table(convergence_columns(summary["convergence"])),
            "",
            "Per row: as the sweep judged it when it ended (itrlab.report.convergence); 'still learning' says "
            "why a row is.",
            "",
        ]
    if diagnostics:
        lines += [
            "## What the runs show",
            "",
            markdown_table(
                {name: [row[j] for row in diagnostics["rows"]] for j, name in enumerate(diagnostics["header"])}
            ),
            "",
            *[f"{md_text(note)}\n" for note in diagnostics["notes"]],
        ]
    lines += [
        "## Trials",
        "",
        *([f"Trials {md_text(summary['ranking'])}.", ""] if summary.get("ranking") else []),
        markdown_table({k: v for k, v in summary["trials"].items() if k != "reason"}),
        "",
    ]
    reasons = [(t, r) for t, r in zip(summary["trials"].get("trial", []), summary["trials"].get("reason", [])) if r]
    if reasons:
        lines += ["Trials that did not finish:", ""] + [f"- {md_code(t)}: {md_text(r)}" for t, r in reasons] + [""]
    for artifact, image in (plots or {}).items():
        lines += [f"![{md_text(artifact)}]({image})", ""]
    command = f"itrlab report {run['run_id']}"
    lines += [f"Written by {md_code(command)} from the run's {md_code('sweep/summary.json')}; not edited by hand."]
    return "\n".join(lines) + "\n"
