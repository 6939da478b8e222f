"""Text on its way into a page, escaped for where it goes: one function per target.

Row labels, trial reasons, sweep names and descriptions come from sweep files, MLflow tags and
``summary.json``: any of them may hold ``<script>``, ``"><img onerror=...>``, ``|``, ``*`` or a newline.
Every page (``report.md``, ``summary.md``, the results page, ``report.html``) and the parent
run's MLflow description (``mlflow.note.content``, rendered as Markdown by the MLflow UI) pass such text
through the function of its target, so that it reads as the text it is, never as markup:

* :func:`md_text`: Markdown running text (a paragraph, a list item, a heading, the bold headline): the
  characters that CommonMark or GitHub's extensions read as inline markup anywhere in a line are
  backslash-escaped (``\\<script>`` renders as ``<script>``: no HTML; ``\\*`` no emphasis, ``\\[`` no link,
  ``\\&lt;`` no entity, ``\\$`` no math), and so is a first character that would open a block (``#``, ``>``,
  ``-``, ``+``, ``=``, ``1.``; leading spaces, an indented code block, become ``&#32;``);
* :func:`md_cell`: a Markdown table cell: the same inline escapes, and ``|``, so that a label holding ``|``
  never shifts the table's columns (a cell holds no blocks: its first character stays as it is);
* :func:`md_code`: an inline code span (a run id): a fence longer than any backtick run inside.

HTML is escaped where its pages are written, by their templates' autoescape (:mod:`itrlab.report.pages`).

All of them show control characters as their Unicode control pictures (a newline as ``␊``, a tab as
``␉``): a label's newline stays visible as text in a table cell, where a real line break would end the
row, and in running text, where it would start a new block.
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
