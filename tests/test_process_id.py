"""Which process owns a run (itrlab.process_id): ``host|boot|pid|start``, the start in clock ticks after boot as
psutil reads it, so that a reused pid, a restarted machine or another host is never taken for the owner."""

from __future__ import annotations

import os
import socket

import psutil

from itrlab.process_id import owner_alive, owner_id


def test_this_process_owns_what_it_wrote_and_a_reused_pid_a_reboot_or_another_host_do_not():
    mine = owner_id()
    host, boot, pid, start = mine.split("|")
    assert (host, pid) == (socket.gethostname(), str(os.getpid())) and start.isdigit() and boot != "-"
    assert owner_id() == mine and owner_id(os.getpid()) == mine  # read again: the same ticks
    assert owner_alive(mine) is True
    assert owner_alive(f"{host}|{boot}|{pid}|{int(start) + 1}") is False  # the pid, started at another tick
    assert owner_alive(f"{host}|another-boot|{pid}|{start}") is False  # the machine restarted since
    assert owner_alive(f"elsewhere.example|{boot}|{pid}|{start}") is None  # cannot be told here
    assert owner_alive("not an owner") is None


def test_a_pid_that_runs_nothing_has_no_start():
    unused = max(psutil.pids()) + 100_000  # above every pid that runs now
    assert owner_id(unused).endswith(f"|{unused}|-")
    assert owner_alive(owner_id(unused)) is False
