"""What the MLflow UI shows of itrlab's runs: the machine-learning view of an experiment (its runs table,
not MLflow 3's GenAI overview), metrics without float noise, a sweep's variant by its name."""

from __future__ import annotations

from mlflow import MlflowClient

from itrlab.sweep.trial import trial_params, trial_tags
from itrlab.tracking import MlflowTracker
from itrlab.tracking import ui_hint
from itrlab.tracking.mlflow_tracker import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG


def test_experiments_are_model_training_and_links_open_the_runs_table(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = MlflowTracker("kinds", uri)
    client = MlflowClient(uri)
    assert client.get_experiment(tracker.experiment_id).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    other = client.create_experiment("made elsewhere")  # an experiment itrlab did not create: tagged when used
    assert EXPERIMENT_KIND_TAG not in client.get_experiment(other).tags
    MlflowTracker("made elsewhere", uri)
    assert client.get_experiment(other).tags[EXPERIMENT_KIND_TAG] == "custom_model_development"
    assert ui_hint("http://h:5000", "3").endswith("/#/experiments/3?workflowType=machine_learning")
    assert ui_hint(uri, "3", "abc").endswith("#/experiments/3/runs/abc?workflowType=machine_learning")


def test_metrics_are_stored_to_six_significant_digits(tmp_path):
    tracker = MlflowTracker("digits", f"sqlite:///{tmp_path / 'mlflow.db'}")
    run_id = tracker.start(run_name="r", tags={}, params={})
    tracker.log_final_metrics({"test_rsum": 31.799999999999997, "vs_baseline": 1.000000000000007,
                               "lr": 5e-05, "md": 0.000353123456, "nan": float("nan")})
    metrics = tracker.client.get_run(run_id).data.metrics
    assert metrics["test_rsum"] == 31.8 and metrics["vs_baseline"] == 1.0 and metrics["lr"] == 5e-05
    assert metrics["md"] == 0.000353123


def test_a_variant_is_logged_by_its_name(tmp_path):
    variant = {"name": "+M-DCL", "method.concepts": False, "method.pgc": False}
    params = {"variant": variant, "seed": 1}
    tags = trial_tags("t1", "coder_table2", params)
    assert tags["param.variant"] == "+M-DCL" and tags["param.seed"] == 1
    assert tags["param.variant.settings"] == '{"method.concepts": false, "method.pgc": false}'
    tracker = MlflowTracker("variants", f"sqlite:///{tmp_path / 'mlflow.db'}")
    tracker.default_params = trial_params(params)
    run_id = tracker.start(run_name="+M-DCL seed=1", tags=tags, params={"train.lr": "0.0005"})
    logged = tracker.client.get_run(run_id).data
    assert logged.params == {"variant": "+M-DCL", "train.lr": "0.0005"} and logged.tags["param.variant"] == "+M-DCL"
