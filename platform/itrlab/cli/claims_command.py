"""``itrlab claims``: the claims board (``docs/claims.md``), every paper's claims judged on the evidence the
results pages keep, and the same board as an artifact of an MLflow run."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from itrlab.cli.guard import guarded
from itrlab.errors import UserInputError

DEFAULT_EVIDENCE = "docs/results/evidence"  # where `itrlab report` keeps the evidence beside the pages
BOARD_EXPERIMENT = "itrlab-claims"  # the MLflow experiment whose runs hold each board written


@guarded
def claims_main(args: argparse.Namespace) -> int:
    """Write the board (:mod:`itrlab.report.claims_board`): the claims files and every evidence file are checked
    first, and a claim whose rows' trials lack test ranks is one line and exit status 2, before anything is
    written."""
    from itrlab.config.claims import load_claim_files
    from itrlab.files import atomic_write_text
    from itrlab.report.claims_board import claim_key, counts, judge_claims, newest_evidence, render
    from itrlab.report.evidence_file import read_evidence

    files = load_claim_files(args.claims)
    claims = [claim for found in files for claim in found.claims]
    families = {name: text for found in files for name, text in found.families.items()}
    folder = Path(args.evidence or DEFAULT_EVIDENCE)
    if args.evidence is not None and not folder.is_dir():
        raise UserInputError(f"--evidence: {folder} is not a folder (`itrlab report` writes <out>/evidence/)")
    measured = newest_evidence(folder, read_evidence) if folder.is_dir() else {}  # none yet: nothing measured
    for claim in claims:
        found = measured.get(claim_key(claim))
        if found is None:
            continue
        lacking = [
            t.trial for row in (claim.row, claim.baseline) for t in found.evidence.finished(row) if t.ranks is None
        ]
        if lacking:
            command = f"python jobs/sweep.py --preset {claim.sweep}" + (
                f" --profile {claim.profile}" if claim.profile else ""
            )
            raise UserInputError(
                f"claim {claim.id}: {len(lacking)} trial(s) of {found.page} have no per-query test ranks "
                f"({', '.join(lacking[:3])}{', ...' if len(lacking) > 3 else ''}): trials log them since "
                f"test_ranks.npz exists; run `{command}` again and `itrlab report` its parent run"
            )
    out = Path(args.out)
    if not out.parent.is_dir():
        raise UserInputError(f"--out: the folder {out.parent} does not exist")
    results = judge_claims(claims, measured)
    pages = os.path.relpath(folder.resolve().parent, out.parent.resolve())  # the pages sit beside evidence/
    board = render(results, families, f"{Path(pages).as_posix()}/")
    atomic_write_text(out, board)
    print(f"claims board: {out}")
    print("verdicts: " + ", ".join(f"{count} {word}" for word, count in counts(results).items()))
    if not args.no_log:
        print(f"MLflow: {log_board(board, out.name, counts(results), args.tracking_uri)}")
    return 0


def log_board(board: str, name: str, found: dict[str, int], tracking_uri: str | None) -> str:
    """The board as the artifact ``name`` of a new run of :data:`BOARD_EXPERIMENT`, its verdict counts as
    metrics; how to open it."""
    from itrlab.tracking import MlflowTracker

    tracker = MlflowTracker(BOARD_EXPERIMENT, tracking_uri)
    tracker.start("claims board", {"itrlab.kind": "claims board"}, {})
    with tracker.ending():
        tracker.log_text(board, name)
        tracker.log_final_metrics({f"claims_{word.replace(' ', '_')}": count for word, count in found.items()})
    return tracker.ui_hint()


def add_claims_parser(sub) -> None:
    """``claims`` on the ``itrlab`` parser's subcommands ``sub``."""
    claims = sub.add_parser(
        "claims",
        help="write the claims board (docs/claims.md): every paper's claims judged on the results' evidence",
        description="Judge every claim of configs/claims/ on the newest evidence of its sweep (written by "
        "`itrlab report` under docs/results/evidence/) and write the board; log it to MLflow.",
    )
    claims.add_argument("--claims", help="folder of the claims files (default: configs/claims)")
    claims.add_argument("--evidence", help=f"the results pages' evidence folder (default: {DEFAULT_EVIDENCE})")
    claims.add_argument("--out", default="docs/claims.md", help="the board (default: %(default)s)")
    claims.add_argument("--no-log", action="store_true", help="write the board only, not to MLflow")
    claims.add_argument("--tracking-uri", help="MLflow store (default: $MLFLOW_TRACKING_URI, else ./mlflow.db)")
    claims.set_defaults(func=claims_main)
