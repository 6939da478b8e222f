"""SIGTERM ends a run the way Ctrl-C does.

Kubernetes, systemd, Slurm and ``timeout`` stop a process with SIGTERM; its default action kills
Python on the spot (no message, the MLflow run left RUNNING forever). :func:`sigterm_as_sigint`
makes SIGTERM do what SIGINT's handler of the moment does: raise KeyboardInterrupt (a training ends
its run KILLED and keeps its checkpoint), or Tune's graceful stop of a sweep (the experiment state is
saved, so ``--resume`` continues it). :func:`interruption` then says which signal it was: the line
to print and the exit status (143 = 128 + SIGTERM, 130 = 128 + SIGINT).

Python drops a KeyboardInterrupt raised while it runs a finalizer (``__del__``, a weakref callback: it
prints "Exception ignored" and goes on), and a signal can arrive just then: a training sent Ctrl-C under
load once trained on for a minute. So the handlers also remember the signal, and the training loop calls
:func:`raise_if_interrupted` at every step.
"""

from __future__ import annotations

import signal
import threading

_received: dict[str, bool] = {"sigterm": False, "pending": False}


def _on_sigint(signum, frame) -> None:
    _received["pending"] = True
    raise KeyboardInterrupt


def _on_sigterm(signum, frame) -> None:
    _received["sigterm"] = _received["pending"] = True
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler) and handler is not _on_sigterm:
        handler(signal.SIGINT, frame)  # Python's default raises KeyboardInterrupt; Tune's stops the sweep
    else:
        raise KeyboardInterrupt


def sigterm_as_sigint() -> None:
    """Install the SIGTERM handler (main thread only; again after a library replaced it, e.g. Ray)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)


def ctrl_c_remembered() -> None:
    """Ctrl-C raises KeyboardInterrupt as Python's default handler does, and is remembered (see the module
    doc). Installed only over Python's default (main thread): SIGINT stays ignored where a shell made it
    so (``nohup``), and a library's own handler (Tune's) stays."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)


def raise_if_interrupted() -> None:
    """KeyboardInterrupt if a Ctrl-C or SIGTERM arrived whose exception Python dropped (see the module doc)."""
    if _received["pending"]:
        raise KeyboardInterrupt


def interruption() -> tuple[str, int]:
    """``(reason, exit status)`` of the interruption under way: SIGTERM's or Ctrl-C's."""
    if _received["sigterm"]:
        return "terminated (SIGTERM)", 143
    return "interrupted (Ctrl-C)", 130
