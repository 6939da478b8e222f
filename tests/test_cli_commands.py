"""The commands as users type them: every subcommand's and job's --help, make-synthetic, and each
training and sweep command the README and docs/ show, checked on the tiny synthetic data."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import REPO
from documented.catalogue import documented_lines
from itrlab.cli import main
from itrlab.config.sweep import sweep_presets

ITRLAB = str(Path(sys.executable).parent / "itrlab")
SUBCOMMANDS = ["train", "check-config", "sweep", "make-synthetic", "report", "claims", "data"]
JOBS = sorted(path.name for path in (REPO / "jobs").glob("[!_]*.py"))  # _bootstrap.py: what each job imports first
# the benchmarks' scripts, not the modules they share (common.py ...)
BENCHMARK_SCRIPTS = sorted(
    path.name for path in (REPO / "benchmarks").glob("[!_]*.py") if 'if __name__ == "__main__":' in path.read_text()
)


def run(*command: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        list(command),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd or REPO,
        env={
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
            "OMP_NUM_THREADS": "1",
            "HOME": tempfile.gettempdir(),
            "ITRLAB_CONFIG_DIR": str(REPO / "configs"),
        },
    )


@pytest.mark.e2e
@pytest.mark.parametrize("subcommand", SUBCOMMANDS)
def test_every_subcommand_has_help(subcommand):
    result = run(ITRLAB, subcommand, "--help")
    assert result.returncode == 0 and result.stdout.startswith(f"usage: itrlab {subcommand}"), result.stderr


@pytest.mark.e2e
@pytest.mark.parametrize("job", JOBS)
def test_every_job_has_help(job):
    result = run(sys.executable, f"jobs/{job}", "--help")
    assert result.returncode == 0 and result.stdout.startswith("usage:"), result.stderr[-2000:]


@pytest.mark.e2e
@pytest.mark.parametrize("script", BENCHMARK_SCRIPTS)
def test_every_benchmark_has_help(script):
    result = run(sys.executable, f"benchmarks/{script}", "--help")
    assert result.returncode == 0 and result.stdout.startswith("usage:"), result.stderr[-2000:]


@pytest.mark.e2e
def test_make_synthetic_as_documented(tmp_path):
    result = run(ITRLAB, "make-synthetic", "--size", "tiny", "--out", str(tmp_path / "tiny"))
    assert result.returncode == 0, result.stderr
    assert {"train_ims.npy", "dev_caps.txt", "test_ims.npy", "synthetic.json"} <= {
        p.name for p in (tmp_path / "tiny").iterdir()
    }
    bad = run(ITRLAB, "make-synthetic", "--size", "huge", "--out", str(tmp_path / "huge"))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    knob = run(ITRLAB, "make-synthetic", "--size", "tiny", "--out", str(tmp_path / "x"), "--n-train", "0")
    assert knob.returncode == 2 and knob.stderr.strip().splitlines()[-1].startswith("itrlab: error:"), knob.stderr


@pytest.mark.e2e
def test_a_loss_the_method_cannot_feed_is_one_line_and_exit_2():
    result = run(ITRLAB, "check-config", "-c", "mvn_synthetic_small", "loss.name=ascl")
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("itrlab: error: config error at 'loss.name'") and "i2t_generated_neg" in line


def documented_commands(pattern: str) -> list[str]:
    """The shell lines of the README's and docs/' code blocks that run ``pattern`` (comments dropped), as
    documented.catalogue reads them."""
    return [line for _, line in documented_lines(REPO) if re.search(pattern, line)]


TRAININGS = [
    line
    for line in documented_commands(r"(jobs/train\.py|itrlab (train|check-config))")
    if "--resume" not in line and "--run-dir" not in line
]


def test_the_docs_show_training_commands():
    assert len(TRAININGS) >= 8


@pytest.mark.parametrize("line", TRAININGS)
def test_every_documented_training_command_names_a_valid_config(line):
    """Its experiment and overrides pass the assembly (the data is checked where it is the user's own; a data set
    config of the reader's own photos, which their extraction writes, stands in as the tiny synthetic data set:
    tests/test_own_photos.py runs the extraction and that command)."""
    words = shlex.split(line)
    start = next(i for i, w in enumerate(words) if w.endswith("train.py") or w in ("train", "check-config")) + 1
    args = [
        "defaults.dataset=synthetic_tiny" if w.startswith("defaults.dataset=") and w.endswith(".yaml") else w
        for w in words[start:]
        if not w.startswith("dataset.root=")
    ]
    refused = "refused" in line or "init_tau=0.001" in line  # the docs' own example of a refusal
    code = main(["check-config", "--no-data", *args])
    assert code == (2 if refused else 0), line


PRESETS = sorted(
    {m.group(1) for line in documented_commands(r"--preset") for m in [re.search(r"--preset (\S+)", line)] if m}
)


@pytest.mark.parametrize("preset", PRESETS)
def test_every_documented_preset_exists(preset):
    assert preset in sweep_presets(), preset


@pytest.mark.e2e
def test_the_documented_demo_runs_on_tiny_data(tmp_path):
    result = run(
        sys.executable,
        str(REPO / "jobs" / "train.py"),
        "-c",
        "vsepp_synthetic_tiny",
        "tracking.enabled=false",
        f"dataset.root={tmp_path / 'data'}",
        f"output.dir={tmp_path / 'runs'}",
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "test, best checkpoint" in result.stdout and list((tmp_path / "runs").rglob("test_recall.json"))
