"""The dated page of the documented trainings (docs/results/<date>-documented-trainings.md): one row per command
of :func:`documented.catalogue.catalogue` with its run here (the date and the machine's load, its wall
time, its test rsum, a random model's 95% range on its test protocol, and the verdict its last lines gave) or the
reason it was not run. Written by ``jobs/check_documented_trainings.py``, read back by the fast tier.

A verdict is :data:`OFF_CHANCE` (the run printed neither "at chance" nor "on its plateau"), the verdicts it
printed (:data:`AT_CHANCE`, :data:`ON_PLATEAU`, both joined by ``; ``), ``failed: ...`` (its exit status and
last line), ``not run: <reason>``, or ``as: <command>`` (a make target: the result of the command it runs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from itrlab.report.escape import md_cell

SUFFIX = "-documented-trainings.md"
OFF_CHANCE, AT_CHANCE, ON_PLATEAU = "off chance", "at chance", "on its plateau"
NOT_RUN, FAILED, ALIAS = "not run: ", "failed: ", "as: "
COLUMNS = ("command", "shown in", "measured", "wall", "test rsum", "random model (95%)", "verdict")
_DATE = re.compile(r"^(\d{4}-\d{2}-\d{2})" + re.escape(SUFFIX) + "$")
_UNESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")  # md_cell's backslash before ASCII punctuation
_CELLS = re.compile(r"(?<!\\)\|")


@dataclass(frozen=True)
class Entry:
    """One documented command's row: ``measured`` (the date and load average of its run; None when not run),
    ``wall_s``, ``test_rsum`` (a sweep's: its lowest trial's), ``chance`` (a random model's 95% range of rsum on
    its test protocol) and ``verdict``."""

    command: str
    pages: tuple[str, ...]
    verdict: str
    measured: str | None = None
    wall_s: float | None = None
    test_rsum: float | None = None
    chance: tuple[float, float] | None = None

    @property
    def off_chance(self) -> bool:
        """Whether its run ended with a model above chance and a loss that left its plateau."""
        return self.verdict == OFF_CHANCE

    @property
    def reason(self) -> str | None:
        """Why it was not run here (None: it was run, or is a make target's alias)."""
        return self.verdict[len(NOT_RUN) :] if self.verdict.startswith(NOT_RUN) else None

    @property
    def alias_of(self) -> str | None:
        return self.verdict[len(ALIAS) :] if self.verdict.startswith(ALIAS) else None

    def shown_in(self, pages: tuple[str, ...]) -> Entry:
        return replace(self, pages=pages)


def duration(seconds: float) -> str:
    """``2 min 5 s``, ``1 h 3 min``, ``41 s``."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min" + (f" {seconds % 60} s" if seconds % 60 else "")
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


def parse_duration(text: str) -> float | None:
    """Seconds of :func:`duration`'s words, or of an estimate's (``1.18 h``, ``7 min``)."""
    units = {"h": 3600, "min": 60, "s": 1}
    found = re.findall(r"(\d+(?:\.\d+)?) (h|min|s)\b", text)
    return float(sum(float(n) * units[u] for n, u in found)) if found else None


def row(entry: Entry) -> str:
    command = "`" + entry.command.replace("|", "\\|") + "`"  # no command the pages show holds a backtick
    chance = f"{entry.chance[0]:.1f} to {entry.chance[1]:.1f}" if entry.chance else "-"
    cells = [
        command,
        ", ".join(entry.pages),
        entry.measured or "-",
        duration(entry.wall_s) if entry.wall_s is not None else "-",
        f"{entry.test_rsum:.1f}" if entry.test_rsum is not None else "-",
        chance,
        entry.verdict,
    ]
    return "| " + " | ".join([cells[0], *(md_cell(c) for c in cells[1:])]) + " |"


def render(date: str, preamble: str, entries: list[Entry]) -> str:
    """The page: a title, ``preamble`` (Markdown: how it was made, the machine) and the table."""
    head = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    return "\n".join([f"# Documented trainings, {date}", "", preamble.strip(), "", *head, *map(row, entries)]) + "\n"


def _cell(text: str) -> str:
    return _UNESCAPE.sub(r"\1", text.strip())


def read_page(text: str) -> list[Entry]:
    """The entries of a page :func:`render` wrote."""
    entries = []
    for line in text.splitlines():
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in _CELLS.split(line.strip()[1:-1])]
        if len(cells) != len(COLUMNS):
            raise ValueError(f"a row of {len(cells)} cells, not {len(COLUMNS)}: {line}")
        command, pages, measured, wall, rsum, chance, verdict = cells
        low_high = re.findall(r"-?\d+(?:\.\d+)?", chance)
        entries.append(
            Entry(
                command.strip("`").replace("\\|", "|"),
                tuple(p.strip() for p in _cell(pages).split(",") if p.strip()),
                _cell(verdict),
                None if measured == "-" else _cell(measured),
                parse_duration(wall),
                None if rsum == "-" else float(rsum),
                (float(low_high[0]), float(low_high[1])) if len(low_high) == 2 else None,
            )
        )
    return entries


def page_path(folder: Path, date: str) -> Path:
    return folder / f"{date}{SUFFIX}"


def newest_page(folder: Path) -> Path | None:
    """The newest documented-trainings page of ``folder`` (None: there is none)."""
    dated = sorted((m.group(1), path) for path in folder.glob(f"*{SUFFIX}") for m in [_DATE.match(path.name)] if m)
    return dated[-1][1] if dated else None
