"""Acting on a sweep while a trial is known to be training, without a race.

A test that kills a raylet, sends Ctrl-C or copies a sweep's state "while a trial trains" must not learn
that the trial trains from a file it polls and then act: a fast trial may finish in between. Instead
:func:`trials_held` stops (SIGSTOP) every Ray worker process the driver started, waits until each is
stopped, and only then reads the sweep's progress board (``<sweep>/progress/<trial>.json``, which a trial
writes whenever a phase begins: :mod:`itrlab.sweep.board`); when the board does not yet show what the test
needs, the workers continue (SIGCONT) and it looks again. Once it does, a stopped trial cannot move on:
what the test does next comes first by construction, whatever the speed of the machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil


def _command_line(process: psutil.Process) -> str:
    """``process``'s arguments joined by spaces; empty when it is gone or cannot be read."""
    with contextlib.suppress(psutil.Error):
        return " ".join(process.cmdline())
    return ""


def ray_workers(pid: int) -> list[int]:
    """The Ray worker processes (``ray::...``: trials, idle workers) among ``pid``'s descendants."""
    try:
        found = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return sorted(process.pid for process in found if _command_line(process).startswith("ray::"))


def trial_processes(pids: list[int]) -> list[int]:
    """Those of ``pids`` that run a Tune trial (``ray::ImplicitFunc...``), not Ray's agents or idle workers."""
    found = []
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            if _command_line(psutil.Process(pid)).startswith("ray::ImplicitFunc"):
                found.append(pid)
    return found


STOPPED = (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP, psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)


def _stopped(pid: int) -> bool:
    """Whether ``pid`` is stopped, or gone."""
    try:
        return psutil.Process(pid).status() in STOPPED
    except psutil.NoSuchProcess:
        return True


def _signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


@contextlib.contextmanager
def stopped(pids: list[int], timeout: float = 60) -> Iterator[list[int]]:
    """``pids`` stopped (SIGSTOP), each seen stopped before this yields; continued (SIGCONT) on leaving (a
    process killed meanwhile is gone)."""
    deadline = time.monotonic() + timeout
    try:
        _signal_all(pids, signal.SIGSTOP)
        while not all(_stopped(pid) for pid in pids):  # SIGSTOP acts when the kernel next runs them
            assert time.monotonic() < deadline, "a process did not stop"
            time.sleep(0.01)
        yield pids
    finally:
        _signal_all(pids, signal.SIGCONT)


def board_notes(storage: Path) -> dict[str, dict]:
    """The progress board of every sweep under ``storage`` (``<storage>/<sweep>/<folder>/progress/*.json``):
    trial id -> its last note (phase, epoch, epochs ...); a note being replaced is skipped."""
    notes = {}
    for path in storage.glob("*/*/progress/*.json"):
        with contextlib.suppress(OSError, ValueError):
            notes[path.stem] = json.loads(path.read_text())
    return notes


def notes_since(storage: Path, since: float) -> dict[str, dict]:
    """The board's notes written at or after ``since`` (wall clock): those of an invocation started then."""
    return {trial: note for trial, note in board_notes(storage).items() if note.get("updated", 0) >= since}


def training(note: dict) -> bool:
    """A note of a trial that trains or validates: it has its test evaluation still to run."""
    return note.get("phase") in ("training", "validating")


def training_alone(storage: Path) -> bool:
    """One trial has begun, and it is training or validating (not testing: it has not finished)."""
    notes = board_notes(storage)
    return len(notes) == 1 and all(training(note) for note in notes.values())


@contextlib.contextmanager
def held(
    processes: Callable[[], list[int]],
    ready: Callable[[], bool],
    alive: Callable[[], bool],
    what: str,
    timeout: float = 600,
) -> Iterator[list[int]]:
    """The processes ``processes()`` lists, stopped (SIGSTOP) at a moment ``ready()`` holds, read while they
    were stopped and no other had appeared; yields their pids and continues them (SIGCONT) on leaving (a
    process the test killed meanwhile is gone). Fails when ``alive()`` stops holding, or after ``timeout``
    seconds, with ``what`` (what the test waited for) in the message."""
    deadline = time.monotonic() + timeout
    while True:
        assert alive(), f"{what}: the job ended first"
        assert time.monotonic() < deadline, f"{what}: not seen in {timeout:.0f} s"
        with stopped(processes()) as pids:
            if pids and ready() and set(processes()) <= set(pids):
                yield pids
                return
        time.sleep(0.2)


def trials_held(
    driver: subprocess.Popen | None,
    ready: Callable[[], bool],
    what: str = "a trial training",
    timeout: float = 600,
    log: Path | None = None,
):
    """Every Ray worker of ``driver`` (None: of this process, whose Ray a test started) stopped at a moment
    ``ready()`` holds; fails with ``log``'s tail when the driver ends first."""
    pid = driver.pid if driver is not None else os.getpid()

    def alive() -> bool:
        if driver is None or driver.poll() is None:
            return True
        tail = log.read_text()[-3000:] if log is not None and log.exists() else ""
        raise AssertionError(f"{what}: the sweep ended first (status {driver.returncode}):\n{tail}")

    return held(lambda: ray_workers(pid), ready, alive, what, timeout)


def process_held(process: subprocess.Popen, log: Path, text: str, timeout: float = 300):
    """A job's process stopped once its log holds ``text``: it cannot move on until it continues."""

    def alive() -> bool:
        if process.poll() is None:
            return True
        raise AssertionError(
            f"the job ended (status {process.returncode}) before its log said {text!r}:\n{log.read_text()[-2000:]}"
        )

    return held(lambda: [process.pid], lambda: text in log.read_text(), alive, repr(text), timeout)


def training_held(process: subprocess.Popen, log: Path, timeout: float = 300):
    """A training job (``jobs/train.py``) stopped once its log shows its first epoch (a checkpoint exists):
    it cannot finish, nor write another checkpoint, until it continues."""
    return process_held(process, log, "epoch   1/", timeout)
