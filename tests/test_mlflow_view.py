"""What the MLflow UI shows of itrlab's runs: the machine-learning view of an experiment (its runs table,
not MLflow 3's GenAI overview), a sweep's trials in a saved view, the one `mlflow ui` command, metrics
in chart sections (test recalls first) and without float noise, read back by itrlab's names, a sweep's
variant by its name."""

from __future__ import annotations

import json

from mlflow import MlflowClient

from conftest import REPO
from itrlab.config.sweep import load_sweep
from itrlab.sweep.runs_table import trials_view
from itrlab.sweep.trial import trial_params, trial_tags
from itrlab.tracking import MlflowTracker, ui_hint
from itrlab.tracking.chart_names import chart_name, flat_name
from itrlab.tracking.mlflow_tracker import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG
from itrlab.tracking.runs_view import KEEP_VIEWS, PINNED_WIDTHS
from itrlab.tracking.store import ui_command, ui_fragment


def test_experiments_are_model_training_and_links_open_the_runs_table(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = MlflowTracker("kinds", uri)
    client = MlflowClient(uri)
    assert client.get_experiment(tracker.experiment_id).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND
    other = client.create_experiment("made elsewhere")  # an experiment itrlab did not create: tagged when used
    assert EXPERIMENT_KIND_TAG not in client.get_experiment(other).tags
    MlflowTracker("made elsewhere", uri)
    assert client.get_experiment(other).tags[EXPERIMENT_KIND_TAG] == "custom_model_development"
    assert ui_hint("http://h:5000", "3") == "open http://h:5000/#/experiments/3/runs?workflowType=machine_learning"
    assert ui_hint(uri, "3", "abc").endswith("#/experiments/3/runs/abc/model-metrics?workflowType=machine_learning")
    assert (
        ui_hint("http://h:5000/", "3", view="itrlab-x")
        == "open http://h:5000/#/experiments/3/runs?viewStateShareKey=itrlab-x&workflowType=machine_learning"
    )
    # a sweep's link: its parent's Overview; the links its description holds: the part after the `#`
    assert ui_hint(uri, "3", "abc", tab="overview").endswith(
        "/#/experiments/3/runs/abc/overview?workflowType=machine_learning"
    )
    assert (
        ui_fragment("3", "abc", artifact="sweep/report.html")
        == "#/experiments/3/runs/abc/artifacts/sweep/report.html?workflowType=machine_learning"
    )


def test_the_printed_ui_command_is_the_one_the_docs_give(monkeypatch):
    """The venv's mlflow (not a bare `mlflow`, off PATH without the venv activated), one worker, MLflow's
    job runner off, on loopback: printed by every run, and shown by docs/mlflow.md and the README."""
    monkeypatch.chdir(REPO)
    command = ui_command("sqlite:///HERE/mlflow.db")
    assert command == (
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false .venv/bin/mlflow ui --backend-store-uri "
        "sqlite:///HERE/mlflow.db --host 127.0.0.1 --port 5000 --workers 1"
    )
    documented = command.replace("HERE", "$PWD")
    assert documented in (REPO / "docs" / "mlflow.md").read_text() and documented in (REPO / "README.md").read_text()
    assert (
        f"run `{command}` and open http://127.0.0.1:5000/#/experiments/1/runs/r/model-metrics?workflowType=machine_learning"
        == ui_hint("sqlite:///HERE/mlflow.db", "1", "r")
    )


def test_a_sweeps_view_shows_its_trials_with_their_values_and_results_first(tmp_path):
    """The saved view a sweep's link opens: its parent's children, flat, best test rsum first; as its first
    columns the test rsum (by its MLflow name), the six recalls' column, the swept values and the seed, then the
    other test results; MLflow's own pinned columns narrowed; saved as MLflow's "Save view" saves one, replaced
    when saved again, and only itrlab's newest views kept."""
    spec = load_sweep("dbl_tiny")
    view = trials_view(spec, "20261126-085735", "p1")
    assert view.search == "tags.`mlflow.parentRunId` = 'p1'" and view.order_by == "test_rsum" and not view.ascending
    assert view.columns() == [
        "metrics.`1_test-sum/rsum`",
        "tags.`test i2t R1 R5 R10 / t2i R1 R5 R10`",
        "tags.`param.cooperative.strategy`",
        "tags.`param.seed`",
        "metrics.`1_test/i2t_R01`",
        "metrics.`1_test/t2i_R01`",
        "metrics.`1_test/i2t_R05`",
        "metrics.`1_test/t2i_R05`",
        "metrics.`best_val_rsum`",
        "metrics.`1_test_rank/md`",
    ]
    state = view.state()
    assert state["orderByKey"] == "metrics.`1_test-sum/rsum`" and state["selectedColumns"] == view.columns()
    assert state["columnOrder"] == [*PINNED_WIDTHS, *view.columns()] and set(state["columnWidths"]) == {
        *PINNED_WIDTHS,
        *view.columns(),
    }
    tracker = MlflowTracker("views", f"sqlite:///{tmp_path / 'mlflow.db'}")
    tracker.client.set_experiment_tag(tracker.experiment_id, "mlflow.sharedViewState.mine", "a person's view")
    for i in range(KEEP_VIEWS + 3):
        tracker.save_view(f"itrlab-{i}", view)
    tracker.save_view("itrlab-0", view)  # again: replaced, not added
    tags = tracker.client.get_experiment(tracker.experiment_id).tags
    ours = [key for key in tags if key.startswith("mlflow.sharedViewState.itrlab-")]
    assert len(ours) == KEEP_VIEWS and "mlflow.sharedViewState.itrlab-0" in ours
    assert tags["mlflow.sharedViewState.mine"] == "a person's view"
    envelope = json.loads(tags["mlflow.sharedViewState.itrlab-0"])
    assert envelope["name"] == "dbl_tiny 20261126-085735: trials" and json.loads(envelope["state"]) == state


def test_metrics_are_stored_to_six_significant_digits(tmp_path):
    tracker = MlflowTracker("digits", f"sqlite:///{tmp_path / 'mlflow.db'}")
    run_id = tracker.start(run_name="r", tags={}, params={})
    tracker.log_final_metrics(
        {
            "test_rsum": 31.799999999999997,
            "vs_baseline": 1.000000000000007,
            "lr": 5e-05,
            "md": 0.000353123456,
            "nan": float("nan"),
        }
    )
    metrics = tracker.metrics(run_id)
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


def test_a_reopened_run_points_at_where_it_lives_now(tmp_path):
    """A trial restarted after its driver died may train in a new folder: reopening its run updates the
    tags that say where it lives (its ``run_dir``), keeps the others."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    first = MlflowTracker("moved", uri)
    first.default_tags = {"run_dir": "/sweep/tune/trial_a", "itrlab.trial_id": "t1"}
    run_id = first.start(run_name="t1", tags={"kept": "yes"}, params={})
    first.end("KILLED")
    again = MlflowTracker("moved", uri)
    again.default_tags = {"run_dir": "/sweep/tune/trial_b", "itrlab.trial_id": "t1"}
    assert again.start(run_name="t1", tags={}, params={}, run_id=run_id) == run_id
    tags = MlflowClient(uri).get_run(run_id).data.tags
    assert (tags["run_dir"], tags["itrlab.trial_id"], tags["kept"]) == ("/sweep/tune/trial_b", "t1", "yes")


def test_a_run_resumed_at_other_code_keeps_every_commit_it_ran_under(tmp_path, monkeypatch):
    """A sweep resumed after a change of code: its runs say the commit now (MLflow's tag) and every commit they
    ran under, oldest first; a resume at the same commit adds none, a run never resumed has no history."""
    from itrlab.tracking import mlflow_tracker
    from itrlab.tracking.store import COMMITS_TAG

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"

    def open_at(commit: str, run_id: str | None = None) -> tuple[str, dict[str, str]]:
        monkeypatch.setattr(mlflow_tracker, "source_tags", lambda: {"mlflow.source.git.commit": commit})
        tracker = MlflowTracker("resumed", uri)
        run_id = tracker.start(run_name="sweep", tags={}, params={}, run_id=run_id)
        tracker.end("KILLED")
        return run_id, MlflowClient(uri).get_run(run_id).data.tags

    run_id, tags = open_at("aaa")
    assert tags["mlflow.source.git.commit"] == "aaa" and COMMITS_TAG not in tags
    _, tags = open_at("aaa", run_id)
    assert COMMITS_TAG not in tags
    _, tags = open_at("bbb", run_id)
    assert (tags["mlflow.source.git.commit"], tags[COMMITS_TAG]) == ("bbb", "aaa bbb")
    _, tags = open_at("bbb", run_id)
    assert tags[COMMITS_TAG] == "aaa bbb"
    _, tags = open_at("ccc", run_id)
    assert (tags["mlflow.source.git.commit"], tags[COMMITS_TAG]) == ("ccc", "aaa bbb ccc")


def test_metrics_go_into_chart_sections_and_come_back_by_their_names(tmp_path):
    """MLflow's UI shows a metric in the chart section named by its prefix up to a `/`, named sections sorted
    first: the test recalls, their ranks, the validation table, the training loss, the method's parts of its
    loss, another branch's table, a random ranking's; the rest keep their names (the UI's "Model metrics",
    last). Every name read back (latest values, histories, a sweep's trials) is itrlab's, the flat one Ray Tune
    and the reports use."""
    sections = {
        name: chart_name(name)
        for name in (
            "test_rsum",
            "test_i2t_R1",
            "test_md",
            "rsum",
            "t2i_meanr",
            "loss",
            "loss_i2t",
            "lr",
            "epoch_seconds",
            "loss_cooperative",
            "loss_task_mdcl",
            "anchor_rsum",
            "anchor2_i2t_R5",
            "member1_rsum",
            "chance_t2i_R10",
            "chance_rsum_high",
            "best_val_rsum",
            "best_epoch",
            "best_rsum",
            "cpu_hours",
            "best_row_test_rsum_mean",
        )
    }
    assert sections == {
        "test_rsum": "1_test-sum/rsum",
        "test_i2t_R1": "1_test/i2t_R01",
        "test_md": "1_test_rank/md",
        "rsum": "2_val/rsum",
        "t2i_meanr": "2_val/t2i_meanr",
        "loss": "3_train/loss",
        "loss_i2t": "3_train/loss_i2t",
        "lr": "3_train/lr",
        "epoch_seconds": "3_train/epoch_seconds",
        "loss_cooperative": "4_loss/cooperative",
        "loss_task_mdcl": "4_loss/task_mdcl",
        "anchor_rsum": "5_anchor/rsum",
        "anchor2_i2t_R5": "5_anchor2/i2t_R05",
        "member1_rsum": "5_member1/rsum",
        "chance_t2i_R10": "6_chance/t2i_R10",
        "chance_rsum_high": "6_chance/rsum_high",
        "best_val_rsum": "best_val_rsum",
        "best_epoch": "best_epoch",
        "best_rsum": "best_rsum",
        "cpu_hours": "cpu_hours",
        "best_row_test_rsum_mean": "best_row_test_rsum_mean",
    }
    assert all(flat_name(logged) == name for name, logged in sections.items())
    order = sorted({logged.rpartition("/")[0] for logged in sections.values()} - {""})  # as the UI sorts them
    assert order == [
        "1_test",
        "1_test-sum",
        "1_test_rank",
        "2_val",
        "3_train",
        "4_loss",
        "5_anchor",
        "5_anchor2",
        "5_member1",
        "6_chance",
    ]
    assert flat_name("1_test/rsum") == "test_rsum"  # a run logged before rsum had a section of its own
    assert flat_name("1_test/i2t_R1") == "test_i2t_R1" and flat_name("2_val/t2i_R5") == "t2i_R5"  # one-digit K
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = MlflowTracker("sections", uri)
    run_id = tracker.start(run_name="r", tags={}, params={})
    for epoch in (1, 2):
        tracker.log_metrics({"loss": 3.0 - epoch, "rsum": 10.0 * epoch, "loss_cooperative": 0.5}, step=epoch)
    tracker.log_final_metrics({"test_rsum": 31.8, "best_epoch": 2})
    assert set(MlflowClient(uri).get_run(run_id).data.metrics) == {
        "3_train/loss",
        "2_val/rsum",
        "4_loss/cooperative",
        "1_test-sum/rsum",
        "best_epoch",
    }
    assert tracker.metrics(run_id) == {
        "loss": 1.0,
        "rsum": 20.0,
        "loss_cooperative": 0.5,
        "test_rsum": 31.8,
        "best_epoch": 2.0,
    }
    assert tracker.metric_history(run_id, "rsum") == [(1, 10.0), (2, 20.0)]


def test_the_recall_charts_sort_as_the_papers_print_them():
    """MLflow's UI sorts a section's charts by name in code units (``Array.sort``): the recalls' names sort R@1, R@5,
    R@10, image to text first, in the test section, the validation section and another branch's."""
    from itrlab.eval.names import RECALLS

    for name_of in (lambda r: f"test_{r}", lambda r: r, lambda r: f"anchor_{r}"):
        names = [chart_name(name_of(recall)) for recall in RECALLS]  # i2t R1 R5 R10, t2i R1 R5 R10
        assert sorted(names) == names, names
        assert [flat_name(name) for name in names] == [name_of(recall) for recall in RECALLS]


def test_a_run_logged_with_one_digit_recalls_keeps_their_names_when_it_resumes(tmp_path):
    """A run logged with ``2_val/i2t_R1`` (before the two-digit K) reads back the same and, reopened, goes on
    under those names: its charts are not split in two; a metric it never logged gets the current name."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    tracker = MlflowTracker("one_digit", uri)
    run_id = tracker.start(run_name="r", tags={}, params={})
    client.log_metric(run_id, "2_val/i2t_R1", 10.0, step=1)  # as itrlab logged it before
    tracker.end("KILLED")
    again = MlflowTracker("one_digit", uri)
    again.start(run_name="r", tags={}, params={}, run_id=run_id)
    again.log_metrics({"i2t_R1": 12.0, "i2t_R5": 30.0}, step=2)
    assert set(client.get_run(run_id).data.metrics) == {"2_val/i2t_R1", "2_val/i2t_R05"}
    assert again.metric_history(run_id, "i2t_R1") == [(1, 10.0), (2, 12.0)]
    assert again.metrics(run_id) == {"i2t_R1": 12.0, "i2t_R5": 30.0}


def test_a_run_logged_with_flat_names_reads_back_and_keeps_them_when_it_resumes(tmp_path):
    """A run logged before the chart sections (flat names) reads back as any other; reopened by a --resume, it
    goes on under its flat names, so that none of its charts is split in two."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    tracker = MlflowTracker("old", uri)
    run_id = tracker.start(run_name="old", tags={}, params={})
    for key, value in {"loss": 2.0, "rsum": 10.0, "anchor_rsum": 5.0}.items():
        client.log_metric(run_id, key, value, step=1)  # as itrlab logged them before
    client.log_metric(run_id, "train_seconds", 60.0, step=0)
    tracker.end("KILLED")
    again = MlflowTracker("old", uri)
    again.start(run_name="old", tags={}, params={}, run_id=run_id)
    again.log_metrics({"loss": 1.0, "rsum": 20.0, "anchor_rsum": 6.0}, step=2)
    again.log_final_metrics({"test_rsum": 31.8})
    assert set(client.get_run(run_id).data.metrics) == {"loss", "rsum", "anchor_rsum", "train_seconds", "test_rsum"}
    assert again.metric_history(run_id, "rsum") == [(1, 10.0), (2, 20.0)]
    assert again.run_metrics(("train_seconds", "test_rsum", "md")) == {"train_seconds": 60.0, "test_rsum": 31.8}


def test_a_runs_test_table_gives_its_six_recalls_one_column(tmp_path):
    """The test table's six recalls also go to one tag, the runs table's column of them (R@1, R@5, R@10 image to
    text, then text to image); a validation table, or a run without all six, sets none."""
    from itrlab.eval import RecallTable
    from itrlab.tracking.runs_view import RECALLS_TAG, recalls_summary

    table = RecallTable(
        protocol="all", n_images=1000, n_folds=1, i2t_r1=25.0, i2t_r5=54.1, i2t_r10=66.6, t2i_r1=19.7,
        t2i_r5=37.84, t2i_r10=47.26, rsum=250.5, i2t_medr=5.0, i2t_meanr=20.44, t2i_medr=13.0, t2i_meanr=78.43,
        md=0.0022,
    )  # fmt: skip
    tracker = MlflowTracker("summary", f"sqlite:///{tmp_path / 'mlflow.db'}")
    run_id = tracker.start(run_name="r", tags={}, params={})
    tracker.log_recall_table(table, "val", epoch=1)
    assert RECALLS_TAG not in tracker.client.get_run(run_id).data.tags
    tracker.log_recall_table(table, "test", epoch=1)
    assert tracker.client.get_run(run_id).data.tags[RECALLS_TAG] == "25.0 54.1 66.6 / 19.7 37.8 47.3"
    assert recalls_summary({"test_i2t_R1": 1.0}) is None
