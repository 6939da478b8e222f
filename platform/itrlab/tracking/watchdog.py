"""A watchdog that ends the MLflow runs a job leaves RUNNING when it dies.

A process killed outright cannot end its runs: SIGKILL, the OOM killer, SIGBUS (a memory-mapped data file
truncated), or a sweep's driver that loses its Ray node (Ray's core worker exits on the spot). Every run itrlab
starts or reopens carries the tag ``itrlab.owner``, the process that ends it (:func:`itrlab.process_id.owner_id`).

A training or a sweep's driver starts this file as a script once every check passed, just before it creates or
reopens a run (:func:`watching`), in a session of its own, holding the read end of a pipe whose write end the job
keeps. A job that ends its own way writes ``ok`` first; a job killed outright closes the pipe without it, and the
watchdog ends the job's RUNNING runs KILLED with the reason in ``itrlab.stop_reason``
(:func:`itrlab.tracking.owners.end_runs_of`). Until then it imports only the standard library and
:mod:`itrlab.process_id`: waiting costs a blocked read. ``ITRLAB_WATCHDOG=0`` turns it off; the next ``train`` or
``sweep`` on the store closes such runs anyway (:func:`itrlab.tracking.owners.close_orphaned_runs`).

    python .../itrlab/tracking/watchdog.py FD PID WHAT
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from itrlab.process_id import owner_id

WATCHDOG_ENV = "ITRLAB_WATCHDOG"
DONE = b"ok"


@contextlib.contextmanager
def watching(what: str) -> Iterator[None]:
    """This process watched while the block runs: the watchdog is told ``ok`` when the block ends its own way
    (an exception included); if the process dies outright, the pipe closes without it."""
    if os.environ.get(WATCHDOG_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        yield
        return
    read, write = os.pipe()
    try:
        subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), str(read), str(os.getpid()), what],
            pass_fds=(read,),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError:  # no watchdog: the next command on the store closes what this one leaves RUNNING
        os.close(write)
        write = None
    finally:
        os.close(read)
    try:
        yield
    finally:
        if write is not None:
            with contextlib.suppress(OSError):
                os.write(write, DONE)
            os.close(write)


def main(argv: list[str]) -> int:
    fd, pid, what = int(argv[0]), int(argv[1]), argv[2]
    owner = owner_id(pid)
    with os.fdopen(fd, "rb") as pipe:
        message = pipe.read()  # blocks until the job closes its end: it ended, one way or another
    if message.startswith(DONE):
        return 0
    from itrlab.tracking.owners import end_runs_of  # the standard library only, until here

    return end_runs_of(owner, what)


if __name__ == "__main__":
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        sys.path.pop(0)  # run as a script: this folder's modules are not top-level ones
    sys.exit(main(sys.argv[1:]))
