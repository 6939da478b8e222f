"""Static checks of the source that no run-time test is sure to reach: pyflakes' errors (a name used
but never defined or imported, an undefined export, a syntax error) in the package, the jobs and the
tests. An unused import is left to review: it does not break a run."""

from __future__ import annotations

import io
from pathlib import Path

from pyflakes import api, messages
from pyflakes.reporter import Reporter

ROOT = Path(__file__).resolve().parents[1]
# the message kinds that are bugs, not style
ERRORS = (messages.UndefinedName, messages.UndefinedExport, messages.UndefinedLocal,
          messages.DuplicateArgument, messages.ReturnOutsideFunction, messages.YieldOutsideFunction,
          messages.ContinueOutsideLoop, messages.BreakOutsideLoop, messages.ImportStarUsed,
          messages.PercentFormatInvalidFormat, messages.StringDotFormatInvalidFormat)


class _Collect(Reporter):
    def __init__(self) -> None:
        super().__init__(io.StringIO(), io.StringIO())
        self.found: list[str] = []

    def flake(self, message) -> None:
        if isinstance(message, ERRORS):
            self.found.append(str(message))

    def syntaxError(self, filename, msg, lineno, offset, text) -> None:  # noqa: N802 - pyflakes' name
        self.found.append(f"{filename}:{lineno}: {msg}")


def test_no_undefined_names_or_syntax_errors():
    reporter = _Collect()
    api.checkRecursive([str(ROOT / "platform"), str(ROOT / "jobs"), str(ROOT / "tests")], reporter)
    assert reporter.found == [], "\n".join(reporter.found)


def test_the_check_finds_an_undefined_name(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    return check_tune_state(1)\n")
    reporter = _Collect()
    api.checkRecursive([str(bad)], reporter)
    assert any("check_tune_state" in line for line in reporter.found)
