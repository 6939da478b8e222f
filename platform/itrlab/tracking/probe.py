"""Whether a SQLite MLflow store holds a run, read with the standard library before MLflow is imported.

Importing MLflow and opening its store take seconds on 2 cores; a command handed a run that is not there (a
mistyped id, a run of another store) answers in a fraction of that by asking the database directly, read-only.
The probe only answers what it can tell for sure: a store that is not a ``sqlite:///`` file, or a file it
cannot read as an MLflow store, gives ``None``, and the command asks MLflow.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from itrlab.errors import UserInputError
from itrlab.tracking.store import resolve_tracking_uri, sqlite_path

RUN_ID = re.compile(r"[0-9a-f]{32}")
RUN_URI = re.compile(r"runs:/([^/]+)")  # a model named by its run


def holds_run(tracking_uri: str | None, run_id: str) -> bool | None:
    """Whether the store holds run ``run_id``: True or False for a SQLite store file, None where this cannot be
    told without MLflow (a server, a database that is not an MLflow store, a locked or damaged file)."""
    database = sqlite_path(resolve_tracking_uri(tracking_uri))
    if database is None:
        return None
    if not database.is_file():
        return False
    try:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=2) as connection:
            row = connection.execute("SELECT 1 FROM runs WHERE run_uuid = ?", (run_id,)).fetchone()
    except sqlite3.Error:
        return None
    return row is not None


def run_of_source(source: str) -> str | None:
    """The run a model source names (a run id, or ``runs:/<id>/...``); None for a folder or another URI."""
    if Path(source).expanduser().exists():
        return None
    if RUN_ID.fullmatch(source):
        return source
    named = RUN_URI.match(source)
    return named.group(1) if named else None


def check_sources_in_store(sources: list[str], tracking_uri: str | None) -> None:
    """UserInputError (one line) for the first source whose run the SQLite store does not hold, with the likely
    cause: a run of another store or a mistyped id. Sources it cannot tell about pass on to MLflow."""
    for source in map(str, sources):
        run_id = run_of_source(source)
        if run_id is None or holds_run(tracking_uri, run_id) is not False:
            continue
        store = resolve_tracking_uri(tracking_uri)
        where = "" if sqlite_path(store).is_file() else " (no such database file)"
        raise UserInputError(
            f"{source}: the MLflow store {store}{where} holds no run {run_id}: a run of another store "
            f"(--tracking-uri, MLFLOW_TRACKING_URI), or a mistyped id"
        )


__all__ = ["check_sources_in_store", "holds_run", "run_of_source"]
