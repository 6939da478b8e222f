"""Which process owns something (an MLflow run): ``host|boot|pid|start``, so that neither a reused process
id nor a restarted machine is taken for the owner, and whether that process still runs. The standard
library only: a job's watchdog (:mod:`itrlab.tracking.watchdog`) waits with nothing else loaded."""

from __future__ import annotations

import contextlib
import functools
import os
import socket
from pathlib import Path


@functools.cache
def _boot_id() -> str:
    with contextlib.suppress(OSError):
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return "-"


def _start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks after boot (field 22 of /proc/<pid>/stat); None: no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[19] if len(fields) > 19 and fields[0] != "Z" else None


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
