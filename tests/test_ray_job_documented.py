"""docs/sweeps.md's Ray job as a user runs it: the commands of its "Running on a Ray cluster" block, in order and
as written, in a fresh clone of the project and a fresh home (no ``~/.ray/auth_token``), on this test's own ports
and temp folder. The head starts with token authentication, the smoke sweep runs as a Ray job and succeeds, its
data is made once where the page puts it, a sweep without ``RAY_ADDRESS`` starts a Ray of its own beside the head,
the page's stop ends this head alone (never ``ray stop``: other Rays run on this machine), and the page's
``ray job submit`` line is the one ``--dry-run`` prints for its job."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from mlflow import MlflowClient

from conftest import REPO
from documented.catalogue import shell_blocks, shell_lines
from itrlab.ray_head import Head, stop_head
from itrlab.tracking.chart_names import flat_metrics
from servers import free_port

pytestmark = pytest.mark.e2e
BIN = Path(sys.executable).parent
PAGE = REPO / "docs" / "sweeps.md"
SECTION = "## Running on a Ray cluster"
TEMP_DIR = "/tmp/itrlab-ray"  # the page's; each port below is the page's too, and each is replaced by this test's own
PORTS = ("6390", "8275", "20001", "20002")  # GCS, dashboard, client server, dashboard agent


def page_commands() -> list[str]:
    """The commands of the section's first shell block, one a line, as a shell reads them."""
    text = PAGE.read_text(encoding="utf-8")
    section = text[text.index(SECTION) :]
    section = section[: section.index("\n## ", len(SECTION))]
    return shell_lines(shell_blocks(section)[0])


def fresh_clone(folder: Path) -> Path:
    """The project's files as a clone has them (tracked, and new files git does not ignore; no links)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (entry.decode() for entry in listed)):
        source = REPO / name
        if source.is_file() and not source.is_symlink():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, folder / name)
    return folder


def shell_words(line: str, cwd: Path, env: dict[str, str]) -> list[str]:
    """The words of ``line`` (a command) as bash reads them in ``cwd``: quotes removed, ``$PWD`` expanded."""
    printed = subprocess.run(
        ["bash", "-e", "-c", f"printf '%s\\0' {line}"], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert printed.returncode == 0, printed.stderr
    return printed.stdout.split("\0")[:-1]


def dashboard_get(port: str, path: str, token: str | None) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", headers={"Authorization": f"Bearer {token}"} if token else {}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, {}


def verdict_on_converged_rows(client: MlflowClient, runs: list, output: str, tmp_path: Path) -> None:
    """`make sweep`'s preset (``smoke``) as it ends: 3 seeds of A and F, every row converged by the report's rule,
    A off its max-of-hinges plateau, and a headline with a paired interval on data it names as synthetic."""
    (parent,) = [run for run in runs if "mlflow.parentRunId" not in run.data.tags]
    summary = json.loads(
        Path(client.download_artifacts(parent.info.run_id, "sweep/summary.json", str(tmp_path))).read_text()
    )
    assert summary["seeds"] == [0, 1, 2]
    assert {row: found["still_learning"] for row, found in summary["convergence"].items()} == {"A": "", "F": ""}
    headline = summary["headline"]
    assert re.search(r"[+-]\d+\.\d ± \d+\.\d .*paired by seed", headline), headline
    assert headline.endswith("; on synthetic data: synthetic_smoke"), headline
    for child in runs:  # the baseline off its max-of-hinges plateau (2 x margin 0.2 x batch 32); spread
        if child is parent:
            continue
        metrics = flat_metrics(child.data.metrics)
        assert metrics["test_md"] > 0.1, (child.data.tags, metrics)
        if child.data.tags["param.cooperative.strategy"] == "A":
            assert metrics["loss"] < 0.5 * 2 * 0.2 * 32, metrics
    assert headline in output


@pytest.mark.slow  # the smoke sweep, 6 trials of 6 epochs
def test_the_documented_ray_job_runs_from_a_fresh_home_and_stops_only_its_head(tmp_path):
    commands = page_commands()
    assert commands[-1] == f"itrlab ray-stop {TEMP_DIR}" and "ray stop" not in "\n".join(commands)
    script = "\n".join(commands)
    assert all(port in script for port in PORTS) and TEMP_DIR in script, "the page's ports or temp folder changed"
    ours = {port: str(free_port()) for port in PORTS}
    temp = tempfile.mkdtemp(prefix="itrlab-ray-", dir="/tmp")  # short: Ray's socket paths live under it
    script = re.sub(r"\b(" + "|".join(PORTS) + r")\b", lambda m: ours[m.group(1)], script).replace(TEMP_DIR, temp)
    *run, stop = script.splitlines()
    dashboard = ours["8275"]

    clone, home = fresh_clone(tmp_path / "itrlab"), tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MLFLOW_", "ITRLAB_"))}
    env.update(HOME=str(home), PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", PYTHONUNBUFFERED="1")
    log = tmp_path / "page.log"
    try:
        with open(log, "w") as out:  # the head's processes leave with bash's session, not this test's group
            done = subprocess.run(
                ["bash", "-e", "-c", "\n".join(run)],
                cwd=clone,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=1500,
                start_new_session=True,
            )
        output = log.read_text()
        assert done.returncode == 0, output[-6000:]
        # a fresh home: the page made the token, and the head asks every request for it
        token = (home / ".ray" / "auth_token").read_text().strip()
        assert dashboard_get(dashboard, "/api/jobs/", None)[0] == 401
        (job,) = re.findall(r"Job '(raysubmit_\w+)' succeeded", output)
        status, info = dashboard_get(dashboard, f"/api/jobs/{job}", token)
        assert status == 200 and info["status"] == "SUCCEEDED", info

        # the paths on the cluster: one MLflow store, the data made once where the page puts it, no line about
        # relative paths in the job's copy
        assert "a Ray job: working in its copy" not in output, output[-6000:]
        assert (clone / "data" / "synthetic" / "smoke" / "train_caps.txt").is_file()
        client = MlflowClient(tracking_uri=f"sqlite:///{clone / 'mlflow.db'}")
        runs = client.search_runs([client.get_experiment_by_name("dbl_smoke").experiment_id])
        assert len(runs) == 7 and {run.info.status for run in runs} == {"FINISHED"}  # the parent and 6 trials
        assert any((clone / "runs" / "sweeps" / "dbl_smoke").iterdir())
        trials = [run for run in runs if "mlflow.parentRunId" in run.data.tags]
        assert all("test_rsum" in flat_metrics(run.data.metrics) for run in trials)
        verdict_on_converged_rows(client, runs, output, tmp_path)

        # beside this head, a sweep without RAY_ADDRESS starts a Ray of its own
        local = subprocess.run(
            [
                sys.executable,
                "-c",
                "import ray; from itrlab.sweep.cluster import init_ray; "
                f"print(init_ray('sqlite:///{tmp_path / 'unused.db'}'), ray.get_runtime_context().gcs_address)",
            ],
            cwd=clone,
            env=env | {"RAY_AUTH_MODE": "token"},  # as the page's shell exports it
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert local.returncode == 0, local.stderr[-3000:]
        started_own, address = local.stdout.split()[-2:]
        assert started_own == "True" and not address.endswith(f":{ours['6390']}"), local.stdout

        head = Head.of(temp)
        assert head.processes(), "the head stopped before the page's stop"
        stopped = subprocess.run(
            ["bash", "-e", "-c", stop], cwd=clone, env=env, capture_output=True, text=True, timeout=120
        )
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert stopped.stdout.startswith(f"itrlab: stopped the Ray head of {temp} (GCS "), stopped.stdout
        assert not head.processes()

        # the page's `ray job submit` line is the one the dry run of its job prints, word for word as bash reads them
        (submit,) = [line for line in commands if line.startswith("ray job submit ")]
        dry = subprocess.run(
            ["bash", "-e", "-c", f"{submit.split(' -- ', 1)[1]} --dry-run"],
            cwd=clone,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert dry.returncode == 0, dry.stderr[-3000:]
        printed = dry.stdout.split("on a Ray cluster", 1)[1].split("\n", 1)[1].replace("\\\n", " ")
        assert shlex.split(printed) == ["RAY_AUTH_MODE=token", *shell_words(submit, clone, env)], printed
    finally:
        if any(Path(temp).iterdir()):  # Ray wrote there: this test's head alone, whatever happened above
            stop_head(temp)
        shutil.rmtree(temp, ignore_errors=True)
