"""Faults inside a sweep, on one local Ray shared by the module: a data error inside a
trial, a trial killed more often than ``max_failures``, a cluster without room for a trial, and a grouped sweep
(one Tune trial per group, one MLflow child run and one row per member) whose diverging members stop while their
group goes on."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import ray
import yaml
from mlflow import MlflowClient

from conftest import write_precomp
from held import training_alone, trial_processes, trials_held
from itrlab.cli import main
from itrlab.errors import UserInputError
from itrlab.sweep import load_sweep, run_sweep, runner
from itrlab.tracking.chart_names import chart_name, flat_metrics

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    ray.init(address="local", num_cpus=2, log_to_driver=False, include_dashboard=False)
    yield
    ray.shutdown()


def write_sweep(path: Path, **fields) -> Path:
    spec = {
        "name": "fault_sweep",
        "experiment": "dbl_synthetic_tiny",
        "overrides": [f"dataset.root={path.parent / 'data'}"],
        "grid": {"cooperative.strategy": ["A"]},
        "seeds": [0],
        "resources": {"cpu": 1},
    }
    spec.update(fields)
    path.write_text(yaml.safe_dump(spec))
    return path


def sweep_runs(name: str):
    client = MlflowClient()
    experiment = client.get_experiment_by_name(name)
    runs = client.search_runs([experiment.experiment_id]) if experiment else []
    return (
        [r for r in runs if "mlflow.parentRunId" not in r.data.tags],
        [r for r in runs if "mlflow.parentRunId" in r.data.tags],
    )


def failures_of(sweep_dir: Path) -> list[int]:
    """How many times Tune saw each trial fail (its error.txt has one 'Failure #' line per failure)."""
    return [path.read_text().count("Failure #") for path in sorted((sweep_dir / "tune").glob("*/error.txt"))]


def test_data_error_inside_a_trial_is_shown_not_retried_and_fails_the_sweep(workdir, monkeypatch, capsys):
    """NaN features met inside the trials (the data on the node that runs them differs from what the
    driver checked: here the driver's check is skipped). Each trial fails once with the real error
    (not retried although max_failures is 2), its run is FAILED with the reason, no best trial is
    printed, the parent is FAILED and the exit status 1."""
    root = write_precomp(workdir / "precomp", {"train": 40, "dev": 10, "test": 10})
    features = np.load(root / "train_ims.npy")
    features[:] = np.nan
    np.save(root / "train_ims.npy", features)
    monkeypatch.setattr(runner, "check_trials", lambda spec, tree: {})
    monkeypatch.setattr(runner, "check_data_content", lambda config: None)  # the driver's content check too
    sweep = write_sweep(
        workdir / "sweep.yaml",
        name="nan_data",
        max_failures=2,
        grid={"cooperative.strategy": ["A", "F"]},
        overrides=["dataset.kind=precomp", f"dataset.root={root}", "train.batch_size=16"],
    )

    code = main(["sweep", "--sweep", str(sweep), "--storage", str(workdir / "sweeps")])
    out, err = capsys.readouterr()
    assert code == 1, out[-3000:] + err[-3000:]
    assert "best trial" not in out
    assert "NaN or infinite" in err and "TypeError" not in out + err
    assert "2 of 2 trials failed" in err
    (sweep_dir,) = (workdir / "sweeps" / "nan_data").iterdir()
    assert failures_of(sweep_dir) == [1, 1]  # no retry of an input error
    (parent,), kids = sweep_runs("nan_data")
    assert parent.info.status == "FAILED" and parent.data.tags["itrlab.stop_reason"] == "no trial finished"
    assert len(kids) == 2 and {k.info.status for k in kids} == {"FAILED"}
    for kid in kids:
        assert "train_ims.npy" in kid.data.tags["itrlab.stop_reason"]
        assert "NaN or infinite" in kid.data.tags["itrlab.stop_reason"]


def test_trial_killed_more_often_than_max_failures_ends_failed(workdir, capsys):
    """SIGKILL the trial's process (as the OOM killer would) with max_failures 0: its MLflow run, which
    the dead process never ended, ends FAILED with the reason; the parent FAILED; exit status 1."""
    sweep = write_sweep(
        workdir / "sweep.yaml",
        name="killed",
        max_failures=0,
        overrides=[f"dataset.root={workdir / 'data'}", "train.epochs=40"],
    )
    killed: list[int] = []

    def kill_after_first_epoch():
        def checkpointed() -> bool:  # the trial trains on after its first checkpoint
            return training_alone(workdir / "sweeps") and any((workdir / "sweeps").glob("killed/*/trials/*/epoch_*"))

        with trials_held(None, checkpointed, timeout=240) as workers:  # held: it cannot end before the kill
            for pid in trial_processes(workers):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)

    killer = threading.Thread(target=kill_after_first_epoch, daemon=True)
    killer.start()
    code = main(["sweep", "--sweep", str(sweep), "--storage", str(workdir / "sweeps")])
    killer.join(timeout=5)
    out, err = capsys.readouterr()
    assert killed, out[-3000:]
    assert code == 1, out[-3000:] + err[-3000:]
    assert "1 of 1 trials failed" in err and "died" in err
    (parent,), (kid,) = sweep_runs("killed")
    assert kid.info.status == "FAILED", kid.info.status
    assert "died" in kid.data.tags["itrlab.stop_reason"]
    assert parent.info.status == "FAILED"


def parent_table(run_id: str, name: str, dst: Path) -> dict:
    """A table artifact of a parent run as stored (pandas' split layout), column by column."""
    data = json.loads(Path(MlflowClient().download_artifacts(run_id, name, str(dst))).read_text())
    return {column: [row[i] for row in data["data"]] for i, column in enumerate(data["columns"])}


def test_resume_of_a_finished_sweep_changes_nothing_recorded(workdir, capsys):
    """--resume of a finished sweep with no trial left to run trains nothing and changes nothing recorded: the
    parent's end time, its metrics and tags (the report's among them) and its tables, one row per trial
    (MLflow's log_table appends to a table logged before, and turns ids that look like numbers into integers)."""
    sweep = load_sweep(
        write_sweep(
            workdir / "sweep.yaml",
            name="twice",
            table={"rows": ["cooperative.strategy"]},
            overrides=[f"dataset.root={workdir / 'data'}", "train.epochs=1"],
        )
    )
    first = run_sweep(sweep, storage=workdir / "sweeps")
    before = MlflowClient().get_run(first.parent_run_id)
    again = run_sweep(sweep, storage=workdir / "sweeps", resume=first.sweep_dir.name)  # a finished one: by its name
    assert again.unchanged and again.parent_run_id == first.parent_run_id
    after = MlflowClient().get_run(first.parent_run_id)
    assert (after.info.status, after.info.end_time) == ("FINISHED", before.info.end_time)
    assert after.data.metrics == before.data.metrics and after.data.tags == before.data.tags
    capsys.readouterr()
    assert (
        main(
            [
                "sweep",
                "--sweep",
                str(workdir / "sweep.yaml"),
                "--storage",
                str(workdir / "sweeps"),
                "--resume",
                first.sweep_dir.name,
            ]
        )
        == 0
    )
    assert f"{first.sweep_dir} finished and has no trial left to run: nothing was run" in capsys.readouterr().out
    ((parent,), (kid,)) = sweep_runs("twice")
    assert parent.info.run_id == first.parent_run_id and parent.info.status == "FINISHED"
    assert parent.info.end_time == before.info.end_time
    assert [m.step for m in MlflowClient().get_metric_history(kid.info.run_id, chart_name("rsum"))] == [
        1
    ]  # not trained again
    for index, dst in enumerate((workdir / "a", workdir / "b")):
        dst.mkdir()
        trials = parent_table(first.parent_run_id, "sweep/trials.json", dst)
        assert trials["trial"] == [kid.data.tags["itrlab.trial_id"]] and trials["status"] == ["finished"]
        assert parent_table(first.parent_run_id, "sweep/table.json", dst)["cooperative/strategy"] == ["A"]
        if index == 0:
            run_sweep(sweep, storage=workdir / "sweeps", resume=first.sweep_dir.name)


def test_resume_over_a_damaged_trial_state_is_refused_and_loses_nothing(workdir):
    """A trial's saved state cut short (a crash or a full disk while it was written by hand or by another tool:
    itrlab writes it atomically) is one line naming the file on --resume, and the runs stay as they were; Tune's
    own saved state cut short does not matter, since nothing reads it back."""
    sweep = load_sweep(
        write_sweep(
            workdir / "sweep.yaml", name="truncated", overrides=[f"dataset.root={workdir / 'data'}", "train.epochs=1"]
        )
    )
    first = run_sweep(sweep, storage=workdir / "sweeps")
    for state in (first.sweep_dir / "tune").glob("experiment_state-*.json"):
        state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])
    (final,) = (first.sweep_dir / "trials").glob("*/final.json")
    final.write_bytes(final.read_bytes()[: final.stat().st_size // 2])
    before = {r.info.run_id: r.info.status for r in sum(sweep_runs("truncated"), [])}
    with pytest.raises(UserInputError, match=f"{final}.*not valid JSON"):
        run_sweep(sweep, storage=workdir / "sweeps", resume=first.sweep_dir.name)
    assert {r.info.run_id: r.info.status for r in sum(sweep_runs("truncated"), [])} == before


def test_cluster_without_room_for_a_trial_fails_after_a_bounded_wait(workdir, monkeypatch, capsys):
    """A Ray that itrlab did not start (a cluster; here the module's 2-CPU Ray) and a trial of 8 CPUs:
    the sweep waits ITRLAB_RESOURCE_WAIT_S, then stops with exit status 2, before any MLflow run."""
    monkeypatch.setenv("ITRLAB_RESOURCE_WAIT_S", "2")
    sweep = write_sweep(workdir / "sweep.yaml", name="no_room")
    started = time.monotonic()
    code = main(["sweep", "--sweep", str(sweep), "--storage", str(workdir / "sweeps"), "--cpus-per-trial", "8"])
    seconds = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 2, err
    assert "no room for one trial (8 CPU)" in err and "ITRLAB_RESOURCE_WAIT_S" in err
    assert len(err.strip().splitlines()) == 1
    assert seconds < 30
    assert sweep_runs("no_room") == ([], [])
    assert list((workdir / "sweeps").glob("no_room/*")) == []  # no half-made sweep folder for --resume to find


def test_a_group_trains_its_members_as_runs_of_their_own(tmp_path, monkeypatch):
    """Margins 0.2 and 3e38 (its summed hinges overflow) x seeds 0, 1 at G = 4: one group, two step classes;
    the two 3e38 members diverge and end FAILED with the reason, the two others finish; four child runs."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    sweep = tmp_path / "grouped.yaml"
    sweep.write_text(
        yaml.safe_dump(
            {
                "name": "grouped_sweep",
                "experiment": "vsepp_synthetic_tiny",
                "overrides": [f"dataset.root={tmp_path / 'data'}", "train.epochs=1", "train.threads=1"],
                "grid": {"loss.margin": [0.2, 3.0e38]},
                "seeds": [0, 1],
                "resources": {"cpu": 1},
                "group": 4,
            }
        )
    )
    result = run_sweep(load_sweep(sweep), storage=tmp_path / "sweeps")
    status = {(row.params["loss.margin"], row.params["seed"]): row.status for row in result.rows}
    assert status == {(0.2, 0): "finished", (0.2, 1): "finished", (3.0e38, 0): "diverged", (3.0e38, 1): "diverged"}
    assert len({row.trial_id.rsplit("-m", 1)[0] for row in result.rows}) == 1  # one Tune trial
    client = MlflowClient()
    experiment = client.get_experiment_by_name("grouped_sweep")
    runs = client.search_runs(
        [experiment.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{result.parent_run_id}'"
    )
    assert len(runs) == 4 and {r.data.tags["itrlab.trial_id"] for r in runs} == {row.trial_id for row in result.rows}
    for run in runs:
        assert run.data.tags["itrlab.group_size"] == "4"
        if run.data.tags["param.loss.margin"] == "0.2":
            assert run.info.status == "FINISHED" and flat_metrics(run.data.metrics)["test_rsum"] > 0
            assert run.data.metrics["cpu_hours"] > 0
        else:
            assert run.info.status == "FAILED" and "loss became inf" in run.data.tags["itrlab.stop_reason"]
    assert all(Path(run.data.tags["run_dir"]).is_dir() for run in runs)
