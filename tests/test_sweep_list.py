"""``jobs/sweep.py --list``: every preset with its paper, table or figure, trial count, profiles and the
time its dry run worked out; bad combinations are one line and exit 2."""

from __future__ import annotations

import re

import pytest

from conftest import sweep_dbl_cli
from itrlab.cli import sweep_cli
from itrlab.config.loader import config_dir
from itrlab.config.sweep import load_sweep
from itrlab.sweep.catalog import title_of
from itrlab.sweep.dry_run import shared_stages, train_pairs, trial_configs
from itrlab.train.throughput import record, training_shape
from test_profiles import dry_run


@pytest.mark.e2e
def test_list_names_every_preset_with_its_trials_and_the_time_its_dry_run_worked_out(tmp_path):
    spec = load_sweep("convse_table3")
    _, configs = trial_configs(spec, [])
    for config in [*configs, *shared_stages(configs)]:  # convse-table3's shapes measured at 2,500 pairs/s
        _, features, _ = train_pairs(config)
        record("cpu (2 threads)", training_shape(config, *features), 2500.0, tmp_path / "throughput.jsonl")

    fresh = dry_run(tmp_path, "--list")  # nothing worked out yet: every line says how to get its figure
    assert fresh.returncode == 0 and not fresh.stderr.strip(), fresh.stderr
    assert "about " not in fresh.stdout and "not worked out yet: --dry-run (or --list --estimate)" in fresh.stdout
    for args in (["convse-table3"], ["coder-table2"], ["coder-table2", "--profile", "paper"]):  # kept by their dry runs
        assert dry_run(tmp_path, "--dry-run", "--preset", *args).returncode == 0
    done = dry_run(tmp_path, "--list")
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr
    lines = {line.split()[0]: line for line in done.stdout.splitlines()[1:] if line.strip() and line[0] != " "}
    profiles, current = {}, None  # (preset, profile): its line; a preset's first line names its default profile
    for line in done.stdout.splitlines()[1:]:
        if line.strip() and not line.startswith("training time") and len(line.split()) > 2:
            current = line.split()[0] if line[0] != " " else current
            profiles[(current, line.split()[1] if line[0] != " " else line.split()[0])] = line
    for path in sorted((config_dir() / "sweeps").glob("*.yaml")):
        preset = path.stem.replace("_", "-")
        line = next((text for text in lines.values() if re.search(rf"(^|/ ){re.escape(preset)}\s", text)), None)
        assert line is not None, f"{preset} is not listed"
        sweep = load_sweep(path)
        trials = sweep.optuna.num_trials if sweep.optuna else len(sweep.grid_points())
        assert re.search(rf"\s{trials}\s", line), (preset, trials, line)
    # 15 trials of 10 epochs x 25,000 pairs at 2,500 pairs/s, one at a time: 25 min (the 3 base stages are
    # the VSE++ rows' training, kept as the stages: not trained again)
    assert "ConVSE Table III" in lines["convse-table3"] and " about 25 min of wall time" in lines["convse-table3"]
    assert "(measured)" in lines["convse-table3"]
    # every profile on its own line; never measured here: estimated from the FLOPs of one step, and marked so
    assert {("convse-table3", name) for name in ("budget", "paper", "flickr8k")} <= set(profiles)
    assert re.search(r"about [0-9.]+ (min|h) of wall time, [0-9.]+ CPU-hours \(estimated\)", lines["coder-table2"])
    assert re.search(r"GPU-hours \(estimated\)", profiles[("coder-table2", "paper")])
    assert (
        "DBL Table IV" in lines["dbl-table4"] and "dbl-table4 / table4 " in lines["dbl-table4"]
    )  # its short name beside


def test_help_points_to_the_list(capsys):
    with pytest.raises(SystemExit) as done:
        sweep_cli(["--help"])
    assert done.value.code == 0 and "--list" in capsys.readouterr().out


@pytest.mark.parametrize(
    "cli, args, named",
    [
        (sweep_cli, ["--list", "--preset", "coder-table2"], "--preset"),
        (sweep_cli, ["--list", "train.epochs=3"], "train.epochs=3"),
        (sweep_dbl_cli, ["--list", "--resume"], "--resume"),
        (sweep_dbl_cli, ["--list", "--profile", "paper"], "--profile"),
    ],
)
def test_list_with_other_flags_is_one_line_and_exit_2(cli, args, named, capsys):
    assert cli(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--list takes no other flags" in err and named in err, err


def test_a_title_splits_at_the_paper(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(
        "# CODER Table 2: components added one at a time to the BTR baseline (max of\n"
        "# hinges). Three seeds each, eq. 4 throughout.\nname: s\n"
    )
    assert title_of(path) == ("CODER Table 2", "components added one at a time to the BTR baseline (max of hinges)")
    assert title_of(path, width=20) == ("CODER Table 2", "components added on…")
    path.write_text("# A quick check of eq. 4: A against F.\nname: s\n")
    assert title_of(path) == ("-", "A quick check of eq. 4: A against F")
