"""Every third-party module the package, the jobs, the benchmarks and the tests import is declared in pyproject.toml:
deptry (``[tool.deptry]``) reads the imports and the declarations; a module installed only because another package
pulls it in today (matplotlib came with MLflow) fails here, not on a user's machine when that package drops
it."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from deptry.cli import cli as deptry_cli

ROOT = Path(__file__).resolve().parents[1]


def _deptry(root: Path, monkeypatch, caplog) -> tuple[int, str]:
    """``deptry .`` in ``root``, in this process (its command, not a program started: the fast tier starts
    none): its exit status and its report's lines."""
    monkeypatch.chdir(root)
    caplog.clear()
    with caplog.at_level(logging.INFO), pytest.raises(SystemExit) as exited:
        deptry_cli.main(args=[".", "--no-ansi"], standalone_mode=False)
    return int(exited.value.code or 0), "\n".join(record.getMessage() for record in caplog.records)


def test_every_import_is_declared(monkeypatch, caplog):
    status, report = _deptry(ROOT, monkeypatch, caplog)
    assert status == 0, report


def test_an_undeclared_import_is_found(tmp_path, monkeypatch, caplog):
    """The project's own configuration, over a package that imports an installed but undeclared module
    (flask, which MLflow brings), fails: the check is not vacuous."""
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    package = tmp_path / "platform" / "itrlab"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("import numpy\nimport flask\n")
    status, report = _deptry(tmp_path, monkeypatch, caplog)
    assert status != 0 and "'flask' imported but it is a transitive dependency" in report, report
