"""``itrlab report RUN_ID``: a finished sweep's dated results page, from its parent run's ``sweep/summary.json``."""

from __future__ import annotations

import argparse

from itrlab.cli.arguments import TRACKING_URI_HELP
from itrlab.cli.guard import guarded
from itrlab.errors import UserInputError


@guarded
def report_main(args: argparse.Namespace) -> int:
    """Write the dated results page of a finished sweep from its parent run's ``sweep/summary.json`` and its
    trials' runs (their curves and test ranks), judged by :mod:`itrlab.report.findings`, and beside it the
    evidence the verdicts come from (``<out>/evidence/<page>.npz``, :mod:`itrlab.report.evidence`): the summary
    and every trial's ranks checked before anything is written; a bad file, a run that is no sweep's parent or
    a sweep still running is one line and exit status 2."""
    import shutil
    import tempfile

    from itrlab.tracking.probe import holds_run

    if holds_run(args.tracking_uri, args.run_id) is False:  # one line before MLflow is imported
        from itrlab.tracking.store import resolve_tracking_uri

        raise UserInputError(f"no MLflow run {args.run_id} in the store {resolve_tracking_uri(args.tracking_uri)}")
    from itrlab.files import check_writable_dir
    from itrlab.report.diagnostics import diagnostics
    from itrlab.report.evidence import collect_evidence, with_findings
    from itrlab.report.evidence_file import write_evidence
    from itrlab.report.findings import findings
    from itrlab.report.pivot import load_paper
    from itrlab.report.results_page import check_profile, other_profile, page_name, render, unused_page_name
    from itrlab.report.summary_schema import read_summary
    from itrlab.tracking import MlflowTracker, check_tracking_store, resolve_tracking_uri

    if not args.out.strip():  # Path("") is the current folder: never where a page goes by accident
        raise UserInputError("--out: got an empty path; give the folder of the page (default: docs/results)")
    out = check_writable_dir(args.out, "--out")
    tracker = MlflowTracker.for_reading(check_tracking_store(resolve_tracking_uri(args.tracking_uri)))
    run = tracker.run_record(args.run_id)
    check_profile(run)
    with tempfile.TemporaryDirectory() as tmp:
        path = tracker.download_artifact(args.run_id, "sweep/summary.json", tmp)
        if path is None:
            raise UserInputError(_no_summary(args.run_id, run))
        summary = read_summary(path, f"run {args.run_id}: sweep/summary.json")
        runs = tracker.trial_runs(args.run_id)
        logged = registrable(summary, run, runs) if args.register else {}
        evidence = collect_evidence(
            summary,
            run,
            runs,
            trial_ranks(tracker, runs, tmp),
            other_profile(run),
            trial_ranks(tracker, runs, tmp, prehead=True),
        )
        paper = load_paper(summary.get("table_paper")) if evidence.baseline is not None else None
        found = findings(evidence, paper.rows if paper else None) if evidence.baseline is not None else None
        name = unused_page_name(out, page_name(run, summary), args.run_id)
        images = {}
        for artifact in summary.get("plots", []):
            image = tracker.download_artifact(args.run_id, artifact, tmp)
            if image is not None:
                (out / "img").mkdir(parents=True, exist_ok=True)
                target = out / "img" / f"{name}-{image.name}"
                shutil.copyfile(image, target)
                images[artifact] = f"img/{target.name}"
        page = out / f"{name}.md"
        out.mkdir(parents=True, exist_ok=True)
        from itrlab.methods import METHODS  # what each method declares of the parts of its loss

        bounds = {method: cls.part_bounds for method, cls in METHODS.items()}
        shown = diagnostics(summary, runs, bounds)
        page.write_text(render(summary, run, images, shown, found), encoding="utf-8")
        kept = write_evidence(
            with_findings(evidence, found.convergence, found.identical) if found else evidence,
            out / EVIDENCE_FOLDER / f"{name}.npz",
        )
    print(f"results page: {page}")
    print(f"evidence: {kept}")
    if args.register:
        from itrlab.report.row_models import registered_rows

        for done in tracker.register_rows(registered_rows(evidence, found, logged)):
            version = f"{done.uri} (run {done.run_id})"
            print(f"registered: {version}" if done.new else f"already registered: {version}, its description updated")
    return 0


def registrable(summary: dict, run: dict, runs: dict[str, dict]) -> dict[str, str]:
    """Trial id -> run id of the sweep's finished trials that logged their model; UserInputError (one line, before
    anything is downloaded or written) when there is none."""
    from itrlab.report.row_models import check_registrable
    from itrlab.tracking.model_registry import logged_models

    logged = logged_models(runs)
    check_registrable(str(summary["sweep"]), str(run.get("run_id", "")), logged)
    return logged


EVIDENCE_FOLDER = "evidence"  # beside the pages: what later tools (the claims board) read without MLflow


def trial_ranks(tracker, runs: dict[str, dict], folder: str, prehead: bool = False) -> dict:
    """Trial id -> its test ranks (the run's ``test_ranks.npz``, checked: a malformed one is one line and exit 2),
    for the finished trials that logged them; ``prehead``: those read before the projection head
    (``prehead_test_ranks.npz``), asked only of the trials that logged that reading's metrics."""
    from pathlib import Path

    from itrlab.report.evidence import PREHEAD_RANKS_ARTIFACT, RANKS_ARTIFACT, load_test_ranks, test_column

    artifact = PREHEAD_RANKS_ARTIFACT if prehead else RANKS_ARTIFACT
    found = {}
    for trial, trial_run in runs.items():
        if trial_run.get("status") != "FINISHED":
            continue
        if prehead and test_column("rsum", prehead=True) not in (trial_run.get("metrics") or {}):
            continue
        where = Path(folder) / ("prehead_ranks" if prehead else "ranks") / trial
        where.mkdir(parents=True, exist_ok=True)
        path = tracker.download_artifact(trial_run["run_id"], artifact, where)
        if path is not None:
            found[trial] = load_test_ranks(path, f"trial {trial} (run {trial_run['run_id']}): {artifact}")
    return found


def _no_summary(run_id: str, run: dict) -> str:
    """Why a run has no ``sweep/summary.json``: a sweep still running, one that ended before its report, a
    sweep's trial, or a run of no sweep."""
    from itrlab.tracking.run_reader import PARENT_TAG, SWEEP_TAG

    sweep, parent = run["tags"].get(SWEEP_TAG), run["tags"].get(PARENT_TAG)
    if sweep and parent:
        return (
            f"run {run_id} is not a sweep's parent run: it is a trial of sweep '{sweep}'; give its parent run {parent}"
        )
    if sweep and run.get("status") == "RUNNING":
        return (
            f"run {run_id} is the parent run of sweep '{sweep}', still running: its results "
            f"(sweep/summary.json) are written when it ends; report it then"
        )
    if sweep:
        return (
            f"run {run_id}, the parent run of sweep '{sweep}', ended {run.get('status')} before it wrote its "
            f"results (no sweep/summary.json); `itrlab sweep --resume` continues it"
        )
    return (
        f"run {run_id} is not a sweep's parent run: it has no sweep/summary.json "
        f"(give the parent run of a finished sweep, as its last line printed)"
    )


def add_report_parser(sub) -> None:
    """``report`` on the ``itrlab`` parser's subcommands ``sub``."""
    report = sub.add_parser(
        "report",
        help="write a finished sweep's dated results page (docs/results/)",
        description="Write <out>/<date>-<sweep>.md (its plots under <out>/img/, the evidence of its verdicts "
        "under <out>/evidence/) from a sweep parent run's sweep/summary.json and its trials' runs in MLflow.",
    )
    report.add_argument("run_id", help="the sweep's MLflow parent run (printed on its last line)")
    report.add_argument("--out", default="docs/results", help="folder of the page (default: %(default)s)")
    report.add_argument("--tracking-uri", help=TRACKING_URI_HELP)
    report.add_argument(
        "--register",
        action="store_true",
        help="also register each row's models in the store's model registry, <sweep>-<profile>-<row>, one version "
        "per seed's model (docs/models.md#registered-models)",
    )
    report.set_defaults(func=report_main)
