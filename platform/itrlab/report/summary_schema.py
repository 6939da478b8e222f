"""``sweep/summary.json`` read only as far as it can be checked.

Anyone who can write the sweep's MLflow artifacts can change the file ``itrlab report`` pages from: a tampered or
truncated file is one line and exit status 2, never a traceback or a page of garbage. :func:`read_summary` checks,
before anything is written, the file (at most :data:`MAX_BYTES`, UTF-8, one strict JSON object, at most
:data:`MAX_DEPTH` deep) and every key the page reads: its type, range and size, that ``sweep`` (it names the page's
file) is a plain name and ``plots`` name artifacts under ``sweep/plots/``, that ``trials`` holds columns of one
length of scalars and the report's rows have the header's cells. Keys the page does not read are left alone (a
newer sweep may write more); a summary without ``convergence`` or ``comparisons`` is read without them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from itrlab.errors import UserInputError
from itrlab.report.escape import visible

MAX_BYTES = 32 * 2**20  # a sweep of thousands of trials writes well under 1 MB
MAX_DEPTH = 8  # the summary nests 5 deep (the grid's variants)
LINE = 2_000  # a label, a cell, a reason
TEXT = 20_000  # a note, a headline
DESCRIPTION = 4_000  # a sweep file's description, a few lines
ROWS = 100_000  # trials, and a report's rows
COLUMNS = 500
ITEMS = 10_000  # seeds, notes, comparisons, grid values
MAX_COUNT = 10**7  # a trial count, an epoch, a seed
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")  # a name used in a file name: no path
PLOT = re.compile(r"sweep/plots/[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\.png")
RUNS_TABLE = re.compile(r"[A-Za-z0-9#/?=&_.:%-]{0,1000}")  # a link into the MLflow UI
ROW_KINDS = ("result", "baseline", "published", "chance", "reference")
SHAPE_SIZES = ("train_images", "val_images", "test_images", "captions_per_image", "regions", "feature_dim")


class SummaryError(UserInputError):
    """A summary that fails the check: one line naming the key, what it holds and what is allowed."""


class FileCheck:
    """The checks of one file read as data (a summary, an evidence file); ``where`` names it in every message,
    each failure an ``error`` (one line, exit status 2)."""

    def __init__(self, where: str, error: type[UserInputError] = SummaryError):
        self.where = where
        self.error = error

    def fail(self, key: str, value: Any, allowed: str) -> UserInputError:
        key = visible(key) if len(key) <= 100 else f"{visible(key[:80])}..."  # a key from the file: one line
        shown = repr(value)
        if len(shown) > 80:
            shown = f"{shown[:60]}... ({len(shown):,} characters)"
        return self.error(f"{self.where}: '{key}': got {shown}; {allowed}")

    def string(
        self,
        data: dict,
        key: str,
        limit: int = LINE,
        required: bool = False,
        pattern: re.Pattern | None = None,
        meaning: str = "a string",
        inside: str = "",
    ) -> None:
        """``data[key]`` (named ``<inside>.<key>`` in messages) is a string within ``limit`` and ``pattern``."""
        value, name = data.get(key), f"{inside}.{key}" if inside else key
        if value is None and not required:
            return
        if not isinstance(value, str) or len(value) > limit or (required and not value.strip()):
            raise self.fail(name, value, f"{meaning} of {'1' if required else '0'} to {limit:,} characters")
        if pattern is not None and not pattern.fullmatch(value):
            raise self.fail(name, value, meaning)

    def count(self, value: Any, key: str, limit: int = MAX_COUNT) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
            raise self.fail(key, value, f"an integer from 0 to {limit:,}")
        return value

    def numeric(self, value: Any, key: str, nullable: bool = True) -> None:
        if value is None and nullable:
            return
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(key, value, "a number" + (" or null" if nullable else ""))

    def listing(self, value: Any, key: str, limit: int = ITEMS) -> list:
        return self._sized(value, key, limit, list, "a list of", "items")

    def mapping(self, value: Any, key: str, limit: int = ITEMS) -> dict:
        return self._sized(value, key, limit, dict, "a mapping of", "keys")

    def _sized(self, value: Any, key: str, limit: int, kind: type, what: str, unit: str) -> Any:
        if not isinstance(value, kind) or len(value) > limit:
            shown = value if not isinstance(value, kind) else f"{what} {len(value):,} {unit}"
            raise self.fail(key, shown, f"{what} at most {limit:,} {unit}")
        return value

    def texts(self, value: Any, key: str, limit: int = LINE, items: int = ITEMS) -> list[str]:
        values = self.listing(value, key, items)
        for i, item in enumerate(values):
            if not isinstance(item, str) or len(item) > limit:
                raise self.fail(f"{key}[{i}]", item, f"a string of at most {limit:,} characters")
        return values

    def scalar(self, value: Any, key: str) -> None:
        if value is not None and not isinstance(value, (str, int, float, bool)):
            raise self.fail(key, value, "a string, a number, a boolean or null")
        if isinstance(value, str) and len(value) > LINE:
            raise self.fail(key, value, f"a string of at most {LINE:,} characters")


def parse_json(raw: bytes, check: FileCheck) -> Any:
    """One strict JSON value from ``raw`` (UTF-8, no ``NaN`` or ``Infinity``); ``check.error`` on one line else."""
    if not raw.strip():
        raise check.error(f"{check.where}: the file is empty; a sweep writes one JSON object there")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise check.error(
            f"{check.where}: not UTF-8 text (byte {raw[err.start]:#04x} at offset {err.start:,}); "
            f"a sweep writes UTF-8 JSON"
        ) from None

    def no_constant(name: str):
        raise ValueError(f"{name} is no JSON number; a sweep writes null for a missing number")

    try:
        return json.loads(text, parse_constant=no_constant)
    except RecursionError:
        raise check.error(
            f"{check.where}: nested too deeply to read; a summary nests at most {MAX_DEPTH} deep"
        ) from None
    except json.JSONDecodeError as err:
        raise check.error(f"{check.where}: not JSON: {err.msg} at line {err.lineno} column {err.colno}") from None
    except ValueError as err:
        raise check.error(f"{check.where}: {err}") from None


def depth(data: Any) -> int:
    """How deep ``data`` nests (a scalar: 0; past ``MAX_DEPTH + 1`` it is not walked), without recursion."""
    deepest, stack = 0, [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, (dict, list)):
            deepest = max(deepest, depth)
            if depth <= MAX_DEPTH:  # deeper is refused anyway: no need to walk it all
                stack.extend((item, depth + 1) for item in (value.values() if isinstance(value, dict) else value))
    return deepest


def _trials(check: FileCheck, trials: Any) -> None:
    table = check.mapping(trials, "trials", COLUMNS)
    for key in ("trial", "status"):
        if key not in table:
            raise check.fail("trials", sorted(table)[:10], f"columns of trials, among them '{key}'")
    lengths = {}
    for key, column in table.items():
        if not isinstance(key, str) or len(key) > LINE:
            raise check.fail("trials", key, "column names of at most 2,000 characters")
        lengths[key] = len(check.listing(column, f"trials.{key}", ROWS))
        for i, cell in enumerate(column):
            check.scalar(cell, f"trials.{key}[{i}]")
    if len(set(lengths.values())) > 1:
        short = min(lengths, key=lengths.get)
        raise check.fail(
            f"trials.{short}", f"{lengths[short]} rows", f"columns of one length ('trial' has {lengths['trial']})"
        )
    for i, trial in enumerate(table["trial"]):
        if not isinstance(trial, str) or not trial:
            raise check.fail(f"trials.trial[{i}]", trial, "a trial id (a non-empty string)")


def _report(check: FileCheck, report: Any) -> None:
    report = check.mapping(report, "report", 100)
    check.string(report, "title", TEXT, required=True, inside="report")
    check.string(report, "headline", TEXT, required=True, inside="report")
    header = check.texts(report.get("header"), "report.header", LINE, COLUMNS)
    if not header:
        raise check.fail("report.header", header, "the report's column names (at least one)")
    rows = check.listing(report.get("rows"), "report.rows", ROWS)
    for i, row in enumerate(rows):
        check.texts(row, f"report.rows[{i}]", LINE, COLUMNS)
        if len(row) != len(header):
            raise check.fail(f"report.rows[{i}]", f"{len(row)} cells", f"the header's {len(header)} cells")
    kinds = check.texts(report.get("row_kinds", []), "report.row_kinds", 40, ROWS)
    if kinds and (len(kinds) != len(rows) or any(kind not in ROW_KINDS for kind in kinds)):
        raise check.fail("report.row_kinds", kinds[:5], f"one of {', '.join(ROW_KINDS)} per row ({len(rows)})")
    check.texts(report.get("notes"), "report.notes", TEXT)
    check.texts(report.get("provenance", []), "report.provenance", TEXT)


def _convergence(check: FileCheck, convergence: Any) -> None:
    for row, found in check.mapping(convergence, "convergence").items():
        where = f"convergence.{row}"
        if len(row) > LINE:
            raise check.fail("convergence", row, f"row labels of at most {LINE:,} characters")
        found = check.mapping(found, where, 20)
        for key in ("seeds", "epochs", "best_epoch", "since"):
            check.count(found.get(key), f"{where}.{key}")
        for key in ("gain", "tolerance", "rise", "spread"):  # rise, spread: older summaries hold them
            check.numeric(found.get(key), f"{where}.{key}")
        if found.get("decay") is not None:
            check.count(found["decay"], f"{where}.decay")
        check.string(found, "still_learning", LINE, inside=where)
        check.string(found, "schedule", LINE, inside=where)
        check.string(found, "decay_chosen", LINE, inside=where)  # absent: a fixed schedule


def _data_shape(check: FileCheck, shape: Any) -> None:
    shape = check.mapping(shape, "data_shape", 20)
    for key in SHAPE_SIZES:
        check.count(shape.get(key), f"data_shape.{key}")
    if not isinstance(shape.get("synthetic"), bool):
        raise check.fail("data_shape.synthetic", shape.get("synthetic"), "true or false")


def check_summary(data: Any, where: str) -> dict[str, Any]:
    """``data`` (a parsed summary) when it passes the checks of the module doc, else a SummaryError."""
    check = FileCheck(where)
    if not isinstance(data, dict):
        raise SummaryError(
            f"{where}: holds a JSON {type(data).__name__.replace('dict', 'object')}, not an object; "
            f"a sweep writes one JSON object (its results)"
        )
    deepest = depth(data)
    if deepest > MAX_DEPTH:
        raise SummaryError(f"{where}: nested more than {MAX_DEPTH} deep; a summary nests at most {MAX_DEPTH} deep")
    check.string(
        data,
        "sweep",
        128,
        required=True,
        pattern=NAME,
        meaning="the sweep's name (it names the page's file: letters, digits, '_', '.', '-', no path)",
    )
    for key in ("experiment", "objective"):
        check.string(data, key, LINE, required=True)
    check.string(data, "description", DESCRIPTION)
    for key in ("dataset", "test_protocol", "table_paper", "table_anchors"):
        check.string(data, key, LINE)
    for key in ("ranking", "headline"):
        check.string(data, key, TEXT)
    check.string(data, "runs_table", 1000, pattern=RUNS_TABLE, meaning="a link into the MLflow UI")
    for i, seed in enumerate(check.listing(data.get("seeds"), "seeds")):
        check.count(seed, f"seeds[{i}]")
    counts = check.mapping(data.get("trial_counts"), "trial_counts", 20)
    for status, count in counts.items():
        if len(status) > 40:
            raise check.fail("trial_counts", status, "statuses of at most 40 characters")
        check.count(count, f"trial_counts.{status}")
    _trials(check, data.get("trials"))
    if data.get("invocation_seconds") is not None:
        check.numeric(data["invocation_seconds"], "invocation_seconds")
        if not 0 <= data["invocation_seconds"] <= 1e9:
            raise check.fail("invocation_seconds", data["invocation_seconds"], "seconds, 0 or more")
    for key, value in (("table_rows", data.get("table_rows")), ("grid", data.get("grid"))):
        if value is not None:
            names = check.texts(list(value), key, LINE, 100) if isinstance(value, (list, dict)) else None
            if names is None:
                raise check.fail(key, value, "the names of the table's row keys")
    for i, plot in enumerate(check.texts(data.get("plots") or [], "plots", 200, 100)):
        if not PLOT.fullmatch(plot):
            raise check.fail(f"plots[{i}]", plot, "an artifact sweep/plots/<name>.png")
    if data.get("report") is not None:
        _report(check, data["report"])
    if data.get("convergence") is not None:
        _convergence(check, data["convergence"])
    if data.get("data_shape") is not None:
        _data_shape(check, data["data_shape"])
    if data.get("comparisons") is not None:
        for i, pair in enumerate(check.listing(data["comparisons"], "comparisons")):
            check.mapping(pair, f"comparisons[{i}]", 20)
    return data


def read_summary(path: Path, where: str) -> dict[str, Any]:
    """The checked summary in ``path`` (``where`` names it in messages); a SummaryError (one line, exit
    status 2) for a file that fails a check of the module doc."""
    check = FileCheck(where)
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise SummaryError(f"{where}: {size:,} bytes; a summary is at most {MAX_BYTES:,} bytes")
    return check_summary(parse_json(path.read_bytes(), check), where)
