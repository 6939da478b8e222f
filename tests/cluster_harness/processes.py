"""Processes of the local cluster: starting them in sessions of their own, waiting for them to answer,
and ending them by their process group or their PID namespace. Processes are read through psutil; a PID
namespace, which psutil does not name, from the ``/proc/<pid>/ns/pid`` link.

A pid read back from ``cluster.json`` may belong to another process by now, so nothing here signals a
pid without checking what it runs (:func:`kill_group`) or which namespace it is in.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil

LOOPBACK = "127.0.0.1"


class ClusterError(RuntimeError):
    """The local cluster could not start (a server did not answer, a node did not join): one line, and
    the log file to read."""


_GIVEN_PORTS: set[int] = set()


def free_port() -> int:
    """A loopback port free now and not handed out before by this process: the kernel may give the same
    free port to two binds in a row, and Ray refuses a head whose components share one."""
    while True:
        with socket.socket() as sock:
            sock.bind((LOOPBACK, 0))
            port = sock.getsockname()[1]
        if port not in _GIVEN_PORTS:
            _GIVEN_PORTS.add(port)
            return port


STARTED: list[subprocess.Popen] = []  # every process popen() started in this process, as soon as it exists


def popen(command: list[str], log: Path, tie_to_parent: bool = False, **kwargs) -> subprocess.Popen:
    """``command`` in a session of its own (its process group ends with :func:`kill_group`), its output
    appended to ``log``, and in :data:`STARTED` before a Ctrl-C or SIGTERM can interrupt anything (they are
    held while it starts): a start cut short still knows every process it made (:func:`kill_started`).
    ``tie_to_parent``: it is killed when the process that started it dies."""

    def preexec() -> None:
        if tie_to_parent:  # PR_SET_PDEATHSIG: SIGKILL when the starting thread's process dies
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)

    with open(log, "ab") as out, signals_held():
        process = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=preexec, **kwargs
        )
        STARTED.append(process)
    return process


def kill_started(since: int = 0, timeout: float = 15.0) -> None:
    """SIGKILL the process group of every process :func:`popen` started here (from ``STARTED[since]`` on) that
    still runs (an ``unshare`` of a node takes its namespace with it: ``--kill-child``), all at once, then reap
    them: how a start cut short ends what it made, within seconds."""
    for process in STARTED[since:]:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    for process in STARTED[since:]:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.1, deadline - time.monotonic()))


def wait_until(
    ready: Callable[[], bool],
    timeout: float,
    what: str,
    process: subprocess.Popen | None = None,
    log: Path | None = None,
    every: float = 0.3,
) -> None:
    """Poll ``ready()`` (an exception counts as not ready) until it holds; a ClusterError naming ``what`` (and
    ``log``) when ``process`` ended first or ``timeout`` seconds passed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise ClusterError(f"{what}: the process ended with {process.returncode}" + (f"; see {log}" if log else ""))
        with contextlib.suppress(Exception):
            if ready():
                return
        time.sleep(every)
    raise ClusterError(f"{what}: not ready within {timeout:.0f} s" + (f"; see {log}" if log else ""))


def http_ok(url: str, headers: dict[str, str] | None = None) -> bool:
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=5) as response:
        return response.status == 200


def alive(pid: int | None) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    if not pid:
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def cmdline(pid: int) -> str:
    """The arguments ``pid`` runs, joined by spaces; empty when it is gone or cannot be read."""
    with contextlib.suppress(psutil.Error):
        return " ".join(psutil.Process(pid).cmdline())
    return ""


def kill_group(pid: int | None, program: str, sig: int = signal.SIGKILL) -> None:
    """Signal the process group that ``pid`` leads, if ``pid`` still runs ``program``."""
    if pid and program in cmdline(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)


def wait_gone(pid: int, timeout: float) -> None:
    """Wait up to ``timeout`` seconds for ``pid`` to end or be a zombie (reaped when it is a child of this
    process)."""
    deadline = time.monotonic() + timeout
    with contextlib.suppress(psutil.Error):
        process = psutil.Process(pid)
        while time.monotonic() < deadline and process.status() != psutil.STATUS_ZOMBIE:
            with contextlib.suppress(psutil.TimeoutExpired):
                process.wait(0.1)
                return


def stop_group(pid: int, program: str, sig: int, timeout: float = 15.0) -> None:
    """End a server's process group: ``sig`` (its own clean shutdown), then SIGKILL after ``timeout`` seconds."""
    kill_group(pid, program, sig)
    wait_gone(pid, timeout)
    kill_group(pid, program)


def pid_namespace(pid: int) -> str | None:
    """The PID namespace of ``pid``, as its ``pid:[inode]`` link names it."""
    with contextlib.suppress(OSError):
        return os.readlink(f"/proc/{pid}/ns/pid")
    return None


def in_namespace(namespace: str) -> list[int]:
    """Live processes of a PID namespace (as the ``pid:[inode]`` link names it)."""
    return [
        process.pid
        for process in psutil.process_iter()
        if pid_namespace(process.pid) == namespace and alive(process.pid)
    ]


def child_of(pid: int, timeout: float = 10.0) -> int | None:
    """The first child of ``pid`` (the PID 1 of the namespace ``unshare --fork`` made)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(psutil.Error):
            children = psutil.Process(pid).children()
            if children:
                return children[0].pid
        time.sleep(0.05)
    return None


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM noted but not acted on within the block, then delivered to the handlers of the
    moment: cleaning up after a first Ctrl-C or SIGTERM is not cut short by a second. A no-op outside the
    main thread (where Python runs signal handlers)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held = (signal.SIGINT, signal.SIGTERM)
    noted: list[int] = []
    saved = {sig: signal.signal(sig, lambda signum, frame: noted.append(signum)) for sig in held}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(noted):
            signal.raise_signal(sig)
