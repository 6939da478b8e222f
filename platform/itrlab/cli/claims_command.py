"""``itrlab claims``: the claims board (``docs/claims.md``), every paper's claims judged on the evidence the
results pages keep, and the same board as an artifact of an MLflow run."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from itrlab.cli.arguments import TRACKING_URI_HELP
from itrlab.cli.guard import guarded
from itrlab.errors import UserInputError

DEFAULT_EVIDENCE = "docs/results/evidence"  # where `itrlab report` keeps the evidence beside the pages
BOARD_EXPERIMENT = "itrlab-claims"  # the MLflow experiment whose runs hold each board written


@guarded
def claims_main(args: argparse.Namespace) -> int:
    """Write the board (:mod:`itrlab.report.claims_board`, :mod:`itrlab.report.claims_page`): the claims files
    and every evidence file are checked first, and a claim or separating experiment whose rows' trials lack test
    ranks (of the embedding it reads) is one line and exit status 2, before anything is written."""
    from itrlab.config.claims import load_claim_files
    from itrlab.files import atomic_write_text
    from itrlab.report.claims_board import (
        claim_key,
        command,
        counts,
        judge_claims,
        judge_separating,
        newest_evidence,
        prehead,
    )
    from itrlab.report.claims_page import render
    from itrlab.report.evidence import PREHEAD_RANKS_ARTIFACT, RANKS_ARTIFACT
    from itrlab.report.evidence_file import read_evidence

    files = load_claim_files(args.claims)
    claims = [claim for found in files for claim in found.claims]
    separating = [experiment for found in files for experiment in found.separating]
    families = {name: text for found in files for name, text in found.families.items()}
    folder = Path(args.evidence or DEFAULT_EVIDENCE)
    if args.evidence is not None and not folder.is_dir():
        raise UserInputError(f"--evidence: {folder} is not a folder (`itrlab report` writes <out>/evidence/)")
    measured = newest_evidence(folder, read_evidence) if folder.is_dir() else {}  # none yet: nothing measured
    for entry in [*claims, *separating]:
        found = measured.get(claim_key(entry))
        if found is None:
            continue
        before = prehead(entry)
        lacking = [
            t.trial
            for row in (entry.row, entry.baseline)
            for t in found.evidence.finished(row)
            if t.ranks_of(before) is None
        ]
        if lacking:
            which = "test ranks read before the projection head" if before else "test ranks"
            artifact = PREHEAD_RANKS_ARTIFACT if before else RANKS_ARTIFACT
            raise UserInputError(
                f"{entry.what()} {entry.id}: {len(lacking)} trial(s) of {found.page} have no per-query {which} "
                f"({', '.join(lacking[:3])}{', ...' if len(lacking) > 3 else ''}): trials log them since "
                f"{artifact} exists; run `{command(entry)}` again and `itrlab report` its parent run"
            )
    out = Path(args.out)
    if not out.parent.is_dir():
        raise UserInputError(f"--out: the folder {out.parent} does not exist")
    results = judge_claims(claims, measured)
    separated = judge_separating(separating, measured)
    pages = os.path.relpath(folder.resolve().parent, out.parent.resolve())  # the pages sit beside evidence/
    board = render(results, families, f"{Path(pages).as_posix()}/", separated)
    atomic_write_text(out, board)
    print(f"claims board: {out}")
    print("verdicts: " + ", ".join(f"{count} {word}" for word, count in counts(results).items()))
    if separated:
        print("separating experiments: " + ", ".join(f"{n} {word}" for word, n in counts(separated).items()))
    if not args.no_log:
        found = {f"claims_{word}": n for word, n in counts(results).items()}
        found |= {f"separating_{word}": n for word, n in counts(separated).items()}
        print(f"MLflow: {log_board(board, out.name, found, args.tracking_uri)}")
    return 0


def log_board(board: str, name: str, found: dict[str, int], tracking_uri: str | None) -> str:
    """The board as the artifact ``name`` of a new run of :data:`BOARD_EXPERIMENT`, its verdict counts
    (``claims_<word>``, ``separating_<word>`` -> count) as metrics; how to open it."""
    from itrlab.tracking import MlflowTracker

    tracker = MlflowTracker(BOARD_EXPERIMENT, tracking_uri)
    tracker.start("claims board", {"itrlab.kind": "claims board"}, {})
    with tracker.ending():
        tracker.log_text(board, name)
        tracker.log_final_metrics({name.replace(" ", "_"): count for name, count in found.items()})
    return tracker.ui_hint()


def add_claims_parser(sub) -> None:
    """``claims`` on the ``itrlab`` parser's subcommands ``sub``."""
    claims = sub.add_parser(
        "claims",
        help="write the claims board (docs/claims.md): every paper's claims judged on the results' evidence",
        description="Judge every claim of configs/claims/, and every experiment that separates our setting from "
        "a paper's method, on the newest evidence of its sweep (written by `itrlab report` under "
        "docs/results/evidence/) and write the board; log it to MLflow.",
    )
    claims.add_argument("--claims", help="folder of the claims files (default: configs/claims)")
    claims.add_argument("--evidence", help=f"the results pages' evidence folder (default: {DEFAULT_EVIDENCE})")
    claims.add_argument("--out", default="docs/claims.md", help="the board (default: %(default)s)")
    claims.add_argument("--no-log", action="store_true", help="write the board only, not to MLflow")
    claims.add_argument("--tracking-uri", help=TRACKING_URI_HELP)
    claims.set_defaults(func=claims_main)
