"""A dated results page (``docs/results/<date>-<sweep>.md``) from a sweep parent run's summary.

``itrlab report RUN_ID`` reads the parent run's ``sweep/summary.json`` (written by the sweep runner at
the end of every invocation) and its record in MLflow, and renders them here: pure data in, Markdown
out. Measured results are never hand-edited prose: the page says where every number comes from (the
run, the commit, the data set and protocol) and how it was counted.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from itrlab.config.profiles import DEFAULT_PROFILE
from itrlab.data.shape import DataShape
from itrlab.report.summary import fmt_cell

def page_date(run: dict[str, Any]) -> str:
    """The run's start date (UTC), ``YYYY-MM-DD``: the page's date."""
    started = run.get("start_time") or 0
    return dt.datetime.fromtimestamp(started / 1000, tz=dt.timezone.utc).strftime("%Y-%m-%d")


def _other_profile(run: dict[str, Any]) -> str | None:
    """The profile the sweep ran under when it is not the default (``budget``), else None."""
    profile = run.get("tags", {}).get("itrlab.profile")
    return profile if profile and profile != DEFAULT_PROFILE else None


def page_name(run: dict[str, Any], summary: dict[str, Any]) -> str:
    """``<date>-<sweep>``, and ``-<profile>`` for a profile other than the default (``budget``): the file
    stem of the page (a sweep's and a profile's names are folder names)."""
    profile = _other_profile(run)
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
    """A Markdown table of ``columns`` (equal lengths); numbers shown as the console shows them."""
    names = list(columns)
    rows = len(next(iter(columns.values()), []))
    lines = ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
    for i in range(rows):
        cells = [columns[name][i] for name in names]
        lines.append("| " + " | ".join("" if c is None else (fmt_cell(c, name) if isinstance(c, float) else str(c))
                                       for c, name in zip(cells, names)) + " |")
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    seconds = round(seconds)
    return f"{seconds // 3600} h {seconds % 3600 // 60} min" if seconds >= 3600 else f"{seconds // 60} min {seconds % 60} s"


def wall_time(summary: dict[str, Any], run: dict[str, Any]) -> str | None:
    """The sweep's wall time, one definition: the invocation that wrote the summary, from its start to its
    report (a resumed sweep's earlier invocations, and the gaps between them, not counted). A summary
    written before it was recorded: the parent run's span, said to be so."""
    if isinstance(summary.get("invocation_seconds"), (int, float)):
        return (f"wall time of the invocation that wrote these results: {_duration(summary['invocation_seconds'])} "
                f"(its start to its report; a resumed sweep's earlier invocations are not counted)")
    start, end = run.get("start_time"), run.get("end_time")
    if not start or not end:
        return None
    return f"the parent run's span: {_duration((end - start) / 1000)} (every invocation and the gaps between them)"


def _shape(summary: dict[str, Any]) -> str:
    shape = summary.get("data_shape")
    return f" ({DataShape.from_dict(shape).describe()})" if shape else ""


def render(summary: dict[str, Any], run: dict[str, Any], plots: dict[str, str] | None = None,
           diagnostics: dict[str, Any] | None = None) -> str:
    """The page: title, provenance, the sweep's report (:mod:`itrlab.report.paper_report`: the headline,
    mean ± 95% interval over seeds, differences to the baseline, the chance row, published numbers
    where the data are the paper's, the cost), what the runs show (``diagnostics``,
    :mod:`itrlab.report.diagnostics`: losses and their parts per row), the trials and the plots (``plots``:
    artifact path -> the image's path relative to the page)."""
    tags = run.get("tags", {})
    counts = summary.get("trial_counts", {})
    total = sum(counts.values())
    profile = _other_profile(run)
    lines = [f"# {summary['sweep']}" + (f" --profile {profile}" if profile else "") + f": {page_date(run)}", ""]
    if summary.get("description"):
        lines += [summary["description"].strip(), ""]
    provenance = [
        f"- MLflow: {_parent_run(run['run_id'])} ({run.get('status', '?')}) in experiment `{run.get('experiment', '?')}`"
        + (f"; its trials, one row each: `<MLflow UI>{summary['runs_table']}`" if summary.get("runs_table") else ""),
        f"- experiment `{summary['experiment']}`, objective {summary['objective']}, seeds {summary['seeds']}",
        f"- data: `{summary.get('dataset') or '?'}`{_shape(summary)}, test protocol `{summary.get('test_protocol') or '?'}`",
        f"- trials: {total} ({', '.join(f'{v} {k}' for k, v in counts.items() if v)})",
    ]
    if tags.get("mlflow.source.git.commit"):
        provenance.append(f"- code: commit `{tags['mlflow.source.git.commit'][:12]}`")
    if wall_time(summary, run):
        provenance.append(f"- {wall_time(summary, run)}")
    lines += provenance + [""]
    report = summary.get("report")
    if report:
        lines += ["## Results", "", f"**{report['headline']}**", "",
                  markdown_table({name: [row[j] for row in report["rows"]] for j, name in enumerate(report["header"])}),
                  "", *[f"{note}\n" for note in report["notes"]]]
    if diagnostics:
        lines += ["## What the runs show", "",
                  markdown_table({name: [row[j] for row in diagnostics["rows"]] for j, name in enumerate(diagnostics["header"])}),
                  "", *[f"{note}\n" for note in diagnostics["notes"]]]
    lines += ["## Trials", "", *([f"Trials {summary['ranking']}.", ""] if summary.get("ranking") else []), markdown_table({k: v for k, v in summary["trials"].items() if k != "reason"}), ""]
    reasons = [(t, r) for t, r in zip(summary["trials"].get("trial", []), summary["trials"].get("reason", [])) if r]
    if reasons:
        lines += ["Trials that did not finish:", ""] + [f"- `{t}`: {r}" for t, r in reasons] + [""]
    for artifact, image in (plots or {}).items():
        lines += [f"![{artifact}]({image})", ""]
    lines += [f"Written by `itrlab report {run['run_id']}` from the run's `sweep/summary.json`; not edited by hand."]
    return "\n".join(lines) + "\n"
