"""Ruff, the linter and formatter that the fast tier runs (tests/test_static.py; its rules are ``[tool.ruff]`` in
pyproject.toml): a static tool that reads the source and starts nothing else, so the fast tier may run it.

It is the one program the fast tier starts: the tiers' source check skips this module
(``tier_scan.STATIC_TOOL_MODULES``) and conftest.py's run-time guard lets ``ruff`` through
(``STATIC_TOOLS``); anything else a test starts still needs ``@pytest.mark.e2e``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("platform", "jobs", "benchmarks", "tests")  # what `make lint` and the fast tier check


def ruff(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """``ruff ARGS`` from the virtual environment beside this Python (the ``dev`` extra pins it), no cache."""
    program = shutil.which("ruff", path=str(Path(sys.executable).parent))
    if program is None:
        pytest.fail(f"ruff is not installed beside {sys.executable}: run `make setup` (the dev extra pins it)")
    return subprocess.run([program, *args, "--no-cache"], cwd=cwd, capture_output=True, text=True, timeout=120)
