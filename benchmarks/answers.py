"""How fast the commands answer what needs no work: bad input, ``--list``, ``--dry-run``, on this checkout and as
on a fresh clone, against the bare interpreter's start measured in the same run.

    python benchmarks/answers.py                 # every answer, 3 repeats, warm and fresh
    python benchmarks/answers.py --repeats 5 --state fresh --json runs/bench/answers.json

Each answer is a fresh process, timed from its start to its exit (wall and CPU seconds), ``repeats`` times; the
median counts. Two states of the checkout: *warm* (Python's bytecode cache and itrlab's estimate caches as they
are here) and *fresh* (as on a new clone: each repeat runs in a copy of the checkout's ``platform/``, ``jobs/`` and
``configs/`` without their bytecode, with no kept estimate or step count; the installed packages keep theirs, as a
venv built by ``make setup`` does). The baseline is the bare interpreter's start (``python -c pass``) timed the
same way, so that each answer reads as a ratio to what no command can go below on this machine; the target is 3 s
on 2 quiet cores, and the load average is printed beside the times (on a busy machine they are upper bounds). A
wrong exit status (an answer that should be exit 2 and is not) is reported and fails the bench (exit status 1).
"""

from __future__ import annotations

import _bootstrap  # noqa: F401 - first: a python without itrlab says how to start the script

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from common import REPO, at_least_one

TARGET_SECONDS = 3.0
MISSING_RUN = "0123456789abcdef0123456789abcdef"


@dataclass(frozen=True)
class Answer:
    """One command to time: ``argv`` after the interpreter, the exit status it must give."""

    label: str
    argv: list[str]
    status: int


def answers(repo: Path, store: str) -> list[Answer]:
    """The answers the bench times: every kind of input a user gets wrong, and the two listings."""
    sweep, train = str(repo / "jobs" / "sweep.py"), str(repo / "jobs" / "train.py")
    itrlab = ["-c", "import sys; from itrlab.cli import main; sys.exit(main())"]
    return [
        Answer("misspelt preset", [sweep, "--preset", "smok"], 2),
        Answer("sweep: unknown key", [sweep, "--preset", "smoke", "train.epohcs=3"], 2),
        Answer("sweep: bad loss setting", [sweep, "--preset", "table4", "--dry-run", "loss.margin=-1"], 2),
        Answer("sweep --list", [sweep, "--list"], 0),
        Answer("sweep --dry-run", [sweep, "--preset", "smoke", "--dry-run"], 0),  # `make sweep`'s preset
        Answer("train: unknown experiment", [train, "-c", "vsepp_flickrk"], 2),
        Answer("train: unknown key", [train, "-c", "vsepp_synthetic_tiny", "train.epoch=3"], 2),
        Answer("train: missing data folder", [train, "-c", "vsepp_flickr8k", "dataset.root=data/not-here"], 2),
        Answer(
            "evaluate: run not in store",
            [*itrlab, "evaluate", f"runs:/{MISSING_RUN}/model", "--tracking-uri", store],
            2,
        ),
        Answer(
            "gallery: run not in store",
            [*itrlab, "gallery", MISSING_RUN, "--out", "g.html", "--tracking-uri", store],
            2,
        ),
        Answer("report: run not in store", [*itrlab, "report", MISSING_RUN, "--tracking-uri", store], 2),
    ]


@dataclass
class AnswerTimes:
    """An answer's repeats: wall and CPU seconds each, and the exit statuses seen."""

    label: str
    state: str
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)
    expected: int = 0

    @property
    def median_wall(self) -> float:
        return statistics.median(self.wall)

    @property
    def median_cpu(self) -> float:
        return statistics.median(self.cpu)

    @property
    def right(self) -> bool:
        return all(status == self.expected for status in self.statuses)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_once(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float, int]:
    """(wall s, CPU s, exit status) of ``python argv`` in a new process."""
    cpu, started = _children_cpu(), time.perf_counter()
    done = subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True, timeout=600)
    return time.perf_counter() - started, _children_cpu() - cpu, done.returncode


CHECKOUT = ("platform", "jobs", "configs")  # what an answer reads of the checkout


def fresh_checkout(repo: Path, scratch: Path) -> tuple[Path, dict[str, str]]:
    """A copy of ``repo``'s :data:`CHECKOUT` folders under ``scratch`` without bytecode, and the environment that
    keeps no estimate or step count: the checkout as a new clone has it."""
    for name in CHECKOUT:
        shutil.copytree(repo / name, scratch / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return scratch, {
        "ITRLAB_ESTIMATES": str(scratch / "bench" / "estimates.json"),
        "ITRLAB_STEP_COUNTS": str(scratch / "bench" / "step_counts.json"),
        "ITRLAB_THROUGHPUT": str(scratch / "bench" / "throughput.jsonl"),
    }


def measure(items, repo: Path, repeats: int, states: tuple[str, ...]) -> list[AnswerTimes]:
    """Each answer of ``items(root)`` (and the baseline, first) ``repeats`` times in each state; the warm state
    runs each answer once untimed first, so that its caches hold what a second use of the checkout finds."""
    baseline = Answer("baseline: python -c pass", ["-c", "pass"], 0)
    timings = []
    for state in states:
        for index in range(len(items(repo)) + 1):
            timing = None
            for repeat in range(repeats + (state == "warm")):
                with tempfile.TemporaryDirectory(prefix="itrlab_bench_answers_") as scratch:
                    root, extra = fresh_checkout(repo, Path(scratch)) if state == "fresh" else (repo, {})
                    item = ([baseline, *items(root)])[index]
                    env = {
                        **os.environ,
                        "PYTHONPATH": str(root / "platform"),
                        "ITRLAB_CONFIG_DIR": str(root / "configs"),
                        **extra,
                    }
                    timing = timing or AnswerTimes(item.label, state, expected=item.status)
                    wall, cpu, status = time_once(item.argv, env, root)
                if state == "warm" and repeat == 0:
                    continue  # untimed: fills the caches
                timing.wall.append(wall)
                timing.cpu.append(cpu)
                timing.statuses.append(status)
            timings.append(timing)
    return timings


def table(timings: list[AnswerTimes], target_s: float, loads: tuple[tuple[float, ...], tuple[float, ...]]) -> str:
    """The report: per answer and state, median wall and CPU seconds, the ratio to the baseline's wall, and
    whether it is under ``target_s``; the load averages before and after."""
    base = {t.state: t.median_wall for t in timings if t.label.startswith("baseline")}
    rows = [("answer", "state", "wall s (median)", "CPU s", "x baseline", f"< {target_s:g} s", "exit")]
    for t in timings:
        rows.append(
            (
                t.label,
                t.state,
                f"{t.median_wall:.2f}",
                f"{t.median_cpu:.2f}",
                f"{t.median_wall / base[t.state]:.1f}",
                "yes" if t.median_wall < target_s else "NO",
                "ok" if t.right else f"WRONG {sorted(set(t.statuses))} (wants {t.expected})",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    before, after = (", ".join(f"{x:.2f}" for x in load) for load in loads)
    return "\n".join([*lines, f"load average (1, 5, 15 min) before: {before}; after: {after}"])


def to_dict(timings: list[AnswerTimes]) -> list[dict]:
    return [asdict(t) | {"median_wall": t.median_wall, "median_cpu": t.median_cpu} for t in timings]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=at_least_one, default=3, help="timed runs per answer and state (default 3)")
    parser.add_argument("--state", choices=("both", "warm", "fresh"), default="both")
    parser.add_argument("--json", type=Path, help="also write the timings here")
    args = parser.parse_args()
    import mlflow

    with tempfile.TemporaryDirectory(prefix="itrlab_bench_answers_") as scratch:
        store = f"sqlite:///{Path(scratch) / 'mlflow.db'}"  # a real store holding one run, not the one asked for
        client = mlflow.MlflowClient(store)
        client.create_run(client.create_experiment("bench"))
        states = ("warm", "fresh") if args.state == "both" else (args.state,)
        before = os.getloadavg()
        timings = measure(lambda root: answers(root, store), REPO, args.repeats, states)
        after = os.getloadavg()
    print(table(timings, TARGET_SECONDS, (before, after)))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(to_dict(timings), indent=1))
    return 0 if all(t.right for t in timings) else 1


if __name__ == "__main__":
    sys.exit(main())
