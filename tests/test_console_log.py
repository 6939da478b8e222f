"""The library logs, the command line prints (itrlab.console_log).

- the console handler: a record's bare message, INFO on stdout, warnings and ``TO_STDERR`` on stderr;
- a log file or a pipe gets no ANSI colour codes: neither in itrlab's records nor in the lines Ray forwards
  from its workers (``RAY_COLOR_PREFIX=0``); a terminal keeps them;
- a training embedded in a program whose logging is at WARNING prints no INFO line, on stdout or stderr;
- a worker the command line started keeps its ordered exit (``SystemExit`` raised inside a weakref callback, as
  Ray's SIGTERM handler does when it lands there) off the console, and prints any other such exception;
- the command line's console is what it was before the library logged: a smoke training's and a sweep's dry
  run's lines, with the code of ``BEFORE`` (the commit before the change, unpacked with ``git archive``) and
  with this checkout, equal once what legitimately varies is masked (timings, paths, timestamps).
"""

from __future__ import annotations

import io
import logging
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from itrlab import console_log

REPO = Path(__file__).resolve().parents[1]
BEFORE = "93f3537"  # main's commit before the library logged, whose console lines are the reference
# lines the console gained after BEFORE by design, per part: each must be there, and the rest equal BEFORE's
GAINED = {
    "train stdout": [
        r"itrlab: collapsed: test MD [0-9.]+ below 0\.01 \(positive and negative pairs score alike\)",
        r"Chance \(random scores on \d+ images x \d+ captions\)",  # a random ranking's table beside the test's
        r"  i2t image->text +[0-9.]+ +[0-9.]+ +[0-9.]+",
        r"  t2i text->image +[0-9.]+ +[0-9.]+ +[0-9.]+",
        r"  rsum [0-9.]+, 95% range [0-9.]+ to [0-9.]+",
    ],
    "dry-run stdout": [r"data: synthetic_tiny in <root>/data/synthetic/tiny( \(generated before the first trial\))?"],
}


def test_the_console_handler_writes_bare_lines_to_the_streams(capsys):
    console_log.configure()
    log = logging.getLogger("itrlab.some.module")
    log.info("epoch 1/2 · 50%% %s", "done")
    log.info("progress beside the report", extra=console_log.TO_STDERR)
    log.warning("itrlab: warning: something")
    log.error("itrlab: error: bad input")
    out, err = capsys.readouterr()
    assert out == "epoch 1/2 · 50% done\n"
    assert err == "progress beside the report\nitrlab: warning: something\nitrlab: error: bad input\n"
    assert os.environ[console_log.CONSOLE_ENV] == "INFO"


class Terminal(io.StringIO):
    """A stream that says it is a terminal, as a console window's is."""

    def isatty(self) -> bool:
        return True


def test_a_stream_that_is_no_terminal_gets_no_colour_codes(capsys, monkeypatch):
    console_log.configure()
    coloured = "trial 1 failed: \x1b[36mray::trial()\x1b[39m (pid=7) ValueError: \x1b[1mboom\x1b[0m"
    logging.getLogger("itrlab.sweep.some").warning(coloured)
    assert capsys.readouterr().err == "trial 1 failed: ray::trial() (pid=7) ValueError: boom\n"
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    logging.getLogger("itrlab.sweep.some").warning(coloured)
    assert terminal.getvalue() == coloured + "\n"  # a terminal shows the colours


def test_rays_colour_is_off_unless_both_streams_are_terminals_or_the_user_set_it(monkeypatch):
    monkeypatch.delenv(console_log.RAY_COLOR_ENV, raising=False)
    console_log.configure()  # pytest's captured streams: no terminal
    assert os.environ[console_log.RAY_COLOR_ENV] == "0"
    monkeypatch.setenv(console_log.RAY_COLOR_ENV, "1")
    console_log.configure()
    assert os.environ[console_log.RAY_COLOR_ENV] == "1"  # the user's choice wins
    monkeypatch.delenv(console_log.RAY_COLOR_ENV)
    monkeypatch.setattr(sys, "stdout", Terminal())
    monkeypatch.setattr(sys, "stderr", Terminal())
    console_log.configure()
    assert console_log.RAY_COLOR_ENV not in os.environ


RAY_TO_A_FILE = """
import logging, sys, time
from pathlib import Path
from itrlab import console_log
console_log.configure()
import ray

@ray.remote
def trial():
    print("a line from the worker", flush=True)
    raise ValueError("boom")

ray.init(address="local", num_cpus=1, include_dashboard=False)
try:
    ray.get(trial.remote())
except ray.exceptions.RayTaskError as err:
    logging.getLogger("itrlab.sweep.demo").warning(f"trial failed: {err}")
out = Path(sys.argv[1])
deadline = time.monotonic() + 120  # Ray forwards the worker's line on its own schedule: wait for it
while "a line from the worker" not in out.read_text() and time.monotonic() < deadline:
    time.sleep(0.2)
ray.shutdown()
"""


@pytest.mark.e2e
def test_a_sweeps_log_written_to_a_file_holds_no_colour_codes(tmp_path):
    """A real Ray started by a command-line program whose stdout and stderr are files: the worker's line that
    Ray forwards (prefixed ``(trial pid=...)``) and Ray's error logged by itrlab reach the files as plain text."""
    out, err = tmp_path / "out.log", tmp_path / "err.log"
    env = {k: v for k, v in _clean_env(PYTHONPATH=str(REPO / "platform")).items() if k != console_log.RAY_COLOR_ENV}
    with open(out, "w") as stdout, open(err, "w") as stderr:
        done = subprocess.run(
            [sys.executable, "-c", RAY_TO_A_FILE, str(out)], stdout=stdout, stderr=stderr, env=env, timeout=300
        )
    text = out.read_text() + err.read_text()
    assert done.returncode == 0, text[-3000:]
    assert re.search(r"\(trial pid=\d+\) a line from the worker", text), text[-3000:]
    assert "trial failed: " in text and "boom" in text
    assert "\x1b" not in text, [line for line in text.splitlines() if "\x1b" in line]


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (console_log.CONSOLE_ENV, "PYTHONPATH")}
    return {**env, **extra}


EXIT_IN_CALLBACK = """
import gc, os, signal, sys, weakref
import itrlab

class Thing:
    pass

def on_sigterm(signum, frame):
    raise SystemExit(1)  # what Ray's worker does on SIGTERM (ray._private.worker: raise_sys_exit_...)

kept = []
def callback(ref):
    if sys.argv[1] == "other":
        raise ValueError("a real error in a callback")
    os.kill(os.getpid(), signal.SIGTERM)  # the signal arrives while Python runs the weakref callback

signal.signal(signal.SIGTERM, on_sigterm)
thing = Thing()
kept.append(weakref.ref(thing, callback))
del thing
gc.collect()
print("still here")
"""


@pytest.mark.e2e
@pytest.mark.parametrize(("raised", "started_by_the_command_line"), [("exit", True), ("other", True), ("exit", False)])
def test_a_workers_exit_inside_a_callback_stays_off_the_console(raised, started_by_the_command_line):
    env = _clean_env(**({console_log.CONSOLE_ENV: "INFO"} if started_by_the_command_line else {}))
    done = subprocess.run(
        [sys.executable, "-c", EXIT_IN_CALLBACK, raised], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0 and done.stdout == "still here\n", done.stderr
    if raised == "other":
        assert "Exception ignored in" in done.stderr and "ValueError: a real error" in done.stderr
    elif started_by_the_command_line:
        assert done.stderr == ""
    else:  # a program embedding itrlab keeps Python's own hook
        assert "Exception ignored in" in done.stderr and "SystemExit" in done.stderr


EMBEDDED = """
import logging, sys
from pathlib import Path
logging.basicConfig(level=logging.WARNING, format="%(levelname)s:%(name)s:%(message)s")
from itrlab.assembly import load_experiment
from itrlab.train import run_experiment
root = Path(sys.argv[1])
config = load_experiment("vsepp_synthetic_tiny", [f"dataset.root={root / 'data'}", f"output.dir={root / 'runs'}",
                                                  "tracking.enabled=false", "train.epochs=1"])
result = run_experiment(config, root / "runs" / "embedded")
assert result.test.rsum >= 0
"""


@pytest.mark.e2e
def test_an_embedded_training_at_warning_prints_no_info_line(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", EMBEDDED, str(tmp_path)], capture_output=True, text=True, env=_clean_env(), timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout == "", done.stdout
    assert "INFO:" not in done.stderr and "epoch" not in done.stderr, done.stderr


# --------------------------------------------------------------------------- the console, before and after


def _mask(text: str, roots: list[Path]) -> list[str]:
    """The lines of ``text`` with what varies between two runs masked: the runs' folders, timestamps, seconds;
    the step counter's lines (one per 30 s of an epoch: how many depends on the machine's load) left out."""
    text = "\n".join(line for line in text.splitlines() if not re.match(r"epoch \d+/\d+ · step \d+/\d+ · ", line))
    for root in roots:
        text = text.replace(str(root), "<root>")
    text = re.sub(r"\d{8}-\d{6}(-\d+)?", "<timestamp>", text)
    text = re.sub(r"\d+(\.\d+)?( ?s\b| ?s/step| min\b)", r"<t>\2", text)
    return text.splitlines()


def _tree(commit: str, where: Path) -> Path:
    """The repository's files at ``commit`` under ``where`` (git archive)."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(where, filter="data")
    return where


def _run(tree: Path, args: list[str], work: Path) -> subprocess.CompletedProcess:
    env = _clean_env(
        PYTHONPATH=str(tree / "platform"),
        ITRLAB_CONFIG_DIR=str(REPO / "configs"),
        ITRLAB_STEP_COUNTS=str(work / "step_counts.json"),
    )
    return subprocess.run([sys.executable, *args], cwd=tree, capture_output=True, text=True, env=env, timeout=900)


@pytest.mark.e2e
def test_the_command_lines_console_is_what_it_was_before_the_library_logged(tmp_path):
    """``jobs/train.py`` on the tiny synthetic data (seed 0, no MLflow) and ``jobs/sweep.py --dry-run`` of a
    tiny preset: the same lines on stdout and on stderr with the code of ``BEFORE`` and with this one (the
    recall tables and losses equal to the digit; the dry run's cost estimate, which reads each tree's
    throughput records, left out)."""
    try:
        before = _tree(BEFORE, tmp_path / "before")
    except subprocess.CalledProcessError:
        pytest.skip(f"this checkout has no commit {BEFORE} (a shallow clone)")
    outputs = {}
    for name, tree in (("before", before), ("after", REPO)):
        work = tmp_path / name
        work.mkdir(exist_ok=True)
        train = _run(
            tree,
            [
                "jobs/train.py",
                "-c",
                "vsepp_synthetic_tiny",
                f"dataset.root={work / 'data'}",
                f"output.dir={work / 'runs'}",
                "tracking.enabled=false",
            ],
            work,
        )
        dry = _run(
            tree, ["jobs/sweep.py", "--preset", "dbl-tiny", "--dry-run", "--storage", str(work / "sweeps")], work
        )
        assert train.returncode == 0 and dry.returncode == 0, (train.stderr[-2000:], dry.stderr[-2000:])
        roots = [work, tree]
        # the submit line as the Ray-job page gives it: the head's dashboard port, and the data folder on the
        # cluster named (made once there, not in each job's copy)
        dry_lines = [
            re.sub(r" dataset\.root=\S+$", "", re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>", line))
            for line in _mask(dry.stdout, roots)
            if "estimate" not in line and "CPU-h" not in line
        ]
        outputs[name] = (_mask(train.stdout, roots), _mask(train.stderr, roots), dry_lines, _mask(dry.stderr, roots))
    assert any(line.startswith("epoch ") for line in outputs["after"][0])  # the epoch lines are there at all
    for part, before_lines, after_lines in zip(
        ("train stdout", "train stderr", "dry-run stdout", "dry-run stderr"), outputs["before"], outputs["after"]
    ):
        for gained in GAINED.get(part, []):
            found = [line for line in after_lines if re.fullmatch(gained, line)]
            assert len(found) == 1, (part, gained, after_lines)
            after_lines = [line for line in after_lines if line not in found]
        assert after_lines == before_lines, part
