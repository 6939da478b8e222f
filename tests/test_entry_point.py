"""The README as the entry point: two commands from a fresh clone (the tests, the main job), under
120 lines, no undated figure, the preset table in docs/presets.md; `make sweep`; and a job started with a
Python that lacks itrlab says how to start it (jobs/_bootstrap.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from itrlab.config.sweep import sweep_presets

README = REPO / "README.md"
JOB_FILES = sorted(path for path in (REPO / "jobs").glob("[!_]*.py"))
# the benchmarks' scripts start as the jobs do (benchmarks/_bootstrap.py runs jobs/_bootstrap.py)
BENCHMARK_FILES = sorted(
    path for path in (REPO / "benchmarks").glob("[!_]*.py") if 'if __name__ == "__main__":' in path.read_text()
)
# a figure a reader could take for a measurement: a count of tests, a duration, a share
FIGURE = re.compile(r"\b\d[\d,.]*\s*(?:tests|min|minutes|s|sec|seconds|h|hours|x)(?![\w-])")


def first_block(text: str) -> list[str]:
    block = text.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.strip().splitlines()]


def test_the_readme_is_an_entry_point_of_two_commands_under_120_lines():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < 120
    assert first_block(text) == ["make test", "make sweep"]
    assert "docs/presets.md" in text and "| `dbl-table4` |" not in text  # the preset table lives in docs/


def test_the_readme_holds_no_undated_figure():
    """Figures only with their date and machine, or not at all: the README now holds none."""
    prose = re.sub(r"```.*?```", "", README.read_text(encoding="utf-8"), flags=re.S)
    assert not FIGURE.findall(prose), FIGURE.findall(prose)


def test_every_preset_is_in_the_presets_page():
    page = (REPO / "docs" / "presets.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| [^|]+ \| `([a-z0-9-]+)` \|", page, flags=re.M))
    assert listed == {name for name, stem in sweep_presets().items() if name == stem.replace("_", "-")}


def test_every_job_checks_its_python_before_it_imports_itrlab():
    assert len(BENCHMARK_FILES) == 8, BENCHMARK_FILES
    for path in [*JOB_FILES, *BENCHMARK_FILES]:
        imports = [
            line
            for line in path.read_text().splitlines()
            if re.match(r"(import|from) ", line) and not line.startswith("from __future__")
        ]
        assert imports[0].startswith("import _bootstrap"), path.name


def test_the_line_for_a_python_without_itrlab_gives_the_command_that_starts_the_job(tmp_path, monkeypatch):
    import _bootstrap

    assert _bootstrap.missing_modules() == []  # this python runs the tests: it has all
    monkeypatch.setattr(sys, "argv", ["jobs/sweep_dbl.py", "--preset", "smoke"])
    monkeypatch.chdir(REPO)
    venv_python = REPO / ".venv" / "bin" / "python"
    made = _bootstrap.how_to_start("jobs/sweep_dbl.py", ["itrlab"], "/usr/bin/python3", tmp_path / "none")
    assert made == (
        "jobs/sweep_dbl.py: this python (/usr/bin/python3) cannot import itrlab; create the project's "
        f"venv first (`make setup`), then run: {tmp_path / 'none'} jobs/sweep_dbl.py --preset smoke"
    )
    fake = tmp_path / "venv" / "bin" / "python"
    fake.parent.mkdir(parents=True)
    fake.touch()
    assert _bootstrap.how_to_start("jobs/sweep_dbl.py", ["itrlab", "torch"], "/usr/bin/python3", fake).endswith(
        f"cannot import itrlab, torch; start it with the project's venv: {fake} jobs/sweep_dbl.py --preset smoke "
        f"(or `. {fake.parent}/activate` once per shell)"
    )
    assert _bootstrap.VENV_PYTHON == venv_python


@pytest.mark.e2e
@pytest.mark.parametrize("job", ["jobs/sweep_dbl.py", "jobs/train.py", "benchmarks/train.py"])
def test_a_job_started_without_the_venv_says_how_to_start_it(job, tmp_path):
    """The job (or a benchmark) under a Python that cannot import itrlab (the venv's, without its site-packages):
    one line, exit 2."""
    done = subprocess.run(
        [sys.executable, "-E", "-s", "-S", str(REPO / job), "--preset", "smoke"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2 and done.stdout == "", done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"{REPO / job}: this python ({sys.executable}) cannot import itrlab")
    assert f"{job} --preset smoke" in line


@pytest.mark.e2e
def test_make_sweep_runs_the_smoke_sweep_in_the_venv_after_its_set_up(tmp_path):
    venv = Path(sys.executable).parent.parent
    # --no-print-directory: under an outer make (make test-all) a nested one prints "Leaving directory" last
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "sweep", f"VENV={venv}"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[-1] == f"{venv}/bin/python jobs/sweep_dbl.py --preset smoke"
    assert "\nsweep: setup\n" in (REPO / "Makefile").read_text()  # the venv set up first
    dry = subprocess.run(
        ["make", "--no-print-directory", "-n", "sweep", f"VENV={venv}", "SWEEP_ARGS=--preset smoke --dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert dry.stdout.strip().splitlines()[-1].endswith("jobs/sweep_dbl.py --preset smoke --dry-run")
