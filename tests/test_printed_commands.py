"""Printed commands equal the command given: the dry run's cluster line keeps the script and every
flag (``jobs/sweep_dbl.py``, ``--cpus-per-trial 1 --concurrency 2``) and parses back to the same arguments, and
every ``--help`` lists every choice of a flag, read from where the choices are defined."""

from __future__ import annotations

import shlex

import pytest

from conftest import job_module
from itrlab.cli import cluster_command, parse_args, sweep_argv, sweep_cli
from itrlab.config.choices import experiment_names, preset_names, profile_names

DBL = job_module("sweep_dbl")
IGNORED = ("func", "dry_run", "storage")  # the cluster's line runs it (no --dry-run), storage made absolute


def parsed(words: list[str], default_preset=None, preset_flags=None):
    """The arguments of a printed command line's words (``python SCRIPT ...``), as that script parses them."""
    assert words[0] == "python"
    args = parse_args(sweep_argv(words[2:], default_preset, preset_flags), preset_flags, words[:2])
    return {key: value for key, value in vars(args).items() if key not in IGNORED}


@pytest.mark.parametrize(
    "script, argv",
    [
        ("jobs/sweep_dbl.py", ["--preset", "smoke", "--dry-run", "--cpus-per-trial", "1", "--concurrency", "2"]),
        ("jobs/sweep_dbl.py", ["--optuna", "--dry-run", "train.epochs=2"]),
        ("jobs/sweep_dbl.py", ["--dry-run"]),
        (
            "jobs/sweep.py",
            [
                "--preset",
                "convse-table3",
                "--profile",
                "flickr8k",
                "--dry-run",
                "-v",
                "--group",
                "3",
                "--gpus-per-trial",
                "0.5",
                "--resume",
                "sweep-1",
                "--allow-changes",
                "model.embed_dim=512",
            ],
        ),
        ("jobs/sweep.py", ["--sweep", "configs/sweeps/dbl_tiny.yaml", "--dry-run", "--storage", "elsewhere"]),
    ],
)
def test_a_printed_command_parses_back_to_the_arguments_given(script, argv):
    dbl = script.endswith("sweep_dbl.py")
    default, flags = (DBL.DEFAULT_PRESET, DBL.PRESET_FLAGS) if dbl else (None, None)
    given = parse_args(sweep_argv(argv, default, flags), flags, ["python", script])
    words = cluster_command(given)
    assert words[:2] == ["python", script] and "--dry-run" not in words
    again = parsed(words, default, flags)
    assert again == {key: value for key, value in vars(given).items() if key not in IGNORED}
    storage = words[words.index("--storage") + 1]
    assert storage.startswith("/") and storage.endswith(given.storage)


def test_the_dry_run_prints_the_script_and_every_flag_given(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("ITRLAB_THROUGHPUT", str(tmp_path / "throughput.jsonl"))
    monkeypatch.chdir(tmp_path)
    argv = ["--preset", "smoke", "--dry-run", "--cpus-per-trial", "1", "--concurrency", "2"]
    assert (
        sweep_cli(argv, default_preset=DBL.DEFAULT_PRESET, preset_flags=DBL.PRESET_FLAGS, script="jobs/sweep_dbl.py")
        == 0
    )
    out = capsys.readouterr().out
    assert "each trial: 1 worker(s) x 1 CPU; 2 at a time" in out
    line = out.split("\n      -- ", 1)[1].splitlines()[0]
    assert line == (
        f"python jobs/sweep_dbl.py --preset smoke --cpus-per-trial 1 --concurrency 2 "
        f"--storage {tmp_path / 'runs' / 'sweeps'} dataset.root={tmp_path / 'data' / 'synthetic' / 'smoke'}"
    )
    given = parse_args(
        sweep_argv(argv, DBL.DEFAULT_PRESET, DBL.PRESET_FLAGS), DBL.PRESET_FLAGS, ["python", "jobs/sweep_dbl.py"]
    )
    given.overrides.append(f"dataset.root={tmp_path / 'data' / 'synthetic' / 'smoke'}")  # the data folder, absolute
    assert parsed(shlex.split(line), DBL.DEFAULT_PRESET, DBL.PRESET_FLAGS) == {
        key: value for key, value in vars(given).items() if key not in IGNORED
    }


def help_text(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as done:
        parse_args(argv)
    assert done.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # the wrapped lines as one


def test_every_help_lists_every_choice(capsys):
    sweep = help_text(capsys, ["sweep", "--help"])
    profiles = profile_names()
    assert {"budget", "paper", "flickr8k"} <= set(profiles)
    for name in profiles:
        assert f"{name}" in sweep.split("(choices: ")[-1], name
    options = sweep.split("options:", 1)[1]
    presets = options.split("--preset PRESET", 1)[1].split("--sweep SWEEP", 1)[0].replace("- ", "-")
    assert all(name in presets for name in preset_names()), presets
    for command in ("train", "check-config"):
        text = help_text(capsys, [command, "--help"]).replace("- ", "-").replace("_ ", "_")
        assert all(name in text for name in experiment_names()), command


def test_the_sweep_jobs_usage_names_the_script(capsys):
    with pytest.raises(SystemExit):
        sweep_cli(
            ["--help"], default_preset=DBL.DEFAULT_PRESET, preset_flags=DBL.PRESET_FLAGS, script="jobs/sweep_dbl.py"
        )
    assert capsys.readouterr().out.startswith("usage: jobs/sweep_dbl.py ")


def test_the_cluster_line_gives_a_relative_data_folder_as_an_absolute_path(tmp_path, monkeypatch):
    """The job runs in a copy of this folder without its git-ignored data/: a relative data folder would be made
    again in every job's copy. The last ``dataset.root`` given is the one made absolute; an absolute one stays."""
    monkeypatch.chdir(tmp_path)
    given = parse_args(sweep_argv(["--preset", "smoke", "x.y=1", "dataset.root=a", "dataset.root=data/b"]))
    words = cluster_command(given, "data/b")
    assert words[-3:] == ["x.y=1", "dataset.root=a", f"dataset.root={tmp_path / 'data' / 'b'}"]
    assert cluster_command(given, "/data/b")[-1] == "dataset.root=data/b"
    plain = parse_args(sweep_argv(["--preset", "smoke"]))
    assert cluster_command(plain, "data/synthetic/smoke")[-1] == f"dataset.root={tmp_path}/data/synthetic/smoke"
    assert cluster_command(plain)[-2] == "--storage"
