"""Every command the manual shows that trains: read from the shell blocks (```bash, ```sh, ```shell or a bare
fence) of README.md and every page under docs/.

A shell line is one command: a line ending in ``\\`` goes on in the next, a `` #`` starts its comment, a leading
``$ `` (a prompt, in a block that shows output) is dropped and runs of blanks are one. A command *trains* when it
runs

* ``jobs/train.py`` (``python jobs/train.py ...``) or ``itrlab train``: a **training**;
* a sweep job (``jobs/sweep.py``, ``jobs/sweep_dbl.py``) or ``itrlab sweep`` without ``--dry-run``, ``--list`` or
  ``--help``: a **sweep**;
* a make target whose recipe (read from the Makefile) runs one of those: ``make train``, ``make sweep``;
* one of those behind ``--`` of another program (``ray job submit ... -- python jobs/sweep_dbl.py ...``): it
  trains where that program sends it.

Benchmarks (``benchmarks/*.py``) time steps and keep no model; ``check-config``, the extraction and ``--resume``
of nothing train nothing new (``--resume`` is listed: the check says what it continues).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

SHELL_FENCES = ("bash", "sh", "shell", "")
TRAINING, SWEEP = "training", "sweep"
NOT_TRAINING = ("--dry-run", "--list", "--help", "-h")  # a sweep job's flags that train nothing
_SWEEP_JOB = re.compile(r"(^|/)jobs/sweep(_[a-z0-9]+)?\.py$")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")  # VAR=value before a program
_MAKE_VAR = re.compile(r"^([A-Z_]+)\s*\?=\s*(.*)$")


@dataclass(frozen=True)
class Command:
    """One documented command that trains: ``text`` as the pages show it (blanks normalised), ``kind``
    (:data:`TRAINING` or :data:`SWEEP`), the pages (relative to the checkout) that show it, ``runs``: the
    command a make target runs (None for any other), ``through``: the program a command is handed to (``ray job
    submit``; None when it runs here as typed)."""

    text: str
    kind: str
    pages: tuple[str, ...]
    runs: str | None = None
    through: str | None = None

    @property
    def words(self) -> list[str]:
        return split(self.text)


def split(line: str) -> list[str]:
    """A shell line's words (shell quoting; a line shlex cannot split is split at blanks)."""
    try:
        return shlex.split(line)
    except ValueError:
        return line.split()


def shell_blocks(text: str) -> list[str]:
    """The fenced code blocks of Markdown ``text`` that hold shell commands."""
    blocks, current, fence = [], None, None
    for line in text.splitlines():
        stripped = line.strip()
        if current is None and stripped.startswith("```"):
            fence, current = stripped[3:].strip(), []
        elif current is not None and stripped.startswith("```"):
            if fence in SHELL_FENCES:
                blocks.append("\n".join(current))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def shell_lines(block: str) -> list[str]:
    """A shell block's commands, one a line: continuations joined, comments and prompts dropped."""
    lines = []
    for line in block.replace("\\\n", " ").splitlines():
        line = line.split(" #", 1)[0].strip()
        if line.startswith("$ "):
            line = line[2:]
        if line and not line.startswith("#"):
            lines.append(" ".join(line.split()))
    return lines


def manual_pages(repo: Path) -> list[Path]:
    """README.md and every Markdown page under docs/, in a fixed order."""
    return [repo / "README.md", *sorted((repo / "docs").rglob("*.md"))]


def documented_lines(repo: Path) -> list[tuple[str, str]]:
    """(page relative to ``repo``, command) for every shell line of the manual, in page order."""
    return [
        (str(page.relative_to(repo)), line)
        for page in manual_pages(repo)
        for block in shell_blocks(page.read_text(encoding="utf-8"))
        for line in shell_lines(block)
    ]


def make_recipes(makefile: str) -> dict[str, str]:
    """Each make target's one-line recipe, its variables filled in from their ``?=`` defaults and ``$(PY)`` (the
    venv's Python) read as ``python``: ``{"train": "python jobs/train.py", ...}``."""
    variables = {
        name: value.strip() for name, value in (m.groups() for m in map(_MAKE_VAR.match, makefile.splitlines()) if m)
    }
    variables["PY"] = "python"
    recipes, target = {}, None
    for line in makefile.splitlines():
        head = re.match(r"^([a-z][a-z0-9_-]*):", line)
        if head:
            target = head.group(1)
        elif not line.startswith("\t"):  # a recipe ends at the first line not indented by a tab
            target = None
        elif target and not line.strip().startswith("#"):  # its first command (an @-line runs a shell script)
            text = re.sub(r"\$\((\w+)\)", lambda m: variables.get(m.group(1), m.group(0)), line.strip())
            recipes.setdefault(target, " ".join(text.split()))
    return {target: text for target, text in recipes.items() if not text.startswith("@")}


def program_start(words: list[str]) -> int:
    """The index of a shell line's program: its first word that is not an environment assignment (``VAR=value``)."""
    return next((i for i, w in enumerate(words) if not _ENV.match(w)), len(words))


def kind_of(words: list[str]) -> str | None:
    """:data:`TRAINING`, :data:`SWEEP` or None for the command of ``words`` (environment assignments first)."""
    words = words[program_start(words) :]
    if len(words) < 2:
        return None
    program, rest = words[0], words[1:]
    if Path(program).name.startswith("python"):
        script, rest = rest[0], rest[1:]
        found = TRAINING if script.endswith("jobs/train.py") else SWEEP if _SWEEP_JOB.search(script) else None
    elif Path(program).name == "itrlab":
        found, rest = {"train": TRAINING, "sweep": SWEEP}.get(rest[0]), rest[1:]
    else:
        return None
    if found == SWEEP and any(flag in rest for flag in NOT_TRAINING):
        return None
    return found


def classify(line: str, recipes: dict[str, str]) -> tuple[str, str | None, str | None] | None:
    """(kind, the command a make target runs, the program it goes through) for a shell line, None for a line
    that trains nothing."""
    words = split(line)
    kind = kind_of(words)
    if kind is not None:
        return kind, None, None
    if words[:1] == ["make"]:
        targets = [w for w in words[1:] if not w.startswith("-") and "=" not in w]
        recipe = recipes.get(targets[0]) if len(targets) == 1 else None
        found = kind_of(split(recipe)) if recipe else None
        return (found, recipe, None) if found else None
    if "--" in words:
        inner = words[words.index("--") + 1 :]
        found = kind_of(inner)
        if found:
            start = program_start(words)
            program = " ".join(w for w in words[start : start + 3] if not w.startswith("-"))
            return found, None, program
    return None


def catalogue(repo: Path) -> list[Command]:
    """Every documented command that trains, once, with every page that shows it (first shown first)."""
    makefile = repo / "Makefile"
    recipes = make_recipes(makefile.read_text(encoding="utf-8")) if makefile.is_file() else {}
    found: dict[str, tuple[str, str | None, str | None]] = {}
    pages: dict[str, list[str]] = {}
    for page, line in documented_lines(repo):
        what = classify(line, recipes)
        if what is None:
            continue
        found.setdefault(line, what)
        if page not in pages.setdefault(line, []):
            pages[line].append(page)
    return [Command(line, kind, tuple(pages[line]), runs, through) for line, (kind, runs, through) in found.items()]
