"""A Ray head that ``ray start --head --temp-dir DIR`` started on this machine, stopped alone (``itrlab ray-stop DIR``):
``ray stop`` ends every Ray process of the user (a running sweep's, another head's), and Ray has no command that stops
one head.

A head's processes are found through psutil by their command lines: the GCS server, raylet, dashboard, monitor and log
monitor name its temp folder, the Ray client server its GCS address (``DIR/ray_current_cluster``); with them go the
processes they started. Only the user's own processes, never this one or those it runs under. They end as ``ray stop``
ends them: SIGTERM to the raylets first, the GCS servers last, each stage given a grace period, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import psutil

from itrlab.errors import UserInputError

ADDRESS_FILE = "ray_current_cluster"  # the GCS address `ray start` writes into its temp folder
GRACE_S = 16.0  # as `ray stop`'s default grace period


class Proc(NamedTuple):
    """A process as the process table shows it: its parent, its owner (effective user id) and its arguments."""

    parent: int
    uid: int
    args: tuple[str, ...]


def process_table() -> dict[int, Proc]:
    """Every process this user can read, by pid (zombies and processes gone while read are left out)."""
    table = {}
    for process in psutil.process_iter(["ppid", "uids", "cmdline", "status"]):
        info = process.info
        if info["status"] != psutil.STATUS_ZOMBIE and None not in (info["ppid"], info["uids"], info["cmdline"]):
            table[process.pid] = Proc(info["ppid"], info["uids"].effective, tuple(info["cmdline"]))
    return table


def descendants(roots: set[int], table: dict[int, Proc]) -> set[int]:
    """``roots`` and every process they started, and those started, in ``table``."""
    found = set(roots)
    while more := {pid for pid, proc in table.items() if proc.parent in found} - found:
        found |= more
    return found


def ancestors(pid: int, table: dict[int, Proc]) -> set[int]:
    """``pid`` and the processes it runs under, up to the first one ``table`` lacks."""
    chain = set()
    while pid in table and pid not in chain:
        chain.add(pid)
        pid = table[pid].parent
    return chain | {pid}


@dataclass(frozen=True)
class Head:
    """A head's temp folder, as ``ray start`` was given it and resolved, and its GCS address (None when the
    folder holds none)."""

    temp_dir: Path
    address: str | None

    @classmethod
    def of(cls, temp_dir: str | Path) -> Head:
        """The head of ``temp_dir``; a UserInputError when it is not a folder Ray wrote."""
        folder = Path(temp_dir).expanduser()
        if not folder.is_dir():
            raise UserInputError(
                f"{temp_dir}: no such folder; give the --temp-dir the head was started with (`ray start --head "
                "--temp-dir DIR`)"
            )
        address_file = folder / ADDRESS_FILE
        if not address_file.is_file() and not any(folder.glob("session_*")):
            raise UserInputError(
                f"{temp_dir}: not a Ray temp folder (no {ADDRESS_FILE}, no session_* in it); give the --temp-dir "
                "the head was started with (`ray start --head --temp-dir DIR`)"
            )
        address = address_file.read_text().strip() if address_file.is_file() else ""
        return cls(Path(os.path.abspath(folder)), address or None)

    def names(self, args: tuple[str, ...]) -> bool:
        """Whether a command line names this head's temp folder (a path under it, or ``--temp-dir=`` it) or its
        GCS address (``--address=``, ``--gcs-address=``)."""
        folders = {str(self.temp_dir), str(self.temp_dir.resolve())}
        for arg in args:
            value = arg.split("=", 1)[1] if arg.startswith("-") and "=" in arg else arg
            if value in folders or any(value.startswith(folder + os.sep) for folder in folders):
                return True
            if self.address and value == self.address:
                return True
        return False

    def processes(self, table: dict[int, Proc] | None = None) -> set[int]:
        """The pids of this head's processes and of those they started: the user's own, this process and
        those it runs under left out."""
        table = process_table() if table is None else table
        uid = os.getuid()
        roots = {pid for pid, proc in table.items() if proc.uid == uid and self.names(proc.args)}
        return descendants(roots, table) - ancestors(os.getpid(), table)


def _stage(proc: Proc) -> int:
    """When a head's process is sent SIGTERM: raylets first, the GCS server last (as ``ray stop``)."""
    program = Path(proc.args[0]).name if proc.args else ""
    return 0 if program == "raylet" else 2 if program == "gcs_server" else 1


def _running(pids: set[int]) -> set[int]:
    table = process_table()
    return {pid for pid in pids if pid in table}


def send(pids: set[int], sig: int) -> None:
    """``sig`` to each of ``pids`` that still runs."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def wait_ended(pids: set[int], timeout_s: float) -> set[int]:
    """Those of ``pids`` still running after up to ``timeout_s`` seconds (the children of this process reaped)."""
    deadline = time.monotonic() + timeout_s
    while True:
        for pid in pids:
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)
        left = _running(pids)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


def stop_head(temp_dir: str | Path, grace_s: float = GRACE_S) -> tuple[Head, int]:
    """End the processes of the head whose temp folder is ``temp_dir`` and theirs (:meth:`Head.processes`):
    SIGTERM in three stages (raylets, the others, the GCS servers), each given ``grace_s`` seconds, then SIGKILL
    to what still runs. Returns the head and how many processes it had (0: none ran)."""
    head = Head.of(temp_dir)
    table = process_table()
    doomed = head.processes(table)
    for stage in range(3):
        group = {pid for pid in doomed if _stage(table[pid]) == stage}
        send(group, signal.SIGTERM)
        wait_ended(group, grace_s)
    left = _running(doomed) | head.processes()  # and any a dying process started meanwhile
    send(left, signal.SIGKILL)
    wait_ended(left, grace_s)
    return head, len(doomed)
