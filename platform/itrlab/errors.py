"""Errors that itrlab reports to its users.

Every error caused by the user's input (configs, command lines, data files) is a
:class:`UserInputError`: the command-line entry points print its message on one line
and exit with status 2 before any expensive work (Ray, MLflow, training) starts.
"""

from __future__ import annotations

import errno
import logging
import os
from pathlib import Path

from itrlab.console_log import plain

log = logging.getLogger(__name__)


def resolved_from(path: str | Path) -> str:
    """`` (relative to <working folder>)`` for a relative path, else nothing: an error about a relative path
    names the folder it was resolved from: a job started in another folder says where it looked."""
    return "" if Path(path).expanduser().is_absolute() else f" (relative to {Path.cwd()})"


class ItrlabError(Exception):
    """Base class of the errors itrlab raises on purpose."""

    exit_code = 1


class UserInputError(ItrlabError):
    """Bad input from the user: a config, an override, a path or a data file."""

    exit_code = 2


class StorageError(ItrlabError):
    """A file a running job must write cannot be written (a full, read-only or vanished disk); what
    was written before is intact. The run ends FAILED with this reason."""


class UnavailableError(ItrlabError):
    """A service a job needs (the MLflow server, Ray's start on this machine) stayed busy past the documented
    wait: not bad input, and nothing was started; try again later, or wait longer."""


class TrackingError(ItrlabError):
    """The MLflow store stopped accepting writes during a run (a full disk, a server gone); the run is
    left as the store last recorded it, and ``--resume`` ends it properly once the store is back."""


class ConfigError(UserInputError):
    """A config field holds a value that is not allowed.

    The message names the field (dotted path), the bad value and what is allowed.
    """

    def __init__(self, field: str, value: object, allowed: str, hint: str | None = None):
        self.field = field
        self.value = value
        self.allowed = allowed
        self.hint = hint
        shown = repr(value)
        if len(shown) > 200:  # a 5,000-character name stays one readable line
            shown = f"{shown[:160]}... ({len(shown):,} characters)"
        message = f"config error at '{field}': got {shown}; {allowed}"
        if hint:
            message += f" ({hint})"
        super().__init__(message)

    def __reduce__(self):  # re-raised in another process (a Ray trial's driver): keep the fields
        return type(self), (self.field, self.value, self.allowed, self.hint)


class SettingError(ValueError):
    """A setting of a loss or a scheme that its constructor refuses for a reason its type cannot say
    (it contradicts another setting, or changes nothing in this configuration). ``setting`` names it,
    so that the config check reports ``<section>.<setting>`` without reading the message."""

    def __init__(self, setting: str, value: object, allowed: str):
        self.setting, self.value, self.allowed = setting, value, allowed
        super().__init__(f"{setting}: got {value!r}; {allowed}")

    def __reduce__(self):
        return type(self), (self.setting, self.value, self.allowed)


class DataError(UserInputError):
    """A data file is missing, unreadable or malformed.

    The message names the file and, where it applies, the 1-based line.
    """

    def __init__(self, path: str | Path, problem: str, line: int | None = None):
        self.path = Path(path)
        self.problem = problem
        self.line = line
        where = (f"{self.path}" if line is None else f"{self.path}:{line}") + resolved_from(self.path)
        super().__init__(f"data error in {where}: {problem}")

    def __reduce__(self):
        return type(self), (self.path, self.problem, self.line)


def report(err: ItrlabError) -> int:
    """Log ``err`` for a person as one line (an error: stderr on the command line's console, and with no
    logging configured at all) and return the exit status it calls for."""
    kind = "error" if isinstance(err, UserInputError) else "run failed"
    log.error("itrlab: %s: %s", kind, err)
    return err.exit_code


NO_SPACE = (errno.ENOSPC, errno.EDQUOT)  # a full disk, or a user's quota used up


def disk_full(err: BaseException) -> bool:
    """Whether ``err`` says a disk (or a quota) is full: ENOSPC or EDQUOT, also as the text of a library's
    error that wraps it (pyarrow's file system, torch's writer)."""
    if isinstance(err, OSError) and err.errno in NO_SPACE:
        return True
    return any(os.strerror(code) in str(err) for code in NO_SPACE)


def no_space(where: str | Path) -> str:
    """The one way itrlab names a full disk: ``no space left on <folder>``."""
    return f"no space left on {where}"


def failure_reason(err: BaseException) -> str:
    """One line for a person: the message of an itrlab error; a full disk as ``no space left on <folder of
    the file>``; else the exception's type and first line. No colour codes (Ray colours a failed task's name):
    the line goes to tags, files and logs."""
    if isinstance(err, ItrlabError):
        return plain(str(err).strip().splitlines()[0]) if str(err).strip() else type(err).__name__
    if disk_full(err) and isinstance(err, OSError) and err.filename:
        return f"{no_space(Path(os.fsdecode(err.filename)).parent)} (writing {os.fsdecode(err.filename)})"
    text = plain(str(err)).strip().splitlines()
    return f"{type(err).__name__}: {text[0]}" if text else type(err).__name__


class OneLineLogs(logging.Filter):
    """Keeps a log record to its first line, the exception's own line appended, no traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        first = record.getMessage().strip().splitlines()
        record.msg, record.args = (first[0] if first else ""), ()
        if record.exc_info and record.exc_info[1] is not None:
            record.msg = f"{record.msg} {failure_reason(record.exc_info[1])}"
        record.exc_info = record.exc_text = None
        return True


def one_line_logs(*loggers: str) -> None:
    """Libraries' loggers whose records repeat, with a traceback, an error that itrlab reports itself
    on one line (a storage or store failure): keep their records to one line each."""
    for name in loggers:
        logger = logging.getLogger(name)
        if not any(isinstance(f, OneLineLogs) for f in logger.filters):
            logger.addFilter(OneLineLogs())
