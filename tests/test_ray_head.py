"""``itrlab ray-stop DIR`` finds the head of a temp folder by its processes' command lines and leaves every other
Ray alone (itrlab.ray_head); its bad input is one line. A real head, started and stopped:
tests/test_ray_job_documented.py."""

from __future__ import annotations

import os

import pytest

from itrlab.cli import main
from itrlab.errors import UserInputError
from itrlab.ray_head import Head, Proc, ancestors, descendants, process_table

RAY = "/venv/lib/python3.11/site-packages/ray"


def head_folder(tmp_path, address: str | None = "192.0.2.2:6390"):
    folder = tmp_path / "ray"
    (folder / "session_2026-11-29_12-00-00_000000_100").mkdir(parents=True)
    if address:
        (folder / "ray_current_cluster").write_text(address + "\n")
    return folder


def test_a_heads_processes_are_those_naming_its_folder_or_address_and_their_children(tmp_path):
    folder = head_folder(tmp_path)
    session = f"{folder}/session_2026-11-29_12-00-00_000000_100"
    other = tmp_path / "ray2"  # a folder whose name starts with the head's: another head's
    me, uid = os.getpid(), os.getuid()
    table = {
        1: Proc(0, 0, ("init",)),
        10: Proc(1, uid, (f"{RAY}/core/src/ray/gcs/gcs_server", f"--log_dir={session}/logs", "--gcs_server_port=6390")),
        11: Proc(1, uid, (f"{RAY}/core/src/ray/raylet/raylet", f"--raylet_socket_name={session}/sockets/raylet")),
        12: Proc(11, uid, ("ray::DashboardAgent",)),
        13: Proc(11, uid, ("ray::IDLE",)),
        14: Proc(13, uid, ("python", "jobs/sweep_dbl.py", "--preset", "smoke")),  # a job's driver
        15: Proc(1, uid, ("python", f"{RAY}/dashboard/dashboard.py", f"--temp-dir={folder}", "--port=8275")),
        16: Proc(1, uid, ("python", "-m", "ray.util.client.server", "--address=192.0.2.2:6390", "--port=20001")),
        20: Proc(1, uid, (f"{RAY}/core/src/ray/raylet/raylet", f"--raylet_socket_name={other}/session_x/raylet")),
        21: Proc(1, uid, (f"{RAY}/core/src/ray/gcs/gcs_server", "--log_dir=/tmp/ray/session_y/logs")),
        22: Proc(1, uid, ("python", "-m", "ray.util.client.server", "--address=192.0.2.2:63901")),
        30: Proc(1, uid + 1, (f"{RAY}/core/src/ray/raylet/raylet", f"--raylet_socket_name={session}/raylet")),
        me: Proc(40, uid, ("python", "itrlab", "ray-stop", str(folder))),
        40: Proc(1, uid, ("bash", "-c", f"ray start --head --temp-dir {folder}")),  # what this runs under
    }
    assert Head.of(folder).processes(table) == {10, 11, 12, 13, 14, 15, 16}
    assert Head.of(folder).address == "192.0.2.2:6390"
    assert descendants({11}, table) == {11, 12, 13, 14} and ancestors(me, table) == {me, 40, 1, 0}


def test_a_folder_ray_did_not_write_is_refused_in_one_line(tmp_path, capsys):
    with pytest.raises(UserInputError, match="no such folder"):
        Head.of(tmp_path / "nowhere")
    with pytest.raises(UserInputError, match=r"not a Ray temp folder \(no ray_current_cluster, no session_\* in it\)"):
        Head.of(tmp_path)
    assert main(["ray-stop", str(tmp_path)]) == 2
    assert main(["ray-stop", str(head_folder(tmp_path)), "--grace", "-1"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and all(line.startswith("itrlab: error: ") for line in err), err
    assert "--temp-dir DIR" in err[0] and "--grace: got -1" in err[1]


def test_a_head_with_no_process_left_is_said_and_nothing_is_stopped(tmp_path, capsys):
    folder = head_folder(tmp_path, address=None)
    assert not Head.of(folder).processes()
    assert main(["ray-stop", str(folder)]) == 0
    assert capsys.readouterr().out == f"itrlab: no process of the Ray head of {folder} runs; nothing to stop\n"


def test_the_process_table_holds_this_process_and_what_it_runs_under():
    table = process_table()
    assert table[os.getpid()].uid == os.getuid() and table[os.getpid()].args
    assert os.getppid() in ancestors(os.getpid(), table)
