"""The test tiers (docs/tests.md#tiers): a test that starts a process (Ray, a server, a training or CLI
job in a subprocess, an external tool) carries the ``e2e`` or ``cluster`` marker, so that the fast tier
(``make test``) starts none; a tier marker sits on tests, never on helpers; no test module starts a
process while it is collected. tests/tier_scan.py reads the source; conftest.py's guard refuses at run
time what the source does not show."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import UNGUARDED_POPEN_INIT, starts_a_job
from tier_scan import TESTS, TIERS, Scan, the_tests_folder


def test_every_test_that_starts_a_process_carries_a_process_tier():
    offenders = the_tests_folder().unmarked_starters()
    assert not offenders, (
        "these tests start a process without @pytest.mark.e2e (or cluster), so the fast tier "
        "would run them:\n" + "\n".join(offenders)
    )


def test_tier_markers_sit_on_tests_not_on_helpers():
    offenders = the_tests_folder().tier_marks_on_helpers()
    assert not offenders, f"a tier marker on a helper marks nothing: move it to the tests that call it: {offenders}"


def test_no_test_module_starts_a_process_when_it_is_collected():
    offenders = the_tests_folder().starts_at_collection()
    assert not offenders, f"move these into the tests or their fixtures: {offenders}"


SERVERS = """
import subprocess
def serve(command):
    return subprocess.Popen(command)
"""
HELPERS = """
import pytest
from servers import serve as start_server
def start_it():
    return start_server(["x"])
@pytest.fixture
def server():
    yield start_it()
@pytest.fixture
def calm():
    return 1
"""
SYNTHETIC = """
import os
import pytest
import ray as r
from subprocess import run as execute
from helpers import start_it, server
from itrlab.sweep import run_sweep
e2e = pytest.mark.e2e

def make():
    return 1

class Job:
    def go(self):
        os.system("true")

@pytest.fixture
def via_fixture(server):
    return server

@pytest.mark.slow
def signal_training():
    execute(["x"])

def test_pure(tmp_path):
    assert make() == 1 and helper_with_a_parameter_named_like_a_fixture(1)

def test_through_a_helper_in_another_module():
    start_it()

def test_through_an_imported_fixture(server):
    pass

def test_through_a_local_fixture_over_a_fixture(via_fixture):
    pass

def test_through_a_class():
    Job().go()

def test_through_usefixtures_below():
    pass

def test_through_a_renamed_import():
    execute(["ls"])

def test_ray():
    r.init()

def test_ray_imported_inside():
    ray = pytest.importorskip("ray")
    ray.init()

def helper_with_a_parameter_named_like_a_fixture(server):
    return server

def test_sweep(spec):
    run_sweep(spec)

def test_a_callback_passed_by_name():
    map(start_it, [])

@pytest.mark.slow
def test_slow_is_not_a_process_tier():
    signal_training()

@e2e
def test_marked_by_an_alias():
    start_it()

@pytest.mark.e2e
def test_marked(server):
    start_it()
"""


def test_the_scan_finds_every_way_an_unmarked_test_starts_a_process():
    source = SYNTHETIC.replace(
        "def test_through_usefixtures_below", '@pytest.mark.usefixtures("server")\ndef test_through_usefixtures_below'
    )
    scan = Scan({"servers": SERVERS, "helpers": HELPERS, "test_synthetic": source})
    offenders = dict(line.split(": ", 1) for line in scan.unmarked_starters())
    prefix = "test_synthetic::"
    assert set(offenders) == {
        prefix + name
        for name in (
            "test_through_a_helper_in_another_module",
            "test_through_an_imported_fixture",
            "test_through_a_local_fixture_over_a_fixture",
            "test_through_a_class",
            "test_through_usefixtures_below",
            "test_through_a_renamed_import",
            "test_ray",
            "test_ray_imported_inside",
            "test_sweep",
            "test_a_callback_passed_by_name",
            "test_slow_is_not_a_process_tier",
        )
    }
    assert (
        offenders[prefix + "test_through_a_helper_in_another_module"] == "start_it -> start_server -> subprocess.Popen"
    )
    assert offenders[prefix + "test_ray"] == "ray.init" and offenders[prefix + "test_sweep"] == "run_sweep"
    assert scan.tier_marks_on_helpers() == ["test_synthetic::signal_training"]
    assert scan.starts_at_collection() == []
    marked = Scan(
        {
            "servers": SERVERS,
            "helpers": HELPERS,
            "test_synthetic": "import pytest\npytestmark = [pytest.mark.e2e]\n" + SYNTHETIC,
        }
    )
    assert marked.unmarked_starters() == []


def test_the_scan_finds_a_module_that_starts_a_process_when_collected():
    source = "import subprocess\nfrom helpers import start_it\nVERSION = subprocess.run(['kubectl'])\n"
    assert Scan({"test_a": source}).starts_at_collection() == ["test_a: subprocess.run"]
    assert Scan(
        {"servers": SERVERS, "helpers": HELPERS, "test_b": "from helpers import start_it\nX = [start_it()]\n"}
    ).starts_at_collection() == ["test_b: start_it -> start_server -> subprocess.Popen"]
    assert Scan({"test_c": "import subprocess\nCOMMANDS = [subprocess.run]\n"}).starts_at_collection() == []


def test_an_autouse_fixture_in_conftest_counts():
    conftest = (
        "import pytest, subprocess\n@pytest.fixture(autouse=True)\ndef everywhere():\n    subprocess.run(['x'])\n"
    )
    scan = Scan({"conftest": conftest, "test_d": "def test_anything():\n    pass\n"})
    assert scan.unmarked_starters() == ["test_d::test_anything: fixture everywhere -> subprocess.run"]


def test_the_run_time_guard_tells_jobs_from_library_helpers():
    bin_dir = Path(sys.executable).parent
    for program in (sys.executable, "python3", bin_dir / "itrlab", bin_dir / "ray", bin_dir / "mlflow", "kubectl"):
        assert starts_a_job(program), program
    for program in ("git", "/bin/true", "ldconfig"):  # what MLflow, ctypes and the like run themselves
        assert not starts_a_job(program), program


def test_the_run_time_guard_is_on_in_a_test_without_a_process_tier():
    assert subprocess.Popen.__init__ is not UNGUARDED_POPEN_INIT
    with pytest.raises(pytest.fail.Exception, match="without @pytest.mark.e2e"):
        subprocess.Popen.__init__(None, [sys.executable, "-c", "pass"])  # refused before anything starts


@pytest.mark.e2e
def test_the_run_time_guard_is_off_in_a_process_tier():
    assert subprocess.Popen.__init__ is UNGUARDED_POPEN_INIT


@pytest.mark.parametrize("name", TIERS)
def test_the_tiers_are_registered(name):
    text = (TESTS.parent / "pyproject.toml").read_text(encoding="utf-8")
    assert f'"{name}: ' in text


def test_the_static_tool_module_alone_may_start_its_program():
    """A test that runs ruff through tests/lint_tools.py stays in the fast tier; the same call from any other
    helper module is a process start, and the run-time guard lets ruff through but not Python."""
    helper = "import subprocess\ndef ruff(*args):\n    return subprocess.run(['ruff', *args])\n"
    test = "from {0} import ruff\ndef test_lint():\n    ruff('check')\n"
    assert Scan({"lint_tools": helper, "test_l": test.format("lint_tools")}).unmarked_starters() == []
    assert Scan({"helpers": helper, "test_l": test.format("helpers")}).unmarked_starters() == [
        "test_l::test_lint: ruff -> subprocess.run"
    ]
    assert not starts_a_job(str(Path(sys.executable).parent / "ruff")) and starts_a_job(sys.executable)
