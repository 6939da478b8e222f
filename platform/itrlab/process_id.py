"""Which process owns something (an MLflow run): ``host|boot|pid|start``, so that neither a reused process
id nor a restarted machine is taken for the owner, and whether that process still runs. The standard library and
psutil only: a job's watchdog (:mod:`itrlab.tracking.watchdog`) waits with nothing else loaded.

A process's start is counted in clock ticks after boot, the kernel's own count: unlike its start as a date, it does
not move when the system clock is set, so an owner written before a clock change is still recognised after."""

from __future__ import annotations

import contextlib
import functools
import os
import socket
from pathlib import Path

import psutil


@functools.cache
def _boot_id() -> str:
    with contextlib.suppress(OSError):
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return "-"


def _start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks after boot; None: no such process, or a zombie."""
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            if process.status() == psutil.STATUS_ZOMBIE:
                return None
            # psutil gives the start as a date, the boot's date plus the ticks after boot: less the boot's date
            since_boot = process.create_time() - psutil.boot_time()
    except psutil.Error:
        return None
    return str(round(since_boot * os.sysconf("SC_CLK_TCK")))


def owner_id(pid: int | None = None) -> str:
    """``host|boot|pid|start`` of this process (or ``pid``): a reused pid, or a reboot, is another owner."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}|{_boot_id()}|{pid}|{_start_ticks(pid) or '-'}"


def owner_alive(owner: str) -> bool | None:
    """Whether the owning process still runs; None when that cannot be told here (another machine, or a
    tag this code did not write)."""
    parts = owner.split("|")
    if len(parts) != 4 or not parts[2].isdigit() or parts[0] != socket.gethostname():
        return None
    if parts[1] != _boot_id():
        return False  # the machine restarted since
    return _start_ticks(int(parts[2])) == parts[3]
