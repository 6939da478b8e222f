"""Every training the manual documents was run and ended off chance (a documented command that trains to
chance would otherwise go unnoticed): the newest docs/results/<date>-documented-trainings.md, which
jobs/check_documented_trainings.py writes, holds each command of documented.catalogue with a result off
chance, or the reason it cannot run here. A command added to a page and not run fails here; so does one whose
run was at chance, on its plateau or failed. How the catalogue reads the pages and the page reads back."""

from __future__ import annotations

import json
import re

import pytest

from conftest import REPO
from documented.catalogue import SWEEP, TRAINING, Command, catalogue, make_recipes
from documented.check import Budget, aliases, read_result, reason_not_run, rows_of
from documented.page import (
    AT_CHANCE,
    NOT_RUN,
    OFF_CHANCE,
    ON_PLATEAU,
    Entry,
    duration,
    newest_page,
    parse_duration,
    read_page,
    render,
)
from itrlab.report.chance import chance_level

RESULTS = REPO / "docs" / "results"
COMMANDS = catalogue(REPO)


def newest_rows() -> dict[str, Entry]:
    page = newest_page(RESULTS)
    assert page is not None, "no documented-trainings page: run python jobs/check_documented_trainings.py"
    return {entry.command: entry for entry in read_page(page.read_text(encoding="utf-8"))}


# -- the manual against its page ---------------------------------------------------------------------------------


def test_the_manual_documents_trainings_and_sweeps():
    kinds = {command.kind for command in COMMANDS}
    assert kinds == {TRAINING, SWEEP} and len(COMMANDS) >= 30
    texts = {command.text for command in COMMANDS}
    assert {"python jobs/train.py", "python jobs/train.py -c convsepp_synthetic_small", "make sweep"} <= texts


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: command.text[:80])
def test_every_documented_training_ran_off_chance_or_says_why_not(command):
    rows = newest_rows()
    assert command.text in rows, (
        f"{command.text!r} ({', '.join(command.pages)}) is not on the newest page: run "
        f"python jobs/check_documented_trainings.py --only '{re.escape(command.text)}'"
    )
    entry = rows[command.text]
    if entry.alias_of is not None:  # a make target, or the same command into another folder: that command's row
        assert entry.alias_of in rows, entry
        entry = rows[entry.alias_of]
    assert entry.off_chance or entry.reason, f"{command.text}: {entry.verdict}"
    if entry.off_chance:
        assert entry.measured and entry.wall_s is not None and entry.test_rsum is not None, entry
        assert entry.chance is None or entry.test_rsum > entry.chance[1], entry


def test_the_page_holds_no_command_the_manual_lost():
    gone = set(newest_rows()) - {command.text for command in COMMANDS}
    assert not gone, f"rows of commands no page shows any more: {sorted(gone)}; run the job again"


def test_a_reason_that_names_a_results_page_names_one_that_exists():
    for entry in newest_rows().values():
        for page in re.findall(r"docs/results/\S+?\.md", entry.reason or ""):
            assert (REPO / page).is_file(), entry


# -- the catalogue -------------------------------------------------------------------------------------------------

MAKEFILE = (
    "PY := $(VENV)/bin/python\nSWEEP_ARGS ?= --preset smoke\n\ntrain: setup\n\t$(PY) jobs/train.py\n\n"
    "sweep: setup\n\t$(PY) jobs/sweep_dbl.py $(SWEEP_ARGS)\n\nclean:\n\trm -rf runs\n"
)


def test_the_catalogue_reads_the_shell_blocks_of_every_page(tmp_path):
    (tmp_path / "docs" / "papers").mkdir(parents=True)
    (tmp_path / "Makefile").write_text(MAKEFILE)
    (tmp_path / "README.md").write_text(
        "Text `python jobs/train.py -c inline` is not a block.\n\n```bash\nmake train   # the demo\nmake clean\n"
        "python jobs/train.py -c a \\\n    train.epochs=2     # two lines, one command\n"
        "python jobs/sweep.py --preset p --dry-run\npython jobs/sweep.py --list\nitrlab check-config -c a\n```\n"
    )
    (tmp_path / "docs" / "papers" / "x.md").write_text(
        "```text\n$ python jobs/train.py -c output_only\n```\n\n```sh\n$ python jobs/train.py -c a train.epochs=2\n"
        "# python jobs/train.py -c commented\nRAY_AUTH_MODE=token ray job submit --address http://h:8265 -- "
        "python jobs/sweep_dbl.py --preset smoke\nitrlab train -c b\npython jobs/sweep_dbl.py\n```\n"
    )
    found = {command.text: command for command in catalogue(tmp_path)}
    assert list(found) == [
        "make train",
        "python jobs/train.py -c a train.epochs=2",
        "RAY_AUTH_MODE=token ray job submit --address http://h:8265 -- python jobs/sweep_dbl.py --preset smoke",
        "itrlab train -c b",
        "python jobs/sweep_dbl.py",
    ]
    assert found["make train"] == Command("make train", TRAINING, ("README.md",), runs="python jobs/train.py")
    assert found["python jobs/train.py -c a train.epochs=2"].pages == ("README.md", "docs/papers/x.md")
    assert (
        found[
            "RAY_AUTH_MODE=token ray job submit --address http://h:8265 -- python jobs/sweep_dbl.py --preset smoke"
        ].through
        == "ray job submit"
    )
    assert found["python jobs/sweep_dbl.py"].kind == SWEEP and found["itrlab train -c b"].kind == TRAINING


def test_make_targets_are_read_from_the_makefile():
    assert make_recipes(MAKEFILE) == {
        "train": "python jobs/train.py",
        "sweep": "python jobs/sweep_dbl.py --preset smoke",
        "clean": "rm -rf runs",
    }
    recipes = make_recipes((REPO / "Makefile").read_text())
    assert recipes["train"] == "python jobs/train.py" and recipes["sweep"] == "python jobs/sweep_dbl.py --preset smoke"


def test_a_make_target_and_a_training_of_the_same_config_share_a_row():
    commands = [
        Command(text, TRAINING, ())
        for text in (
            "python jobs/train.py",
            "python jobs/train.py --run-dir runs/mine",
            "python jobs/train.py -c vsepp_synthetic_small output.log_model=none",
            "python jobs/train.py train.epochs=12",
            "python jobs/train.py --resume",
        )
    ]
    commands.insert(0, Command("make train", TRAINING, (), runs="python jobs/train.py"))
    assert aliases(commands) == {
        "make train": "python jobs/train.py",
        "python jobs/train.py --run-dir runs/mine": "python jobs/train.py",
        "python jobs/train.py -c vsepp_synthetic_small output.log_model=none": "python jobs/train.py",
    }


def test_a_sweep_on_other_cpus_or_storage_shares_its_row_and_one_on_gpus_does_not():
    texts = [
        "python jobs/sweep.py --preset ascl-table2",
        "python jobs/sweep.py --preset ascl-table2 --cpus-per-trial 1 --concurrency=2 --storage /tmp/s",
        "python jobs/sweep.py --preset ascl-table2 --gpus-per-trial 0.5",
        "python jobs/sweep.py --preset ascl-table2 --profile flickr8k",
        "python jobs/sweep_dbl.py --preset ascl-table2",
    ]
    assert aliases([Command(text, SWEEP, ()) for text in texts]) == {texts[1]: texts[0]}


def test_rows_carry_the_earlier_page_and_an_alias_takes_its_targets_figures():
    commands = [
        Command("make train", TRAINING, ("README.md",), runs="python jobs/train.py"),
        Command("python jobs/train.py", TRAINING, ("README.md", "docs/t.md")),
        Command("python jobs/train.py -c x", TRAINING, ("docs/x.md",)),
    ]
    before = Entry("python jobs/train.py", ("README.md",), OFF_CHANCE, "2026-11-28, load 2.0", 300.0, 249.2, (1.6, 4.7))
    alias = {"make train": "python jobs/train.py"}
    rows = rows_of(commands, {}, {before.command: before}, alias)
    assert [row.command for row in rows] == ["make train", "python jobs/train.py"]  # -c x: not run, not on the page
    assert rows[0].alias_of == "python jobs/train.py" and (rows[0].test_rsum, rows[0].wall_s) == (249.2, 300.0)
    assert rows[1].pages == ("README.md", "docs/t.md") and rows[1].measured == "2026-11-28, load 2.0"
    now = Entry("python jobs/train.py -c x", ("docs/x.md",), f"{AT_CHANCE}", "2026-11-29, load 1.0", 60.0, 3.0)
    assert rows_of(commands, {now.command: now}, {}, alias)[-1] == now
    assert len(rows_of(commands, {now.command: now}, {}, alias)) == 2


@pytest.mark.parametrize(
    "text, says",
    [
        (
            "RAY_AUTH_MODE=token ray job submit --address a -- python jobs/sweep_dbl.py --preset smoke",
            "handed to `ray job submit`",
        ),
        ("python jobs/train.py --resume", "continues an earlier run"),
        ("python jobs/sweep.py --sweep my_sweep.yaml", "names a sweep file of the reader's own (my_sweep.yaml)"),
        (
            "python jobs/train.py defaults.dataset=f30k_precomp dataset.root=/data/f30k_precomp",
            "needs its data in /data/f30k_precomp, which this machine lacks",
        ),
        (
            "python jobs/train.py model.text.encoder=bert model.text.bert_path=/models/none",
            "needs the text model in /models/none",
        ),
        ("python jobs/train.py -c vsepp_synthetic_tiny", None),
    ],
)
def test_what_cannot_run_here_says_why_before_anything_runs(text, says):
    kind = SWEEP if "sweep" in text else TRAINING
    through = "ray job submit" if text.startswith("RAY") else None
    reason = reason_not_run(Command(text, kind, (), through=through), REPO, Budget(), "python")
    assert (reason is None) if says is None else (says in reason), reason


def test_a_sweeps_limit_leaves_room_over_its_estimate():
    budget = Budget(training_s=900, sweep_s=900)
    assert budget.sweep_limit(None) == budget.sweep_limit(60) == 900  # a short sweep: the training's limit
    assert budget.sweep_limit(13 * 60) == 3 * 13 * 60  # coder-table2's 13 min: its evaluation and start-up on top


# -- a run's result, and the page ----------------------------------------------------------------------------------


def write_run(folder, rsum: float, n_images: int = 1000):
    folder.mkdir(parents=True)
    (folder / "test_recall.json").write_text(json.dumps({"protocol": "all", "n_images": n_images, "rsum": rsum}))
    (folder / "config.yaml").write_text("dataset: {captions_per_image: 5}\n")
    return folder


def test_a_trainings_result_is_its_run_folders_test_rsum_and_its_last_lines(tmp_path):
    run = write_run(tmp_path / "runs" / "x" / "1", 249.2)
    band = chance_level(1000, 5, "all").rsum_band
    result = read_result(f"epoch 1\nrun directory: {run}\nMLflow: ...\n", TRAINING, tmp_path)
    assert (result.test_rsum, result.chance, result.verdict) == (249.2, band, OFF_CHANCE)
    said = read_result(
        "run directory: runs/x/1\nitrlab: at chance: test rsum 3.1 ...\nitrlab: on its plateau: ...\n",
        TRAINING,
        tmp_path,
    )
    assert said.verdict == f"{AT_CHANCE}; {ON_PLATEAU}"
    with pytest.raises(RuntimeError, match="no run directory"):
        read_result("itrlab: error: ...", TRAINING, tmp_path)


def test_a_sweeps_result_is_its_lowest_trial_and_at_chance_when_any_trial_is(tmp_path):
    sweep = tmp_path / "sweeps" / "s" / "1"
    write_run(sweep / "tune" / "t0" / "run", 300.0)
    write_run(sweep / "tune" / "t1" / "run", 250.0)
    result = read_result(f"sweep directory: {sweep}\n", SWEEP, tmp_path)
    assert (result.test_rsum, result.verdict) == (250.0, OFF_CHANCE)
    write_run(sweep / "tune" / "t2" / "run", 3.0)
    assert read_result(f"sweep directory: {sweep}\n", SWEEP, tmp_path).verdict == AT_CHANCE


def test_a_page_reads_back_as_it_was_written(tmp_path):
    entries = [
        Entry(
            "python jobs/train.py 'dataset.synthetic.knobs={a: 1}' x=[5,8]",
            ("README.md", "docs/a.md"),
            OFF_CHANCE,
            "2026-11-28, load 4.2",
            583.0,
            249.22,
            (1.6, 4.7),
        ),
        Entry(
            "python jobs/train.py --resume",
            ("docs/training.md",),
            NOT_RUN + "continues *an* earlier_run <here> | and [there]",
        ),
        Entry(
            "make train", ("README.md",), "as: python jobs/train.py", "2026-11-28, load 4.2", 583.0, 249.2, (1.6, 4.7)
        ),
    ]
    text = render("2026-11-28", "How it was made.", entries)
    assert text.startswith("# Documented trainings, 2026-11-28\n\nHow it was made.\n")
    again = read_page(text)
    assert [e.command for e in again] == [e.command for e in entries]
    assert again[0].wall_s == 583.0 and again[0].test_rsum == 249.2 and again[0].pages == ("README.md", "docs/a.md")
    assert again[1].reason == "continues *an* earlier_run <here> | and [there]" and again[1].measured is None
    assert again[2].alias_of == "python jobs/train.py"


def test_durations_read_back_and_an_estimates_decimal_hours_are_read_whole():
    assert [parse_duration(duration(s)) for s in (41, 125, 3780)] == [41, 125, 3780]
    assert parse_duration("1.18 h") == 1.18 * 3600 and parse_duration("7 min") == 420  # not 18 h


def test_the_newest_page_is_the_latest_date(tmp_path):
    assert newest_page(tmp_path) is None
    for name in ("2026-11-28-documented-trainings.md", "2026-12-01-documented-trainings.md", "2026-12-02-other.md"):
        (tmp_path / name).write_text("")
    assert newest_page(tmp_path).name == "2026-12-01-documented-trainings.md"


# -- two documented trainings, trained for real (slow) --------------------------------------------------------------

FLICKR8K = REPO / "data" / "flickr8k_precomp" / "pool1x1"
SHORT_RUNS = [  # (the command as documented, the folder to run it from: where its relative data folder is)
    ("python jobs/train.py -c clip_synthetic_tiny", None),  # docs/adding-a-method.md; its tiny data made in tmp
    ("python jobs/train.py -c vsepp_flickr8k train.epochs=2 'train.lr_decay_epochs=[]'", REPO),  # docs/data.md
]


@pytest.mark.e2e  # `train` starts its MLflow run's watchdog (itrlab.tracking.watchdog, a python) and git
def test_two_documented_trainings_end_off_chance_in_one_process(tmp_path, monkeypatch, capsys):
    """Each as the pages show it (its runs and MLflow store sent to tmp), one after the other in this process, as a
    user's shell would not, but a notebook would; each result read as the check job reads it."""
    from documented.catalogue import split
    from itrlab.cli import main

    texts = {command.text for command in COMMANDS}
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    for number, (text, folder) in enumerate(SHORT_RUNS):
        assert text in texts, text
        if folder is REPO and not FLICKR8K.is_dir():
            pytest.skip(f"no {FLICKR8K.relative_to(REPO)}: docs/data.md#flickr8k extracts it")
        monkeypatch.chdir(folder or tmp_path)
        runs = tmp_path / f"runs{number}"
        assert main(["train", *split(text)[2:], f"output.dir={runs}"]) == 0, text
        result = read_result(capsys.readouterr().out, TRAINING, folder or tmp_path)
        assert result.verdict == OFF_CHANCE and result.test_rsum > result.chance[1], (text, result)


@pytest.mark.e2e  # starts the command it stops
def test_ctrl_c_stops_the_command_running_in_its_own_session(tmp_path):
    """The command runs in a session of its own (so that the budget's stop reaches its Ray), which the terminal's
    Ctrl-C does not reach: the check passes it on before it ends."""
    import _thread
    import os
    import shlex
    import signal
    import sys
    import threading
    import time

    from documented.check import run_command
    from itrlab.interrupts import ctrl_c_kept

    started = tmp_path / "pid"
    script = f"import os, pathlib, time; pathlib.Path({str(started)!r}).write_text(str(os.getpid())); time.sleep(300)"

    def press_ctrl_c_once_it_runs():
        while not (started.exists() and started.read_text()):
            time.sleep(0.05)
        _thread.interrupt_main()

    # Python's own Ctrl-C, as the check's process has it: a handler left by an earlier test of this worker
    # (Ray Train's, of a TorchTrainer fitted on the main thread) would otherwise take the press, and call a Ray
    # that has gone
    with ctrl_c_kept():
        signal.signal(signal.SIGINT, signal.default_int_handler)
        threading.Thread(target=press_ctrl_c_once_it_runs, daemon=True).start()
        with pytest.raises(KeyboardInterrupt):
            run_command(
                Command(f"python -c {shlex.quote(script)}", TRAINING, ()),
                tmp_path,
                Budget(),
                sys.executable,
                tmp_path / "log",
            )
    with pytest.raises(ProcessLookupError):
        os.kill(int(started.read_text()), 0)


def test_a_failure_is_told_by_the_commands_own_last_line():
    from documented.check import failure_line

    noise = "itrlab: run failed: Ray did not start\nE1128 09:12:32 thread_pool.cc:232] Waiting for thread pool\n"
    assert failure_line(noise) == "itrlab: run failed: Ray did not start"
    assert failure_line("Traceback ...\nValueError: x\n") == "ValueError: x" and failure_line("") == "no output"
