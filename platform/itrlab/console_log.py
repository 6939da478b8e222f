"""What the command line shows of itrlab's log records: plain lines, INFO on stdout, warnings on stderr.

The library logs through ``logging.getLogger(__name__)`` and installs no handler: a program that embeds
itrlab (a notebook, another job) decides what it shows, with ``logging``'s own settings. With none at
all, Python's last-resort handler writes warnings and errors to stderr as their bare text, and nothing
of INFO.

The command-line layer (``jobs/*.py`` through ``jobs/_bootstrap.py``, the ``itrlab`` console script
through :func:`itrlab.cli.main`) calls :func:`configure` before anything else: the ``itrlab`` logger then
writes each record as its message alone (no level, no logger name), INFO on stdout and WARNING and above
on stderr, flushed, as the ``print`` calls it replaced wrote them. A record logged with
``extra=TO_STDERR`` goes to stderr at any level: the progress a command writes beside its report
(feature extraction's, the synthetic generator's).

The command line's own processes see the same: :func:`configure` sets :data:`CONSOLE_ENV`, which the
processes it starts inherit (the Ray it starts: sweep trials, Ray Train workers, Ray tasks; a benchmark's
subprocesses), and a Ray cluster's workers get through the sweep's runtime env
(:func:`itrlab.sweep.cluster.console_runtime_env`); importing ``itrlab`` in such a process calls
:func:`follow`, which configures it as its parent was, so that a trial's lines reach the console as
before (Ray forwards a worker's stdout and stderr to the driver). A process whose parent did not
configure the console (an embedded itrlab starting Ray) is left alone.

A stream that is no terminal (a log file, a pipe) gets no colour codes: the handler drops ANSI escape sequences
from a record written to it (Ray's error messages colour the task that failed), and :func:`configure` sets
``RAY_COLOR_PREFIX=0`` (Ray's switch: the ``(trial pid=...)`` prefix of the lines Ray forwards from its workers
without colour) unless the user set it, so that ``itrlab sweep ... > sweep.log`` holds plain text.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from typing import TextIO

CONSOLE_ENV = "ITRLAB_CONSOLE"  # the level the command line's console shows ("INFO"), for its child processes
TO_STDERR = {"to_stderr": True}  # ``log.info(..., extra=TO_STDERR)``: on stderr whatever its level
ROOT = "itrlab"
RAY_COLOR_ENV = "RAY_COLOR_PREFIX"  # Ray's colour of a forwarded line's prefix: "0" none
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")  # an ANSI control sequence (colours, cursor moves)


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` writes to a terminal (a closed or replaced stream counts as none)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError, OSError):
        return False


def plain(text: str) -> str:
    """``text`` without ANSI escape sequences."""
    return ANSI.sub("", text)


class ConsoleHandler(logging.Handler):
    """Each record's message on its own line of stdout (INFO and below) or stderr (WARNING and above, or a
    record marked :data:`TO_STDERR`), flushed. The streams are looked up at each record, so that a
    redirected ``sys.stdout`` (pytest's capture, ``contextlib.redirect_stdout``) receives the lines."""

    def __init__(self, level: int = logging.NOTSET):
        super().__init__(level)
        self.setFormatter(logging.Formatter("%(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record)
            stream = (
                sys.stderr if record.levelno >= logging.WARNING or getattr(record, "to_stderr", False) else sys.stdout
            )
            stream.write((text if is_terminal(stream) else plain(text)) + "\n")
            stream.flush()
        except RecursionError:
            raise
        except Exception:  # noqa: BLE001 - logging's own rule: a failed record never ends the program
            self.handleError(record)


def configure(level: int | str = logging.INFO) -> None:
    """The console of a command-line program (idempotent): the ``itrlab`` logger at ``level``, its records
    through one :class:`ConsoleHandler` and not passed on to the root logger's handlers (a library that
    configures the root logger does not print them twice); the processes it starts follow
    (:data:`CONSOLE_ENV`); Ray's forwarded lines without colour when stdout or stderr is no terminal."""
    logger = logging.getLogger(ROOT)
    for handler in [h for h in logger.handlers if isinstance(h, ConsoleHandler)]:
        logger.removeHandler(handler)
    logger.addHandler(ConsoleHandler())
    logger.setLevel(level)
    logger.propagate = False
    os.environ[CONSOLE_ENV] = logging.getLevelName(logger.level)
    if not (is_terminal(sys.stdout) and is_terminal(sys.stderr)):
        os.environ.setdefault(RAY_COLOR_ENV, "0")


def follow() -> bool:
    """In a process a command-line program started (:data:`CONSOLE_ENV` set): its console, as the parent's,
    and True. Else nothing, and False. Called when ``itrlab`` is imported."""
    level = os.environ.get(CONSOLE_ENV, "").strip().upper()
    if not level:
        return False
    if not any(isinstance(h, ConsoleHandler) for h in logging.getLogger(ROOT).handlers):
        configure(level if isinstance(logging.getLevelName(level), int) else logging.INFO)
    return True


def emit(logger: logging.Logger, line: str, stream: TextIO | None = None) -> None:
    """A progress line: to ``stream`` when the caller passed one (a test, a notebook cell), else logged at INFO
    through ``logger`` (what the command line's console prints on stdout)."""
    if stream is None:
        logger.info(line)
    else:
        stream.write(line + "\n")
        stream.flush()
