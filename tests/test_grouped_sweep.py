"""A grouped sweep on a local Ray: one Tune trial per group, one MLflow child run and one row per member,
a diverging member stopped while its group goes on (issue #32)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

from itrlab.sweep import load_sweep, run_sweep
from itrlab.tracking.chart_names import flat_metrics
from test_faults_sweep import ray_session  # noqa: F401  (a local Ray of 2 CPUs for this module)

pytestmark = pytest.mark.e2e


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
