"""The training benchmark against another revision of the library, in the same run (``train.py --against``).

A speed-up is a ratio against the code it replaces, measured beside it: :func:`library_at` writes the
``platform/`` folder of a git revision into a temporary folder (``git archive``, nothing checked out);
:func:`bench_at` runs this checkout's ``benchmarks/train.py`` in a subprocess (its own torch, its own threads)
with that folder first on ``PYTHONPATH``, so that both sides are timed by the same benchmark code, and reads
back its report. :func:`part_ratios` then puts the two reports' parts side by side: the train step
(the floor), the epoch, the epoch start (CODER's reclustering) and the test evaluation.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path

from common import BENCHMARKS, REPO
from itrlab.errors import UserInputError

SCRIPT = BENCHMARKS / "train.py"  # this checkout's benchmark, whichever library it times


def resolve_revision(repo: Path, revision: str) -> str:
    """The full commit id of ``revision`` in ``repo``; a :class:`UserInputError` (one line) when git does not
    know it or ``repo`` is not a git checkout. Asked before anything is timed."""
    try:
        done = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"],
            capture_output=True,
            text=True,
            check=False,
        )
    except FileNotFoundError:
        raise UserInputError("--against needs git, which is not installed") from None
    if done.returncode != 0 or not done.stdout.strip():
        raise UserInputError(
            f"--against {revision!r}: not a commit of the git checkout at {repo} "
            "(a branch, a tag, a commit id or HEAD~N)"
        )
    return done.stdout.strip()


@contextlib.contextmanager
def library_at(repo: Path, commit: str) -> Iterator[Path]:
    """A temporary ``platform/`` folder: the package as of ``commit``."""
    archive = subprocess.run(
        ["git", "-C", str(repo), "archive", "--format=tar", commit, "platform"], capture_output=True, check=True
    ).stdout
    with tempfile.TemporaryDirectory(prefix="bench_against_") as tmp:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(tmp, filter="data")
        yield Path(tmp) / "platform"


def library_env(platform: Path) -> dict[str, str]:
    """This process's environment with ``platform`` first on ``PYTHONPATH``: ``import itrlab`` finds the revision's."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(platform), os.environ.get("PYTHONPATH")]))}


def bench_at(repo: Path, commit: str, argv: list[str]) -> dict:
    """:data:`SCRIPT` ``ARGV`` on the library of ``commit`` in a subprocess: its report (``BenchReport``'s
    dict). Raises :class:`RuntimeError` with the child's last lines when it fails."""
    with library_at(repo, commit) as platform, tempfile.TemporaryDirectory(prefix="bench_report_") as out:
        report = Path(out) / "report.json"
        env = library_env(platform)
        done = subprocess.run(
            [sys.executable, str(SCRIPT), *argv, "--json", str(report)],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0 or not report.is_file():
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-8:])
            raise RuntimeError(f"the benchmark on {commit[:12]}'s library failed (exit {done.returncode}):\n{tail}")
        return json.loads(report.read_text())


def part_ratios(this: dict, other: dict, label: str) -> str:
    """The table of each timed part here and at ``label`` (two reports' summaries) and their ratio: how many
    times ``label``'s time this run's is (above 1: this code is faster)."""
    parts = [
        ("train step (floor, s)", "floor_step_seconds"),
        ("epoch (s)", "epoch_seconds"),
        ("epoch start: set_epoch (s)", "epoch_start_seconds"),
        ("test evaluation (s)", "evaluation_seconds"),
    ]
    width = max(len(label), 9)
    lines = [f"{'part':<28}  {'this code':>10}  {label:>{width}}  {'ratio':>6}"]
    for name, key in parts:
        mine, theirs = this.get(key), other.get(key)
        if mine is None or theirs is None:
            continue
        ratio = f"{theirs / mine:.2f}x" if mine > 0.005 else "-"
        lines.append(f"{name:<28}  {mine:>10.3f}  {theirs:>{width}.3f}  {ratio:>6}")
    return "\n".join(lines)


def report_against(args, argv: list[str] | None, result, commit: str) -> int:
    """``train.py --against``: this run's report (``result``), the same benchmark on ``commit``'s library (a
    subprocess, :func:`bench_at`) and the ratio of each part."""
    print(result.format())
    child_argv = without_options(list(sys.argv[1:] if argv is None else argv), {"--against": 1, "--json": 1})
    print(f"bench_train: the same benchmark on the library of {args.against} ({commit[:12]}) ...")
    try:
        other = bench_at(REPO, commit, [*child_argv, "--no-record"])
    except RuntimeError as err:
        print(f"bench_train: {err}", file=sys.stderr)
        return 1
    label = args.against if len(args.against) <= 16 else commit[:12]
    print(part_ratios(result.summary(), other["summary"], label))
    print(
        f"ratio: {label}'s time over this code's (above 1: this code is faster); 1-min load average "
        f"{result.load_before:.2f} before this code's epochs, {other['load_before']:.2f} before {label}'s"
    )
    if args.json:
        args.json.write_text(json.dumps({"run": result.to_dict(), "against": {"commit": commit, **other}}, indent=2))
    return 0


def without_options(argv: list[str], options: dict[str, int]) -> list[str]:
    """``argv`` without the given options and their values (``--name VALUE`` or ``--name=VALUE``)."""
    kept, skip = [], 0
    for word in argv:
        if skip:
            skip -= 1
            continue
        name = word.split("=", 1)[0]
        if name in options:
            skip = 0 if "=" in word else options[name]
            continue
        kept.append(word)
    return kept
