"""Every command the manual shows that trains (:func:`documented.catalogue.catalogue`: README.md's and docs/' shell
blocks), checked as the command line checks it before it trains, in this process and without training: a training's
config composed and validated (``itrlab check-config``, as ``train`` does first), a sweep's ``--dry-run`` (its
preset, profile, overrides and every trial's config, and its cost). A command handed to a cluster is checked by the
command behind its ``--``; a make target by its recipe. The trainings on the tiny synthetic data, cheap here, train
for real (e2e) and end off chance; the others' runs are on the dated page (tests/test_documented_trainings.py)."""

from __future__ import annotations

import re

import pytest

import sweep_dbl
from conftest import REPO
from documented.catalogue import SWEEP, TRAINING, Command, catalogue, program_start, split
from documented.check import read_result
from documented.page import OFF_CHANCE
from itrlab.cli import main, sweep_cli

COMMANDS = catalogue(REPO)
# words a training's check-config does not take: where the run goes, and which run it continues
RUN_FLAGS = ("--run-dir", "--resume")
# documented commands whose placeholders stand for the reader's own values (docs/cluster.md's `<root>`)
PLACEHOLDER = re.compile(r"<[a-z]+>")
# a data set config of the reader's own photos (written by their extraction) stands in as the tiny synthetic data
# set, as in tests/test_cli_commands.py; tests/test_own_photos.py runs that extraction and command
OWN_PHOTOS = re.compile(r"^defaults\.dataset=.+\.yaml$")


def program_words(command: Command) -> list[str]:
    """The words of what ``command`` runs, from its program on: a make target's recipe, the command behind the
    ``--`` of a program it is handed to (``ray job submit ... -- python jobs/sweep_dbl.py ...``)."""
    words = split(command.runs or command.text)
    if command.through is not None:
        words = words[words.index("--") + 1 :]
    return words[program_start(words) :]


def arguments(words: list[str]) -> list[str]:
    """A command's arguments after its script (``python jobs/train.py``) or subcommand (``itrlab train``)."""
    start = 2 if words[0].startswith("python") or words[0].endswith("itrlab") else 1
    return [PLACEHOLDER.sub("x", word) for word in words[start:]]


TRAININGS = [command for command in COMMANDS if command.kind == TRAINING]
SWEEPS = [command for command in COMMANDS if command.kind == SWEEP]


def test_the_manual_shows_trainings_and_sweeps_to_check():
    assert len(TRAININGS) >= 20 and len(SWEEPS) >= 10
    assert {program_words(command)[1] for command in SWEEPS} == {"jobs/sweep.py", "jobs/sweep_dbl.py"}


@pytest.mark.parametrize("command", TRAININGS, ids=lambda command: command.text[:80])
def test_every_documented_trainings_config_passes_the_check_train_makes_first(command, capsys):
    args = [
        "defaults.dataset=synthetic_tiny" if OWN_PHOTOS.match(word) else word
        for word in arguments(program_words(command))
        if word not in RUN_FLAGS and not word.startswith(tuple(f"{flag}=" for flag in RUN_FLAGS))
    ]
    if "--run-dir" in command.words:  # the folder the flag names
        args = [word for word in args if word != command.words[command.words.index("--run-dir") + 1]]
    code = main(["check-config", "--no-data", *args])
    assert code == 0, (command.text, command.pages, capsys.readouterr().err)


@pytest.mark.parametrize("command", SWEEPS, ids=lambda command: command.text[:80])
def test_every_documented_sweep_answers_its_dry_run(command, capsys):
    """The sweep's own ``--dry-run``, as the job would run it: its preset and profile known, every trial's config
    valid, the trials counted and their cost estimated."""
    words = program_words(command)
    script = words[1]
    defaults = {"default_preset": sweep_dbl.DEFAULT_PRESET, "preset_flags": sweep_dbl.PRESET_FLAGS}
    args = [word for word in arguments(words) if word != "--resume"]
    code = sweep_cli([*args, "--dry-run"], script=script, **(defaults if script.endswith("sweep_dbl.py") else {}))
    out, err = capsys.readouterr()
    if "--sweep" in args and not (REPO / args[args.index("--sweep") + 1]).is_file():
        # the reader's own sweep file (docs/sweeps.md's my_sweep.yaml): one line that names it
        assert code == 2 and args[args.index("--sweep") + 1] in err, (command.text, err)
        return
    assert code == 0, (command.text, command.pages, err[-2000:])
    assert re.search(r"^sweep \S+(, profile \S+)?: \d+ trial", out, re.MULTILINE), (command.text, out[-2000:])


CHEAP = [  # trainings on the tiny synthetic data: a minute or less here
    command
    for command in TRAININGS
    if re.fullmatch(r"python jobs/train\.py -c [a-z0-9_]+_synthetic_tiny", command.text)
]


def test_some_documented_trainings_are_cheap_enough_to_train_here():
    assert "python jobs/train.py -c clip_synthetic_tiny" in {command.text for command in CHEAP}


@pytest.mark.e2e  # `train` starts its MLflow run's watchdog (itrlab.tracking.watchdog, a python) and git
@pytest.mark.parametrize("command", CHEAP, ids=lambda command: command.text[:80])
def test_every_cheap_documented_training_trains_off_chance(command, tmp_path, monkeypatch, capsys):
    """As the page shows it, in a folder of its own (its tiny data made there), its result read as the check job
    reads it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert main(["train", *arguments(program_words(command)), f"output.dir={tmp_path / 'runs'}"]) == 0
    result = read_result(capsys.readouterr().out, TRAINING, tmp_path)
    assert result.verdict == OFF_CHANCE and result.test_rsum > result.chance[1], (command.text, result)
