"""A real ``mlflow server`` (SQLite backend) on loopback: train a tiny model against it, read it back."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import mlflow
import pytest
from mlflow import MlflowClient

from conftest import REPO
from itrlab.tracking.chart_names import chart_name, flat_metrics
from servers import mlflow_server

pytestmark = pytest.mark.e2e

RECALL_KEYS = ["i2t_R1", "i2t_R5", "i2t_R10", "t2i_R1", "t2i_R5", "t2i_R10", "rsum"]


def test_training_logs_to_a_real_mlflow_server(tmp_path):
    with mlflow_server(tmp_path) as uri:
        env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "ITRLAB_CONFIG_DIR": str(REPO / "configs")}
        done = subprocess.run(
            [
                sys.executable,
                str(REPO / "jobs" / "train.py"),
                "-c",
                "vsepp_synthetic_tiny",
                "train.epochs=2",
                "--run-dir",
                str(tmp_path / "run"),
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"{uri}/#/experiments/" in done.stdout

        client = MlflowClient(tracking_uri=uri)
        experiment = client.get_experiment_by_name("vsepp_synthetic_tiny")
        runs = client.search_runs([experiment.experiment_id])
        assert len(runs) == 1
        run = runs[0]
        assert run.info.status == "FINISHED"
        assert run.data.params["loss.name"] == "vsepp" and run.data.params["train.epochs"] == "2"
        assert {run.data.tags[k] for k in ("method", "dataset", "protocol", "seed")} == {
            "vsepp",
            "synthetic_tiny",
            "all",
            "0",
        }

        # per-epoch validation metrics, one value per epoch
        for key in [*RECALL_KEYS, "loss", "loss_i2t", "loss_t2i"]:
            history = client.get_metric_history(run.info.run_id, chart_name(key))
            assert [m.step for m in history] == [1, 2], key
        # the final test table: metrics, an MLflow table, JSON and Markdown artifacts
        for key in RECALL_KEYS:
            assert f"test_{key}" in flat_metrics(run.data.metrics)
        mlflow.set_tracking_uri(uri)
        mlflow.set_experiment("vsepp_synthetic_tiny")
        table = mlflow.load_table("recall/test_table.json", run_ids=[run.info.run_id])
        assert list(table["direction"]) == ["i2t", "t2i"]
        local = client.download_artifacts(run.info.run_id, "recall/test.json", str(tmp_path))
        saved = json.loads(open(local).read())
        assert saved["protocol"] == "all"
        assert saved["rsum"] == pytest.approx(flat_metrics(run.data.metrics)["test_rsum"])
        assert saved == json.loads((tmp_path / "run" / "test_recall.json").read_text())

        # the run's model: `itrlab evaluate` downloads it through the server and gives its test table
        evaluated = subprocess.run(
            [
                sys.executable,
                "-m",
                "itrlab.cli",
                "evaluate",
                f"runs:/{run.info.run_id}/model",
                "--out",
                str(tmp_path / "evaluated.json"),
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert evaluated.returncode == 0, evaluated.stdout + evaluated.stderr
        tables = json.loads((tmp_path / "evaluated.json").read_text())
        assert tables["members"][f"runs:/{run.info.run_id}/model"] == saved
        evaluation = client.get_run(evaluated.stdout.strip().splitlines()[-1].split()[2])
        assert evaluation.data.tags["itrlab.source_run.1"] == run.info.run_id

        # the model registered through the server (which checks a runs:/ source against the version's run), read
        # back by models:/ (the registry's round trip on a sweep's rows: tests/test_sweep.py)
        from itrlab.tracking import MlflowTracker
        from itrlab.tracking.model_registry import RowModels, VersionSpec

        row = RowModels("tiny-budget-A", "row A", {}, (VersionSpec(run.info.run_id, "seed 0", {"itrlab.seed": "0"}),))
        (done,) = MlflowTracker.for_reading(uri).register_rows([row])
        assert (done.uri, done.new) == ("models:/tiny-budget-A/1", True)
        assert client.get_model_version("tiny-budget-A", "1").source == f"runs:/{run.info.run_id}/model"
        evaluated = subprocess.run(
            [sys.executable, "-m", "itrlab.cli", "evaluate", done.uri, "--no-tracking", "--out", tmp_path / "v1.json"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert evaluated.returncode == 0, evaluated.stdout + evaluated.stderr
        assert json.loads((tmp_path / "v1.json").read_text())["members"][done.uri] == saved
