"""What the command line shows of itrlab's log records: plain lines, INFO on stdout, warnings on stderr
(docs/architecture.md, "Logging").

The library logs through ``logging.getLogger(__name__)`` and installs no handler: a program that embeds itrlab decides
what it shows (with none, Python's last-resort handler writes warnings and errors, nothing of INFO). The command-line
layer calls :func:`configure` first: the ``itrlab`` logger then writes each record as its bare message, INFO on stdout
and WARNING and above on stderr, flushed; a record with ``extra=TO_STDERR`` goes to stderr at any level (progress beside
a report).

:func:`configure` sets :data:`CONSOLE_ENV`, which the processes the command starts inherit (Ray trials and workers, a
benchmark's subprocesses; a cluster's workers through :func:`itrlab.sweep.cluster.console_runtime_env`); importing
``itrlab`` there calls :func:`follow`, which configures it as its parent was, so that Ray forwards a trial's lines to
the console. A process whose parent did not configure the console is left alone. A stream that is no terminal gets no
colour: the handler drops ANSI escapes (Ray colours its errors) and :func:`configure` sets ``RAY_COLOR_PREFIX=0`` unless
the user set it, so that ``itrlab sweep ... > sweep.log`` holds plain text.
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
