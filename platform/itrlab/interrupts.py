"""SIGTERM ends a run the way Ctrl-C does.

Kubernetes, systemd, Slurm and ``timeout`` stop a process with SIGTERM, whose default kills Python on the spot (the
MLflow run left RUNNING). :func:`sigterm_as_sigint` makes SIGTERM do what SIGINT's handler of the moment does: raise
KeyboardInterrupt (a training ends its run KILLED and keeps its checkpoint) or stop a sweep gracefully (``--resume``
continues it). :func:`interruption` gives the line and the exit status (143 = 128 + SIGTERM, 130 = 128 + SIGINT).
:func:`ctrl_c_kept` takes back the SIGINT handler Ray Train's ``TorchTrainer.fit`` leaves behind;
:func:`worker_exit_quiet` keeps a Ray worker's ordered exit off the console.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading

_received: dict[str, bool] = {"sigterm": False}


def _on_sigterm(signum, frame) -> None:
    _received["sigterm"] = True
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler) and handler is not _on_sigterm:
        handler(signal.SIGINT, frame)  # Python's default raises KeyboardInterrupt; Tune's stops the sweep
    else:
        raise KeyboardInterrupt


def sigterm_as_sigint() -> None:
    """Install the SIGTERM handler (main thread only; again after a library replaced it, e.g. Ray)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)


def interruption() -> tuple[str, int]:
    """``(reason, exit status)`` of the interruption under way: SIGTERM's or Ctrl-C's."""
    if _received["sigterm"]:
        return "terminated (SIGTERM)", 143
    return "interrupted (Ctrl-C)", 130


def stop_process_group(process: subprocess.Popen, term_wait_s: float, kill_wait_s: float) -> None:
    """End the process group ``process`` leads (started with ``start_new_session``): SIGTERM, which a job takes as
    Ctrl-C (:func:`sigterm_as_sigint`), then SIGKILL after ``term_wait_s`` seconds; waits up to ``kill_wait_s``
    after that."""
    for sig, wait_s in ((signal.SIGTERM, term_wait_s), (signal.SIGKILL, kill_wait_s)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=wait_s)
            return


@contextlib.contextmanager
def ctrl_c_kept():
    """Put back, after the block, the SIGINT handler it found. ``TorchTrainer.fit`` on the main thread installs a
    handler that asks its run's controller to abort and never takes it back: a later Ctrl-C exits 0 while Ray is up and
    raises ConnectionError once Ray has shut down. Every main-thread ``fit`` of a TorchTrainer runs inside it."""
    previous = signal.getsignal(signal.SIGINT)
    try:
        yield
    finally:
        if previous is not None and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, previous)


def worker_exit_quiet() -> None:
    """In a Ray worker a command-line program started: the ``SystemExit`` Ray's SIGTERM handler raises prints nothing
    when it lands in a finalizer or a weakref callback, where Python cannot raise it and would print "Exception ignored
    in ..." with a traceback that Ray forwards to the console; the worker ends either way. Other unraisable exceptions
    go to the hook it found. Idempotent."""
    if getattr(sys.unraisablehook, "itrlab_quiet_exit", False):
        return
    passed_on = sys.unraisablehook

    def hook(unraisable) -> None:
        if unraisable.exc_type is not None and issubclass(unraisable.exc_type, SystemExit):
            return
        passed_on(unraisable)

    hook.itrlab_quiet_exit = True
    sys.unraisablehook = hook
