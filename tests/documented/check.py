"""Each documented training run here as a user runs it, or the reason it is not
(``jobs/check_documented_trainings.py``).

A command runs as a process from the checkout's root, its ``python`` the job's own (the venv's), with the check's
budget as its time limit (a sweep's: :meth:`Budget.sweep_limit`); its result is read from what it left: a training's
``test_recall.json`` in the run directory it printed, and the verdicts its last lines printed (``itrlab: at chance:
...``, ``itrlab: on its plateau: ...``: :mod:`itrlab.report.verdict`); a sweep's trials' ``test_recall.json`` under
the sweep directory it printed, the lowest of them its rsum, at chance when any trial's rsum lies in chance's range.
Beside them, a random model's 95% range of rsum on the run's test protocol
(:func:`itrlab.report.chance.chance_level`).

Not run, with the reason on the page (:func:`reason_not_run`): a command handed to another program (``ray job
submit``: a cluster), ``--resume`` (it continues a run), a ``--sweep`` file, data folder, data set config or text
model this machine lacks, GPUs where torch sees none, and a sweep whose dry run (``--dry-run``, the figure ``--list``
prints) puts its training over the sweep budget (with the sweep's newest results page, where one exists). A make
target, and a training of the same config as an earlier one but for where it writes (``--run-dir``, ``output.*``), or
an earlier sweep but for its CPUs or storage (``RESOURCE_FLAGS``), give that command's result (``as: ...``). Anything
else runs; one that fails or outlasts the budget is recorded as failed, which the fast tier refuses.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from documented.catalogue import SWEEP, Command, program_start, split
from documented.page import ALIAS, AT_CHANCE, FAILED, NOT_RUN, OFF_CHANCE, ON_PLATEAU, Entry, duration, parse_duration
from itrlab.config.loader import is_config_path
from itrlab.errors import ItrlabError
from itrlab.interrupts import stop_process_group

log = logging.getLogger(__name__)

VERDICT_LINES = {AT_CHANCE: "itrlab: at chance:", ON_PLATEAU: "itrlab: on its plateau:"}
_COST = re.compile(r"^\s*G = (\d+) \(.*?\): about ([\d.]+ (?:s|min|h)) of wall time")
_SWEEP_LINE = re.compile(r"^sweep (\S+)(?:, profile (\S+))?: (\d+) trial")
STOP_WAIT_S = 120  # after SIGTERM at the budget, before SIGKILL
SWEEP_SLACK = 3.0  # a sweep's limit over its dry run's training estimate


@dataclass(frozen=True)
class Budget:
    """A training's time limit; a sweep runs only when its dry run's training estimate is at most ``sweep_s``
    (the estimate leaves out evaluation and start-up, and assumes quiet cores)."""

    training_s: float = 15 * 60
    sweep_s: float = 15 * 60

    def sweep_limit(self, estimate_s: float | None) -> float:
        """A sweep's time limit: the training's, or its estimate x SWEEP_SLACK where that is longer (its
        evaluation, start-up and the machine's load come on top of the estimate)."""
        return max(self.training_s, SWEEP_SLACK * (estimate_s or 0.0))


@dataclass(frozen=True)
class Result:
    """What one command left: its test rsum (a sweep's lowest), a random model's range, its verdicts."""

    test_rsum: float
    chance: tuple[float, float] | None
    verdicts: tuple[str, ...]

    @property
    def verdict(self) -> str:
        return "; ".join(self.verdicts) or OFF_CHANCE


def program_argv(words: list[str], python: str) -> list[str]:
    """A documented command's words with its ``python`` (or ``itrlab``) replaced by ``python``'s environment's."""
    start = program_start(words)
    program, rest = words[start], words[start + 1 :]
    if Path(program).name.startswith("python"):
        return [python, *rest]
    if Path(program).name == "itrlab":
        return [str(Path(python).parent / "itrlab"), *rest]
    return words[start:]


def flag_value(words: list[str], flag: str) -> str | None:
    for i, word in enumerate(words):
        if word == flag and i + 1 < len(words):
            return words[i + 1]
        if word.startswith(flag + "="):
            return word.split("=", 1)[1]
    return None


@functools.cache
def training_config(words: tuple[str, ...]):
    """The resolved config of a training command's words (``python jobs/train.py ...``), or None where it fails
    (which its run then shows); read once per command, for both the data check and the alias."""
    from itrlab.assembly import load_experiment
    from itrlab.cli import parse_args

    try:
        args = parse_args(["train", *words[2:]])
        return load_experiment(args.config, args.overrides)
    except (ItrlabError, SystemExit):
        return None


def training_data_reason(words: list[str], repo: Path) -> str | None:
    """Why a training cannot run here: its data folder, the data set config it names by its path
    (``defaults.dataset=data/holiday/holiday.yaml``) or its text model is not on this machine (None: it can, or
    its config fails, which the run then shows)."""
    config = training_config(tuple(words))
    if config is None:
        named = flag_value(words, "defaults.dataset")
        if is_config_path(named) and not (Path(named) if Path(named).is_absolute() else repo / named).exists():
            return (
                f"needs the data set config {named}, which the extraction of the reader's own photos writes "
                f"(docs/data.md#your-own-photos) and this machine lacks"
            )
        return None
    root = config.dataset.root if Path(config.dataset.root).is_absolute() else repo / config.dataset.root
    if config.dataset.kind != "synthetic" and not Path(root).exists():
        return f"needs its data in {config.dataset.root}, which this machine lacks (docs/data.md)"
    text_model = config.model.text.bert_path
    if text_model is not None and not Path(text_model).exists():
        return f"needs the text model in {text_model}, which this machine lacks"
    return None


@functools.cache
def dry_run(argv: tuple[str, ...], repo: Path) -> tuple[str, str | None, int, float | None, str]:
    """(sweep name, profile, trials, training seconds at its group or None, the estimate's words) of a sweep
    command, read from its own ``--dry-run`` (once per command: the check asks before it runs it, and for its time
    limit)."""
    done = subprocess.run([*argv, "--dry-run"], cwd=repo, capture_output=True, text=True, timeout=600)
    head = next((m for m in map(_SWEEP_LINE.match, done.stdout.splitlines()) if m), None)
    costs = [m for m in map(_COST.match, done.stdout.splitlines()) if m]
    if done.returncode != 0 or head is None:
        raise RuntimeError(
            f"its --dry-run failed (exit {done.returncode}): {(done.stderr or done.stdout).strip().splitlines()[-1:]}"
        )
    name, profile, trials = head.group(1), head.group(2), int(head.group(3))
    if not costs:
        return name, profile, trials, None, "no estimate"
    last = max(costs, key=lambda m: int(m.group(1)))  # the sweep's own group (G = 1 unless it groups)
    return name, profile, trials, parse_duration(last.group(2)), f"about {last.group(2)}"


def results_page(results: Path, sweep: str, profile: str | None) -> Path | None:
    """The newest results page of ``sweep`` under ``profile`` (docs/results/README.md's names), if any."""
    from itrlab.config.profiles import DEFAULT_PROFILE

    tail = "" if profile in (None, DEFAULT_PROFILE) else f"-{re.escape(profile)}"
    name = re.compile(rf"^\d{{4}}-\d{{2}}-\d{{2}}-{re.escape(sweep)}{tail}(-\d+)?\.md$")
    pages = sorted(p for p in results.glob("*.md") if name.match(p.name))
    return pages[-1] if pages else None


def reason_not_run(command: Command, repo: Path, budget: Budget, python: str) -> str | None:
    """Why ``command`` is not run here, or None (see the module doc)."""
    words = command.words
    if command.through:
        return f"handed to `{command.through}`: it trains on the Ray cluster it is sent to (docs/cluster.md), none here"
    if "--resume" in words:
        return "continues an earlier run (--resume), so it trains nothing of its own here"
    if command.kind != SWEEP:
        return training_data_reason(words, repo)
    sweep_file = flag_value(words, "--sweep")
    if sweep_file is not None and not (repo / sweep_file).is_file():
        return f"names a sweep file of the reader's own ({sweep_file}), none here"
    gpus = flag_value(words, "--gpus-per-trial")
    if gpus is not None and float(gpus) > 0:
        import torch

        if not torch.cuda.is_available():
            return f"asks for GPUs (--gpus-per-trial {gpus}): none on this machine"
    try:
        name, profile, trials, seconds, words_ = dry_run(tuple(program_argv(words, python)), repo)
    except (RuntimeError, subprocess.TimeoutExpired) as err:
        return None if isinstance(err, RuntimeError) else "its --dry-run did not answer in 10 min"
    if seconds is not None and seconds <= budget.sweep_s:
        return None
    page = results_page(repo / "docs" / "results", name, profile)
    measured = f"; measured: {page.relative_to(repo)}" if page else "; no results page of it yet"
    return (
        f"a sweep of {trials} trials ({name}{', profile ' + profile if profile else ''}), {words_} of training "
        f"here by its --dry-run: over this check's {duration(budget.sweep_s)} for a sweep{measured}"
    )


def chance_of(run_dir: Path) -> tuple[float, float] | None:
    """A random model's 95% range of rsum on the run's test protocol, from its test table and config."""
    from itrlab.report.chance import chance_level

    table = yaml.safe_load((run_dir / "test_recall.json").read_text(encoding="utf-8"))
    config = (
        yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
        if (run_dir / "config.yaml").is_file()
        else {}
    )
    per_image = int((config.get("dataset") or {}).get("captions_per_image", 5))
    try:
        return chance_level(int(table["n_images"]), per_image, str(table["protocol"])).rsum_band
    except ValueError:
        return None


def last_path(output: str, label: str) -> Path | None:
    found = [line.split(label, 1)[1].strip() for line in output.splitlines() if line.startswith(label)]
    return Path(found[-1]) if found else None


def read_result(output: str, kind: str, repo: Path) -> Result:
    """The result of a finished command from its output (see the module doc)."""
    if kind == SWEEP:
        folder = last_path(output, "sweep directory:")
        tables = sorted((folder if folder.is_absolute() else repo / folder).rglob("test_recall.json")) if folder else []
        if not tables:
            raise RuntimeError("its sweep directory holds no trial's test_recall.json")
        found = []
        for table in tables:
            rsum = float(yaml.safe_load(table.read_text(encoding="utf-8"))["rsum"])
            found.append((rsum, chance_of(table.parent)))
        rsum, chance = min(found, key=lambda pair: pair[0])
        low = any(band and value <= band[1] for value, band in found)
        return Result(rsum, chance, (AT_CHANCE,) if low else ())
    run_dir = last_path(output, "run directory:")
    if run_dir is None:
        raise RuntimeError("it printed no run directory")
    run_dir = run_dir if run_dir.is_absolute() else repo / run_dir
    rsum = float(yaml.safe_load((run_dir / "test_recall.json").read_text(encoding="utf-8"))["rsum"])
    verdicts = tuple(v for v, start in VERDICT_LINES.items() if any(l.startswith(start) for l in output.splitlines()))
    return Result(rsum, chance_of(run_dir), verdicts)


def run_command(command: Command, repo: Path, budget: Budget, python: str, log_file: Path) -> Entry:
    """Run ``command`` (a make target: the command it runs) and read its result into its row."""
    words = split(command.runs) if command.runs else command.words
    argv = program_argv(words, python)
    limit = budget.sweep_limit(dry_run(tuple(argv), repo)[3]) if command.kind == SWEEP else budget.training_s
    log_file.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    with log_file.open("w", encoding="utf-8") as out:
        process = subprocess.Popen(
            argv, cwd=repo, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        try:
            code = process.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            stop(process)
            code = None
        except KeyboardInterrupt:  # its own session does not get the terminal's Ctrl-C: pass it on, then stop
            stop(process)
            raise
    wall = time.monotonic() - started
    measured = f"{time.strftime('%Y-%m-%d')}, load {os.getloadavg()[0]:.1f}"
    output = log_file.read_text(encoding="utf-8", errors="replace")
    base = Entry(command.text, command.pages, "", measured, wall)
    if code is None:
        return _with(base, f"{FAILED}stopped at this check's limit of {duration(limit)}")
    if code != 0:
        return _with(base, f"{FAILED}exit {code}: {failure_line(output)}")
    try:
        result = read_result(output, command.kind, repo)
    except (RuntimeError, OSError, KeyError, ValueError) as err:
        return _with(base, f"{FAILED}its result could not be read: {err}")
    return Entry(command.text, command.pages, result.verdict, measured, wall, result.test_rsum, result.chance)


def failure_line(output: str) -> str:
    """The line that says why a command failed: its last ``itrlab:`` line (Ray's and gRPC's shutdown noise comes
    after it), else its last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    said = [line for line in lines if line.startswith("itrlab:")]
    return ((said or lines)[-1:] or ["no output"])[0][:300]


def _with(entry: Entry, verdict: str) -> Entry:
    return Entry(entry.command, entry.pages, verdict, entry.measured, entry.wall_s)


def stop(process: subprocess.Popen) -> None:
    """Ctrl-C's way out for the command's whole process group (its Ray too), then SIGKILL."""
    stop_process_group(process, STOP_WAIT_S, 30)


RESOURCE_FLAGS = ("--cpus-per-trial", "--concurrency", "--storage")  # a sweep's trials are the same under any


def sweep_identity(words: list[str]) -> str:
    """What a sweep trains: its words without the flags that only place or pace its trials (``RESOURCE_FLAGS``;
    GPUs stay: they change the device)."""
    kept, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word in RESOURCE_FLAGS:
            skip = True
        elif not word.startswith(tuple(flag + "=" for flag in RESOURCE_FLAGS)):
            kept.append(word)
    return json.dumps(["sweep", *kept])


def training_identity(command: Command) -> str | None:
    """What a command trains: a training's resolved config without ``output`` and ``tracking`` (where it writes,
    whether it logs a model), as JSON, a sweep's :func:`sweep_identity`; None for a command handed elsewhere,
    ``--resume``, or a config that fails."""
    words = split(command.runs) if command.runs else command.words
    if command.through or "--resume" in words:
        return None
    if command.kind == SWEEP:
        return sweep_identity(words)
    resolved = training_config(tuple(words))
    if resolved is None:
        return None
    config = resolved.model_dump(mode="json")
    return json.dumps(
        {key: value for key, value in config.items() if key not in ("output", "tracking")}, sort_keys=True, default=str
    )


def aliases(commands: list[Command], identity: Callable[[Command], str | None] = training_identity) -> dict[str, str]:
    """Commands whose row is another's: a make target whose recipe is catalogued, and a command that trains what an
    earlier one does (:func:`training_identity`: the same config but for where it writes, ``--run-dir`` or
    ``output.*``; the same sweep on other CPUs or storage): {command: the command whose row it takes}."""
    texts = {c.text for c in commands}
    found, first = {}, {}
    for command in commands:
        if command.runs in texts:
            found[command.text] = command.runs
            continue
        key = identity(command)
        if key is not None and key in first:
            found[command.text] = first[key]
        elif key is not None:
            first[key] = command.text
    return {text: found.get(target, target) for text, target in found.items()}


def rows_of(
    commands: list[Command], rows: dict[str, Entry], previous: dict[str, Entry], alias: dict[str, str]
) -> list[Entry]:
    """The page's rows in the commands' order: each command's row of this check, else of ``previous`` (carried,
    shown in the pages that show it now); an alias (:func:`aliases`) takes its target's figures."""
    found = {}
    for command in commands:
        target = alias.get(command.text)
        if target is not None:
            source = rows.get(target) or previous.get(target)
            found[command.text] = Entry(
                command.text,
                command.pages,
                ALIAS + target,
                *(source.measured, source.wall_s, source.test_rsum, source.chance) if source else (),
            )
        elif command.text in rows or command.text in previous:
            found[command.text] = (rows.get(command.text) or previous[command.text]).shown_in(command.pages)
    return [found[c.text] for c in commands if c.text in found]


def check(
    repo: Path,
    commands: list[Command],
    python: str,
    budget: Budget,
    log_dir: Path,
    selected: Callable[[Command], bool] = lambda command: True,
    previous: dict[str, Entry] | None = None,
    done: Callable[[list[Entry]], None] = lambda rows: None,
) -> list[Entry]:
    """One row per command: run (or reasoned) where ``selected``, or where ``previous`` (an earlier page) lacks
    it; else its row of ``previous``. ``done`` gets the rows so far (:func:`rows_of`) after each new row."""
    previous = previous or {}
    alias = aliases(commands)
    rows: dict[str, Entry] = {}
    for number, command in enumerate(commands, 1):
        if (not selected(command) and command.text in previous) or command.text in alias:
            continue
        reason = reason_not_run(command, repo, budget, python)
        if reason is not None:
            log.info("%s: not run: %s", command.text, reason)
            rows[command.text] = Entry(command.text, command.pages, NOT_RUN + reason)
            done(rows_of(commands, rows, previous, alias))
            continue
        log.info("%s: running (%d of %d; log %s)", command.text, number, len(commands), log_dir)
        rows[command.text] = entry = run_command(
            command, repo, budget, python, log_dir / f"{number:02d}-{slug(command.text)}.log"
        )
        log.info(
            "%s: %s%s",
            command.text,
            entry.verdict,
            f", test rsum {entry.test_rsum:.1f}" if entry.test_rsum is not None else "",
        )
        done(rows_of(commands, rows, previous, alias))
    return rows_of(commands, rows, previous, alias)


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text)[:60].strip("_")


def commit_of(repo: Path) -> str:
    """The checkout's commit (``+`` when its tracked files differ from it)."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+" if git("status", "--porcelain", "--untracked-files=no") else "")


def preamble(started: str, repo: Path, budget: Budget) -> str:
    """How the page was made, and on what."""
    return (
        "Every command of README.md and docs/ that trains ([Training](../training.md#every-documented-training)), "
        "run from the checkout's root as a user runs it, by `python jobs/check_documented_trainings.py`, or the "
        "reason it was not run here. Generated: do not edit, run the job again (`--only REGEX` runs the commands "
        "that match and keeps the other rows as the page before measured them, with their dates).\n\n"
        "*measured*: the date of the row's run and the machine's load average (1 min) when it ended; *test rsum*: "
        "a sweep's lowest trial's; *random model (95%)*: the range of a random model's rsum on the run's test "
        "protocol ([at chance](../training.md#at-chance-or-on-a-plateau)); *verdict*: `off chance` when its last "
        "lines said neither `at chance` nor `on its plateau`, `as:` the result of the command a make target runs, "
        "or of an earlier training of the same config but for where it writes (`--run-dir`, `output.*`), or an "
        "earlier sweep but for its CPUs or storage.\n\n"
        f"Last run: {started}, commit {commit_of(repo)}, on {os.cpu_count()} CPU cores (Linux "
        f"{os.uname().machine}), the job at nice {os.nice(0)}; a training's limit {duration(budget.training_s)}, a "
        f"sweep run only when its `--dry-run` puts its training at {duration(budget.sweep_s)} or less, and stopped at "
        f"{SWEEP_SLACK:g}x that estimate where that is longer."
    )


def run_check(
    repo: Path, results: Path, python: str, budget: Budget, only: re.Pattern | None = None
) -> tuple[Path, list[Entry]]:
    """Check the manual's trainings (those matching ``only``, the others kept from the newest page) and write
    today's page under ``results``; returns it and its rows."""
    from documented.catalogue import catalogue
    from documented.page import newest_page, page_path, read_page, render
    from itrlab.files import atomic_write_text

    newest = newest_page(results)
    previous = {entry.command: entry for entry in read_page(newest.read_text(encoding="utf-8"))} if newest else {}
    started = time.strftime("%Y-%m-%d %H:%M")
    log_dir = repo / "runs" / "documented" / time.strftime("%Y%m%d-%H%M%S")
    path, text = page_path(results, started[:10]), preamble(started, repo, budget)

    def write(rows: list[Entry]) -> None:  # after each run: a check cut short keeps what it measured
        atomic_write_text(path, render(started[:10], text, rows))

    entries = check(
        repo,
        catalogue(repo),
        python,
        budget,
        log_dir,
        (lambda command: bool(only.search(command.text))) if only else (lambda command: True),
        previous,
        write,
    )
    write(entries)
    return path, entries
