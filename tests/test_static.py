"""Static checks of the source, in the fast tier: ruff's lint rules (pycodestyle, pyflakes' names used but never
defined, import order, bugbear, pyupgrade) and its formatter over the package, the jobs, the benchmarks and the
tests, as ``[tool.ruff]`` in pyproject.toml configures them (``make lint`` runs the same; ``make format`` rewrites)."""

from __future__ import annotations

from lint_tools import ROOT, SOURCES, ruff


def test_ruff_check_passes():
    result = ruff("check", *SOURCES)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format_check_passes():
    result = ruff("format", "--check", *SOURCES)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_lint_finds_an_undefined_name(tmp_path):
    """The project's rules report a name used but never defined (a NameError no test reached): not vacuous."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    return check_tune_state(1)\n")
    result = ruff("check", "--config", str(ROOT / "pyproject.toml"), str(bad))
    assert result.returncode == 1 and "F821" in result.stdout and "check_tune_state" in result.stdout, result.stdout


def test_the_format_check_finds_unformatted_code(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("x = {  'a':1 }\n")
    result = ruff("format", "--check", "--config", str(ROOT / "pyproject.toml"), str(bad))
    assert result.returncode == 1 and "bad.py" in result.stdout + result.stderr, result.stdout + result.stderr
