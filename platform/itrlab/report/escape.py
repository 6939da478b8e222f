"""Text on its way into a page, escaped for where it goes: one function per target.

Labels, reasons, sweep names and descriptions come from sweep files, MLflow tags and ``summary.json`` and may hold
``<script>``, ``|``, ``*`` or a newline; every page and the parent run's MLflow description pass them through the
function of their target so that they read as text, never as markup. :func:`md_text` backslash-escapes what
CommonMark or GitHub read as inline markup, and a first character that would open a block (leading spaces become
``&#32;``); :func:`md_cell` also escapes ``|``, so that a label never shifts a table's columns; :func:`md_code`
fences an inline code span longer than any backtick run inside. HTML is escaped by the templates' autoescape
(:mod:`itrlab.report.pages`). Control characters show as their Unicode control pictures (a newline as ``␊``): a
real line break would end a table row or start a block.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# inline markup anywhere in a line (CommonMark, GitHub's tables, strikethrough and math; CommonMark lets a
# backslash escape any ASCII punctuation); an underscore between two letters or digits opens no emphasis
# (CommonMark's flanking rule), so ``test_rsum`` stays as it is
_INLINE = re.compile(r"([\\`*\[\]<&~$]|(?<![^\W_])_|_(?![^\W_]))")
_BLOCK_START = re.compile(r"^([#>+=-]|\d+(?=[.)]))")  # a heading, quote, list, setext line or ordered list


def visible(text: object) -> str:
    """``text`` as a string, its control characters shown as Unicode control pictures (U+2400 + code; DEL as
    U+2421): the one form of a newline, a tab or a NUL in every page."""
    return _CONTROL.sub(lambda m: chr(0x2421) if m.group() == "\x7f" else chr(0x2400 + ord(m.group())), str(text))


def md_cell(text: object) -> str:
    """``text`` for a Markdown table cell: the inline escapes and ``|``: one cell, shown as written."""
    return _INLINE.sub(r"\\\1", visible(text)).replace("|", "\\|")


def md_text(text: object) -> str:
    """``text`` for Markdown running text (it may start a line): shown as written, never read as markup."""
    escaped = _BLOCK_START.sub(
        lambda m: m.group() + "\\" if m.group()[0].isdigit() else "\\" + m.group(), md_cell(text)
    )
    stripped = escaped.lstrip(" ")
    return "&#32;" * (len(escaped) - len(stripped)) + stripped


def md_code(text: object) -> str:
    """``text`` as an inline code span: fenced by one backtick more than its longest run of backticks, with a
    space inside the fence where it starts or ends with one (CommonMark's rule). Not for table cells: GitHub
    splits a cell at a ``|`` even inside a code span."""
    shown = visible(text)
    longest = max((len(run) for run in re.findall(r"`+", shown)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if shown.startswith("`") or shown.endswith("`") or not shown.strip() else ""
    return f"{fence}{pad}{shown}{pad}{fence}"
