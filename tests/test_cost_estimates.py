"""One estimate of a sweep's cost: ``--dry-run`` and ``--list`` print the same figure for every preset
and profile, an estimate that cannot be made says why in one sentence (no exception's text), a dry run before
the features exist estimates from their declared shape, and ``--list`` answers from what it kept."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from itrlab.cli import sweep_cli
from itrlab.config.loader import config_dir
from itrlab.config.sweep import load_sweep, sweep_presets

EXCEPTION_TEXT = re.compile(r"\b\w*(Error|Exception)\b|Traceback|object at pos")


@pytest.fixture
def records(tmp_path, monkeypatch):
    """A throughput record and an estimates cache of the test's own (the step counts stay shared)."""
    monkeypatch.setenv("ITRLAB_THROUGHPUT", str(tmp_path / "throughput.jsonl"))
    monkeypatch.setenv("ITRLAB_ESTIMATES", str(tmp_path / "estimates.json"))
    return tmp_path


def dry_run_lines(capsys, *args: str) -> list[str]:
    assert sweep_cli(["--dry-run", *args]) == 0
    out = capsys.readouterr().out
    return [line.strip() for line in out.splitlines() if line.strip().startswith("G = ")]


@pytest.mark.slow  # every preset under every profile: about 2 CPU-minutes of counted steps on a first run
def test_every_preset_and_profile_prints_the_same_estimate_in_dry_run_and_list(records, capsys):
    assert sweep_cli(["--list", "--estimate"]) == 0
    listing = capsys.readouterr().out
    rows, preset = {}, None
    for line in listing.splitlines()[1:]:
        if not line.strip() or line.startswith("training time here"):
            break
        cells = (
            re.split(r"\s{2,}", line.strip())
            if not line.startswith(" ")
            else [preset, *re.split(r"\s{2,}", line.strip())]
        )
        preset = cells[0]
        rows[(preset.split(" / ")[0], cells[1])] = line
    files = {stem for stem in sweep_presets().values()}
    expected = {(stem.replace("_", "-"), profile) for stem in files for profile in _profiles(stem) or ["-"]}
    assert set(rows) == expected
    for (name, profile), line in sorted(rows.items()):
        assert not EXCEPTION_TEXT.search(line), line
        spec = load_sweep(sweep_presets()[name], None if profile == "-" else profile)
        lines = dry_run_lines(capsys, "--preset", name, *(["--profile", profile] if profile != "-" else []))
        figure = next(text for text in lines if text.startswith(f"G = {spec.group} "))
        shown = re.search(r"\): (about [^;]+?-hours|no estimate: [^;]+\.)", figure).group(1)
        assert shown in line, (name, profile, figure, line)
        assert not any(EXCEPTION_TEXT.search(text) for text in lines), lines


def _profiles(stem: str) -> list[str]:
    from itrlab.config.loader import read_yaml

    return list(read_yaml(config_dir() / "sweeps" / f"{stem}.yaml", "sweep").get("profiles") or {})


def test_a_dry_run_before_the_features_exist_estimates_from_their_declared_shape(records, capsys, tmp_path):
    """coder-table2's flickr8k profile printed "no estimate … (TypeError: empty(): argument 'size' …" cut
    mid-message before extraction; now its figure comes from configs/datasets/shapes/flickr8k_precomp.yaml."""
    absent = tmp_path / "not-extracted" / "pool1x1"
    lines = dry_run_lines(capsys, "--preset", "coder-table2", "--profile", "flickr8k", f"dataset.root={absent}")
    assert lines[0].startswith("G = 1 (one trial per process): about ") and "CPU-hours; estimated" in lines[0], lines
    # the same shape as the extracted layout: the same figure as with the data here, where it is
    present = REPO / "data" / "flickr8k_precomp" / "pool1x1"
    if present.is_dir():
        here = dry_run_lines(capsys, "--preset", "coder-table2", "--profile", "flickr8k")
        assert here[0].split(";")[0] == lines[0].split(";")[0]


def test_an_estimate_that_cannot_be_made_says_why_in_one_sentence(records, capsys, tmp_path):
    lines = dry_run_lines(capsys, "--preset", "vsepp-flickr8k", f"dataset.root={tmp_path / 'elsewhere' / 'grid7'}")
    assert lines == [
        "G = 1 (one trial per process): no estimate: the region features of flickr8k_precomp are not "
        "here and no shape is declared for grid7 (configs/datasets/shapes/flickr8k_precomp.yaml)."
    ]


def test_the_declared_shapes_are_those_of_the_extracted_features_where_they_are_here():
    from itrlab.config.loader import read_yaml
    from itrlab.data.precomp import inspect_precomp

    shapes = sorted((config_dir() / "datasets" / "shapes").glob("*.yaml"))
    assert shapes
    checked = 0
    for path in shapes:
        shape = read_yaml(path, "data shape")
        dataset = read_yaml(config_dir() / "datasets" / path.name, "dataset")
        grid = (REPO / dataset["root"]).parent
        for layout, regions in shape["regions"].items():
            folder = grid if layout == grid.name else grid / layout
            if (folder / f"{dataset['splits']['train']}_ims.npy").is_file():
                info = inspect_precomp(folder, dataset["splits"]["train"], None)
                assert (info.n_regions, info.feature_dim) == (regions, shape["feature_dim"]), folder
                checked += 1
    if not checked:
        pytest.skip("no extracted features here (data/flickr8k_precomp: docs/data.md#flickr8k)")


@pytest.mark.e2e  # --list commands in subprocesses, on a configs folder of two presets
def test_list_answers_from_what_it_kept_without_torch_and_estimate_follows_a_new_measurement(tmp_path):
    import shutil

    configs = tmp_path / "configs"
    shutil.copytree(REPO / "configs", configs, ignore=shutil.ignore_patterns("sweeps"))
    (configs / "sweeps").mkdir()
    for stem in ("dbl_tiny", "coder_tiny"):
        shutil.copy(REPO / "configs" / "sweeps" / f"{stem}.yaml", configs / "sweeps")
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "OMP_NUM_THREADS": "1",
        "HOME": str(tmp_path),
        "ITRLAB_CONFIG_DIR": str(configs),
        "ITRLAB_THROUGHPUT": str(tmp_path / "bench" / "throughput.jsonl"),
        "PYTHONPATH": str(REPO / "platform"),
    }

    def listing(*flags: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-X", "importtime", str(REPO / "jobs" / "sweep.py"), "--list", *flags],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=tmp_path,
            env=env,
        )

    fresh = listing()  # nothing kept: names, trials, and no step counted
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    assert not re.search(r"\|\s+torch$", fresh.stderr, re.M)
    # one line per preset (neither has profiles)
    assert fresh.stdout.count("not worked out yet: --dry-run (or --list --estimate)") == 2
    first, second = listing("--estimate"), listing()
    assert first.returncode == 0 and second.returncode == 0, first.stderr[-2000:] + second.stderr[-2000:]
    assert re.search(r"\|\s+torch$", first.stderr, re.M)  # worked out: the method layer counts the steps
    assert not re.search(r"\|\s+torch$", second.stderr, re.M)  # kept: no torch, nothing counted
    assert first.stdout == second.stdout and "(estimated)" in first.stdout
    assert (tmp_path / "bench" / "estimates.json").is_file()

    from itrlab.train.throughput import record

    shape = "vsepp 6x32 embed32 bigru16 batch32 fp32 oss x2"  # dbl-tiny's F row; its A row stays estimated
    record("cpu (1 threads)", shape, 1000.0, tmp_path / "bench" / "throughput.jsonl")
    third = listing("--estimate")
    line = next(text for text in third.stdout.splitlines() if text.startswith("dbl-tiny"))
    assert "(part measured)" in line, third.stdout


@pytest.mark.e2e  # the whole catalogue worked out in a fresh interpreter with no step counted yet
def test_the_shipped_step_counts_hold_every_preset_so_a_fresh_clone_counts_none(tmp_path):
    from itrlab.train.flops import SHIPPED_COUNTS

    counts = tmp_path / "step_counts.json"
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "OMP_NUM_THREADS": "1",
        "HOME": str(tmp_path),
        "ITRLAB_CONFIG_DIR": str(REPO / "configs"),
        "ITRLAB_THROUGHPUT": str(tmp_path / "throughput.jsonl"),
        "ITRLAB_ESTIMATES": str(tmp_path / "estimates.json"),
        "ITRLAB_STEP_COUNTS": str(counts),
        "PYTHONPATH": str(REPO / "platform"),
    }
    done = subprocess.run(
        [sys.executable, str(REPO / "jobs" / "sweep.py"), "--list", "--estimate"],
        capture_output=True,
        text=True,
        timeout=1200,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert not counts.exists(), (
        f"steps counted that {SHIPPED_COUNTS.name} lacks: make it again (docs/speed.md#how-a-sweeps-cost-is-estimated)"
    )
