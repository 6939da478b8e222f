"""``benchmarks/train.py --against REVISION``: the same benchmark on the library of a git revision, in the same run.

The subprocess side runs against this checkout's HEAD (a clean clone has one), on the tiny synthetic data.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import BENCHMARKS, REPO, benchmark
from itrlab.errors import UserInputError

revision = benchmark("revision")
library_at, library_env, resolve_revision = revision.library_at, revision.library_env, revision.resolve_revision
bench_cli = benchmark("train").main

PARTS = ("train step (floor, s)", "epoch (s)", "epoch start: set_epoch (s)", "test evaluation (s)")


def head() -> str:
    return subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()


@pytest.mark.e2e
def test_the_library_of_a_revision_is_that_commits_package_under_this_checkouts_benchmark():
    commit = resolve_revision(REPO, "HEAD")
    assert commit == head() and len(commit) == 40
    with library_at(REPO, commit) as platform:
        shown = subprocess.run(
            ["git", "-C", str(REPO), "show", f"{commit}:platform/itrlab/train/loop.py"], capture_output=True, text=True
        ).stdout
        assert (platform / "itrlab" / "train" / "loop.py").read_text() == shown
        # the benchmark that runs there is this checkout's, over the revision's itrlab
        assert revision.SCRIPT == BENCHMARKS / "train.py" and revision.SCRIPT.is_file()
        found = subprocess.run(
            [sys.executable, "-c", "import common, itrlab; print(common.__file__); print(itrlab.__file__)"],
            cwd=BENCHMARKS,
            env=library_env(platform),
            capture_output=True,
            text=True,
        ).stdout.split()
        assert found == [str(BENCHMARKS / "common.py"), str(platform / "itrlab" / "__init__.py")], found
    assert not platform.exists()  # a temporary folder, gone after use


@pytest.mark.e2e
def test_against_head_prints_each_parts_ratio_and_records_only_this_codes_throughput(
    tmp_path, tiny_root, monkeypatch, capsys
):
    throughput = tmp_path / "throughput.jsonl"
    monkeypatch.setenv("ITRLAB_THROUGHPUT", str(throughput))
    out = tmp_path / "bench.json"
    argv = ["-c", "coder_synthetic_tiny", "--epochs", "2", "--max-steps", "2", "--floor-steps", "2", "--warmup", "1"]
    status = bench_cli([*argv, "--evaluate", "--against", "HEAD", "--json", str(out), f"dataset.root={tiny_root}"])
    printed = capsys.readouterr().out
    assert status == 0, printed
    table = printed[printed.index("this code") :]
    for part in PARTS:
        assert part in table
    report = json.loads(out.read_text())
    assert report["against"]["commit"] == head()
    for side in (report["run"], report["against"]):
        summary = side["summary"]
        assert summary["floor_step_seconds"] > 0 and summary["evaluation_seconds"] > 0
        assert summary["epoch_start_seconds"] > 0  # PGC reclusters before epoch 2
    assert len(throughput.read_text().splitlines()) == 1  # the revision's side records nothing


@pytest.mark.e2e
def test_an_unknown_revision_is_one_line_before_anything_is_timed(capsys):
    with pytest.raises(UserInputError, match="not a commit"):
        resolve_revision(REPO, "no-such-revision")
    assert bench_cli(["-c", "vsepp_synthetic_tiny", "--against", "no-such-revision"]) == 2
    captured = capsys.readouterr()
    assert "no-such-revision" in captured.err and "bench_train:" not in captured.out


def test_against_does_not_combine_with_busy_or_baseline(capsys):
    for extra in (["--busy", "1"], ["--baseline", "vse_synthetic_small"]):
        with pytest.raises(SystemExit) as stopped:
            bench_cli(["--against", "HEAD", *extra])
        assert stopped.value.code == 2
        assert "--against" in capsys.readouterr().err
