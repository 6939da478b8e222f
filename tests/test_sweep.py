"""Sweeps on a local Ray (one session for the module) with a SQLite MLflow store, on tiny data."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest
import ray
import yaml
from mlflow import MlflowClient

from browser import CHROMIUM, NEEDS_CHROMIUM, browser_dom
from itrlab.cli import main
from itrlab.sweep import load_sweep, run_sweep
from itrlab.tracking.chart_names import chart_name, flat_metrics

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    # logical CPUs to spare on 2 cores: a TorchTrainer trial runs its controller beside its workers
    ray.init(address="local", num_cpus=4, log_to_driver=False)  # with the dashboard, which frees finished TorchTrainers
    yield
    ray.shutdown()


def write_sweep(path: Path, **fields) -> Path:
    spec = {
        "name": "tiny_sweep",
        "experiment": "dbl_synthetic_tiny",
        "overrides": [f"dataset.root={path.parent / 'data'}"],
        "grid": {"cooperative.strategy": ["A", "F"]},
        "seeds": [0],
        "resources": {"cpu": 1},
        "table": {"rows": ["cooperative.strategy"], "paper": "dbl_table4"},
    }
    spec.update(fields)
    path.write_text(yaml.safe_dump(spec))
    return path


def children(client: MlflowClient, experiment: str, parent_id: str):
    exp = client.get_experiment_by_name(experiment)
    return client.search_runs([exp.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{parent_id}'")


@pytest.fixture(scope="module")
def tiny_sweep(tmp_path_factory):
    """A finished two-trial sweep (A and F) and its folder; the MLflow store is its folder's mlflow.db."""
    workdir = tmp_path_factory.mktemp("tiny_sweep")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(workdir)
        patch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{workdir / 'mlflow.db'}")
        result = run_sweep(load_sweep(write_sweep(workdir / "sweep.yaml")), storage=workdir / "sweeps")
    return workdir, result


def test_two_trial_sweep_logs_one_parent_and_two_children(tiny_sweep, monkeypatch):
    workdir, result = tiny_sweep
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{workdir / 'mlflow.db'}")
    assert sorted(row.status for row in result.rows) == ["finished", "finished"]
    client = MlflowClient()
    exp = client.get_experiment_by_name("tiny_sweep")
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert [p.info.run_id for p in parents] == [result.parent_run_id]
    assert parents[0].info.status == "FINISHED"
    assert parents[0].data.tags["itrlab.command_overrides"] == "[]"  # run as declared: the board may read it
    kids = children(client, "tiny_sweep", result.parent_run_id)
    assert len(kids) == 2 and {k.info.status for k in kids} == {"FINISHED"}
    assert {k.data.tags["param.cooperative.strategy"] for k in kids} == {"A", "F"}
    # runs named by what they vary, filterable apart from plain VSE++, described, with their source
    assert {k.info.run_name for k in kids} == {"strategy=A seed=0", "strategy=F seed=0"}
    assert {k.data.tags["cooperative"] for k in kids} == {"oss strategy=A", "oss strategy=F"}
    for kid in kids:
        assert kid.data.tags["mlflow.note.content"].startswith("dbl_synthetic_tiny: method vsepp")
        assert kid.data.tags["mlflow.user"] and kid.data.tags["mlflow.source.name"]
        (data_input,) = kid.inputs.dataset_inputs  # the Dataset column: name and digest of the data
        assert data_input.dataset.name == "synthetic_tiny" and len(data_input.dataset.digest) == 16
        metrics = flat_metrics(kid.data.metrics)  # itrlab's names of its MLflow metrics (1_test-sum/rsum: test_rsum)
        assert metrics["cpu_hours"] > 0
        assert [m.step for m in client.get_metric_history(kid.info.run_id, chart_name("rsum"))] == [1, 2]
        assert "test_rsum" in metrics
        boosted = kid.data.tags["param.cooperative.strategy"] == "F"
        assert ("anchor_rsum" in metrics) == boosted  # the anchor's recall is logged too
        assert "loss_cooperative" in metrics if boosted else "loss_i2t" in metrics
        names = {a.path for a in client.list_artifacts(kid.info.run_id, "recall")}
        assert "recall/test_table.json" in names
    artifacts = {a.path for a in client.list_artifacts(result.parent_run_id, "sweep")}
    assert {
        "sweep/trials.json",
        "sweep/table.json",
        "sweep/summary.md",
        "sweep/report.html",
        "sweep/report.md",
        "sweep/summary.json",
    } <= artifacts
    assert "sweep/best.json" not in artifacts  # a pivot's one best is its headline, not the luckiest trial
    plots = {a.path for a in client.list_artifacts(result.parent_run_id, "sweep/plots")}
    assert plots == {"sweep/plots/pivot_test_rsum.png", "sweep/plots/trial_curves.png"}
    parent = client.get_run(result.parent_run_id).data
    # one seed per row: no interval, so no row is named the winner; a row still learning after its 2 epochs
    # makes the comparison inconclusive, never "no row differs"
    summary = json.loads(
        Path(client.download_artifacts(result.parent_run_id, "sweep/summary.json", str(workdir))).read_text()
    )
    assert set(summary["convergence"]) == {"A", "F"}
    learning = [row for row, found in summary["convergence"].items() if found["still_learning"]]
    assert parent.tags["itrlab.headline"].startswith("inconclusive against A" if learning else "no row")
    assert all(row in parent.tags["itrlab.headline"] for row in learning) and "itrlab.best_row" not in parent.tags
    assert result.headline == parent.tags["itrlab.headline"]
    assert "itrlab.best_trial" not in parent.tags and "best_trial_test_rsum" not in parent.metrics
    mlflow.set_experiment("tiny_sweep")
    table = mlflow.load_table("sweep/table.json", run_ids=[result.parent_run_id])
    assert sorted(table["cooperative/strategy"]) == ["A", "F"]
    assert "test_i2t_R1_paper" not in table  # F30K's numbers never stand beside synthetic results
    (published,) = set(table["published"])
    assert published.startswith(
        "not comparable: the trials' data (200 / 50 / 50 images x 5 captions, 6 x 32 "
        "features, synthetic) are not the paper's Flickr30K 1K test"
    )
    report = Path(client.download_artifacts(result.parent_run_id, "sweep/report.md", str(workdir))).read_text()
    assert "| A | " in report and "| *chance* | " in report and parent.tags["itrlab.headline"] in report
    # each trial's model linked: the trials table and the report name its runs:/ URI
    models = {f"runs:/{kid.info.run_id}/model" for kid in kids}
    assert {kid.data.tags["itrlab.model"] for kid in kids} == models
    assert set(summary["trials"]["model"]) == models and "gallery" not in summary["trials"]  # no photos here
    assert all(model in report for model in models)


def test_report_of_a_finished_sweep_and_of_a_run_that_is_no_sweep(tiny_sweep, tmp_path, monkeypatch, capsys):
    """``itrlab report PARENT`` as users type it writes the dated page and its plots, quietly; a trial's
    run or an unknown id is one line and exit 2."""
    from test_sweep_jobs import job_env

    workdir, result = tiny_sweep
    itrlab = str(Path(sys.executable).parent / "itrlab")
    done = subprocess.run(
        [itrlab, "report", result.parent_run_id, "--out", str(tmp_path / "results")],
        cwd=tmp_path,
        env=job_env(workdir),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (page,) = (tmp_path / "results").glob("*-tiny_sweep.md")
    text = page.read_text()
    assert f"parent run `{result.parent_run_id}`" in text and "| A | " in text and "| F | " in text
    assert len(re.findall(r"\| runs:/[0-9a-f]{32}/model \|", text)) == 2  # each trial's model, in its row
    assert "| chance | " in text
    # what the runs show: each row's training loss at its first and last epoch, from the trials' runs
    section = text[text.index("## What the runs show") : text.index("## Trials")]
    assert "| row | seeds | part | from epoch | first | to epoch | last | last - first |" in section
    assert re.search(r"\| A \| 1 \| loss \(total\) \| 1 \| [0-9.]+ \| 2 \| [0-9.]+ \| -?[0-9.]+ \|", section), section
    assert sorted(p.name.split("-tiny_sweep-")[1] for p in (tmp_path / "results" / "img").iterdir()) == [
        "pivot_test_rsum.png",
        "trial_curves.png",
    ]
    assert done.stderr.strip() == ""  # no progress bars

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{workdir / 'mlflow.db'}")
    child = children(MlflowClient(), "tiny_sweep", result.parent_run_id)[0]
    for run_id, message in ((child.info.run_id, "is not a sweep's parent run"), ("0" * 32, "no MLflow run")):
        assert main(["report", run_id, "--out", str(tmp_path / "refused")]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and message in err, err


@pytest.fixture(scope="module")
def variant_sweep(tmp_path_factory):
    """A finished sweep of two named variants (DBL's A and F) over two seeds: intervals in every cell."""
    workdir = tmp_path_factory.mktemp("variant_sweep")
    grid = {"variant": [{"name": "A", "cooperative.strategy": "A"}, {"name": "F", "cooperative.strategy": "F"}]}
    sweep = write_sweep(
        workdir / "sweep.yaml",
        name="variant_sweep",
        grid=grid,
        seeds=[0, 1],
        concurrency=2,
        table={"rows": ["variant"], "paper": "dbl_table4"},
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(workdir)
        patch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{workdir / 'mlflow.db'}")
        result = run_sweep(load_sweep(sweep), storage=workdir / "sweeps")
    return workdir, result


def rsum_column_right_edge(report: Path, width: int) -> float:
    """Where the report's rsum column ends, in pixels, when a browser ``width`` pixels wide shows it."""
    probe = report.with_name("probe.html")
    probe.write_text(
        report.read_text().replace(
            "</body>",
            """<script>
const th = [...document.querySelectorAll("th")].find(cell => cell.textContent === "rsum");
document.body.setAttribute("data-rsum-right", th ? th.getBoundingClientRect().right : -1);
</script></body>""",
        )
    )
    dom = browser_dom(probe.as_uri(), width=width, budget_ms=5000, timeout=120)
    return float(re.search(r'data-rsum-right="([-\d.]+)"', dom).group(1))


GENAI_ONLY = (">Judges<", ">Evaluation runs<", ">Sessions<")  # MLflow 3's GenAI sidebar, absent in model training


@pytest.mark.skipif(CHROMIUM is None, reason=NEEDS_CHROMIUM)
def test_the_sweeps_link_report_and_plots_read_in_the_mlflow_ui(variant_sweep, tmp_path):
    """`mlflow ui` as docs/mlflow.md starts it, over a finished variant sweep, loaded by headless Chromium:
    the link the sweep printed opens the parent run's page on its report; the parent's Overview has its
    description with the links to the report and the trials, and the headline; the trials' link opens the runs
    table in the model-training view with every trial as a row (not one collapsed parent), its variant and test
    rsum among the columns; the artifact view shows
    sweep/report.html in MLflow's HTML frame, and that file renders "mean ± interval" cells, the chance
    band and the headline, its rsum column inside the frame of a 1280-px window (about 480 px beside
    MLflow's panels); the pivot's table view shows every column and the plot is there."""
    from urllib.request import urlopen

    from servers import BIN, serve

    workdir, result = variant_sweep
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("variant_sweep")
    parent = client.get_run(result.parent_run_id)
    headline = parent.data.tags["itrlab.headline"]
    printed = result.ui_hint  # run `<the command>` and open <the link>
    command = printed.split("`")[1].split()
    assert command[0] == "MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false" and command[-2:] == ["--workers", "1"]
    command = ["env", command[0], str(BIN / "mlflow"), *command[2:]]
    command[command.index("--port") + 1] = "{port}"
    with serve(command, workdir, "mlflow-ui", "/health", timeout=90) as url:
        link = printed.split(" and open ", 1)[1].replace("http://127.0.0.1:5000", url)
        run_page = f"{url}/#/experiments/{experiment.experiment_id}/runs/{result.parent_run_id}"
        parent_page = browser_dom(f"{run_page}/overview?workflowType=machine_learning")
        description = parent.data.tags["mlflow.note.content"]
        trials_link = re.search(r"\[The trials\]\((#/experiments/[^)]+)\)", description).group(1)
        runs_page = browser_dom(f"{url}/{trials_link}")
        view = browser_dom(link)
        # the frame shows the file the UI fetches here (served as a download, so rendered from a copy)
        served = tmp_path / "report.html"
        with urlopen(f"{url}/get-artifact?path=sweep%2Freport.html&run_uuid={result.parent_run_id}") as response:
            served.write_bytes(response.read())
        report = browser_dom(served.as_uri())
        table = browser_dom(f"{run_page}/artifacts/sweep/table.json")
        plot = browser_dom(f"{run_page}/artifacts/sweep/plots/pivot_test_rsum.png")
    assert "get-artifact?path=sweep%2Freport.html" in (workdir / "mlflow-ui.log").read_text()
    # the sweep's link: the parent's page on its report; its Overview: the links to the report and trials, the headline
    assert link == f"{run_page}/artifacts/sweep/report.html?workflowType=machine_learning", link
    report_link = f"#/experiments/{experiment.experiment_id}/runs/{result.parent_run_id}/artifacts/sweep/report.html?"
    assert f'href="{report_link}' in parent_page and f'href="{html.escape(trials_link)}"' in parent_page
    assert html.escape(headline, quote=False) in parent_page
    # the trials' link: its trials as rows, with their variant and test rsum, in the model-training view
    kids = children(client, "variant_sweep", result.parent_run_id)
    assert "<title>Runs - Experiment" in runs_page, re.findall(r"<title>[^<]*", runs_page)
    assert all(kid.info.run_name in runs_page for kid in kids) and len(kids) == 4
    assert parent.info.run_name not in runs_page  # not the collapsed parent: its trials
    assert "param.variant" in runs_page and chart_name("test_rsum") in runs_page  # the column, by its MLflow name
    assert "<strong>4</strong> matching runs" in runs_page
    for kid in kids:
        test_rsum = flat_metrics(kid.data.metrics)["test_rsum"]
        assert f">{test_rsum:g}<" in runs_page, test_rsum
    assert not [marker for marker in GENAI_ONLY if marker in parent_page + runs_page + view]  # model training
    assert 'class="mlflow-html-iframe"' in view, "the artifact view does not show the HTML report"
    assert headline in parent.data.tags["mlflow.note.content"]  # the run page's description: the headline in full
    recalls, compared = [
        re.findall(r'<tr class="(\w+)">(.*?)</tr>', table, re.S) for table in report.split("</table>")[:2]
    ]
    cells = {re.findall(r"<td>(.*?)</td>", row)[0]: re.findall(r"<td>(.*?)</td>", row) for _, row in recalls}
    assert [kind for kind, _ in recalls] == ["baseline", "result", "chance"] and set(cells) == {"A", "F", "chance"}
    interval = r'\d+\.\d <span class="ci">± \d+\.\d</span>'  # a narrow page wraps a cell before its interval
    assert all(re.fullmatch(interval, cell) for cell in cells["A"][1:8]), cells["A"]  # rsum and every recall
    versus = {re.findall(r"<td>(.*?)</td>", row)[0]: re.findall(r"<td>(.*?)</td>", row) for _, row in compared}
    assert versus["F"][1].startswith(("+", "-")) and "± " in versus["F"][1]  # vs A, with Welch's interval
    assert re.fullmatch(r"\d+\.\d-\d+\.\d", cells["chance"][1])
    assert [kind for kind, _ in compared] == ["baseline", "result", "chance"]  # the second table: one row each too
    assert '<td class="note">random scores' in dict(compared)["chance"]
    assert f'<p class="headline">{html.escape(headline, quote=False)}</p>' in report  # as the DOM serialises text
    assert result.headline == headline and "(2 seeds)" in headline  # "at 95%", or inconclusive: still learning
    assert 0 < rsum_column_right_edge(served, 480) <= 480  # rsum, right after the row label, inside the frame
    assert "variant" in table and "test_rsum_mean" in table and "published" in table
    assert sorted(set(re.findall(r">([AF])<", table))) == ["A", "F"], "the swept column's cells are empty"
    assert re.search(r"<img[^>]+pivot_test_rsum\.png", plot), "the plot is not shown"


def test_report_registers_each_rows_seeds_and_evaluate_reads_a_version_back(
    variant_sweep, tmp_path, monkeypatch, capsys
):
    """``itrlab report --register`` over a real sweep of two rows and two seeds: a registered model per row, a
    version per seed's model, tagged with its seed, its description holding the row's interval over both seeds;
    ``itrlab evaluate models:/<name>/<version>`` gives the test table its trial's run logged, to the digit, and
    its MLflow run names that trial's run as the model's source."""
    from itrlab.eval.names import METRIC_NAMES

    workdir, result = variant_sweep
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{workdir / 'mlflow.db'}")
    monkeypatch.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    assert main(["report", result.parent_run_id, "--out", str(tmp_path / "results"), "--register"]) == 0
    line = r"^registered: models:/(variant_sweep-budget-[AF])/(\d) \(run ([0-9a-f]{32})\)$"
    registered = re.findall(line, capsys.readouterr().out, re.M)
    assert sorted(found[:2] for found in registered) == [
        ("variant_sweep-budget-A", "1"),
        ("variant_sweep-budget-A", "2"),
        ("variant_sweep-budget-F", "1"),
        ("variant_sweep-budget-F", "2"),
    ]
    client = MlflowClient()
    kids = {kid.info.run_id: kid for kid in children(client, "variant_sweep", result.parent_run_id)}
    for name, version, run_id in registered:
        kid, registered_version = kids[run_id], client.get_model_version(name, version)
        assert name.endswith(f"-{kid.data.params['variant']}") and registered_version.run_id == run_id
        assert registered_version.tags["itrlab.seed"] == kid.data.params["seed"]
        assert "Student-t interval over 2 seeds: 0, 1)" in registered_version.description
    name, version, run_id = next(found for found in registered if found[0].endswith("-F"))
    out = tmp_path / "evaluation.json"
    assert main(["evaluate", f"models:/{name}/{version}", "--out", str(out)]) == 0
    evaluation = capsys.readouterr().out.strip().splitlines()[-1].split()[2]
    table = json.loads(out.read_text())["members"][f"models:/{name}/{version}"]
    logged = flat_metrics(kids[run_id].data.metrics)
    assert {field: table[field] for field in METRIC_NAMES} == {
        field: pytest.approx(logged[f"test_{metric}"], abs=1e-9) for field, metric in METRIC_NAMES.items()
    }
    assert client.get_run(evaluation).data.tags["itrlab.source_run.1"] == run_id


def test_diverging_trial_stops_with_its_reason_and_the_sweep_goes_on(workdir):
    # 3e38 is a valid float32 margin (1e39 is refused at config time), but the batch's summed hinges overflow
    sweep = write_sweep(workdir / "sweep.yaml", name="nan_sweep", grid={"loss.margin": [0.2, 3.0e38]}, table=None)
    result = run_sweep(load_sweep(sweep), storage=workdir / "sweeps")
    status = {row.params["loss.margin"]: row.status for row in result.rows}
    assert status == {0.2: "finished", 3.0e38: "diverged"}
    kids = {k.data.tags["param.loss.margin"]: k for k in children(MlflowClient(), "nan_sweep", result.parent_run_id)}
    assert kids["3e+38"].info.status == "FAILED"
    assert "loss became inf" in kids["3e+38"].data.tags["itrlab.stop_reason"]
    assert kids["0.2"].info.status == "FINISHED"


def test_a_trial_that_chooses_its_decay_reports_and_keeps_the_chosen_branch(workdir):
    """A trial with train.lr_decay_choices: its final report, its run and the sweep's report hold the branch its
    validation chose, the report says which decay the seed chose, and the trial's stored checkpoint holds the
    branches and the choice (what a retried trial resumes from)."""
    sweep = write_sweep(
        workdir / "sweep.yaml",
        name="decay_sweep",
        experiment="vsepp_synthetic_tiny",
        overrides=[f"dataset.root={workdir / 'data'}", "train.epochs=4", "train.lr_decay_choices=[1, 2, 3]"],
        grid={"train.lr": [0.003]},
        table={"rows": ["train.lr"]},
    )
    result = run_sweep(load_sweep(sweep), storage=workdir / "sweeps")
    (row,) = result.rows
    assert row.status == "finished"
    client = MlflowClient()
    (kid,) = children(client, "decay_sweep", result.parent_run_id)
    metrics = flat_metrics(kid.data.metrics)
    best = {d: metrics[f"decay{d}_best_rsum"] for d in (1, 2, 3)}
    chosen = max(best, key=lambda d: (best[d], -d))
    assert metrics["lr_decay_chosen"] == chosen and row.metrics["best_val_rsum"] == pytest.approx(best[chosen])

    def series(key: str) -> list[tuple[int, float]]:
        return [(m.step, m.value) for m in client.get_metric_history(kid.info.run_id, chart_name(key))]

    assert sorted(series("rsum")) == sorted(series(f"decay{chosen}_rsum"))
    assert row.metrics["rsum"] == pytest.approx(dict(series(f"decay{chosen}_rsum"))[4], rel=1e-5)
    summary = json.loads(
        Path(client.download_artifacts(result.parent_run_id, "sweep/summary.json", str(workdir))).read_text()
    )
    assert summary["convergence"]["0.003"]["decay_chosen"] == f"after {chosen} (seed 0)"
    (stored,) = (workdir / "sweeps" / "decay_sweep").glob("*/trials/*/epoch_*/decay/choice.json")
    assert json.loads(stored.read_text())["chosen"] == chosen


def test_a_row_that_is_another_rows_stage_trains_it_once(workdir):
    """ConVSE's shape: the VSE++ row trains the ConVSE row's base network as it is, so its model is the
    stage: no stage run trains it again, and the ConVSE run names the VSE++ run as its base."""
    base = {
        "name": "base",
        "copy": ["model.image_encoder", "model.text_encoder"],
        "overrides": ["method.name=vsepp", "loss={name: vsepp, margin: 0.2}", "model.projection_hidden=null"],
    }
    sweep = write_sweep(
        workdir / "sweep.yaml",
        name="stage_row_sweep",
        experiment="vsepp_synthetic_tiny",
        overrides=[f"dataset.root={workdir / 'data'}", "train.epochs=1"],
        grid={
            "variant": [
                {"name": "VSE++", "loss": {"name": "vsepp", "margin": 0.2}},
                {
                    "name": "ConVSE",
                    "method.name": "convse",
                    "model.projection_hidden": 16,
                    "loss": {"name": "convse", "tau": 0.1},
                    "stages": [base],
                },
            ]
        },
        table={"rows": ["variant"]},
    )
    result = run_sweep(load_sweep(sweep), storage=workdir / "sweeps")
    assert [row.status for row in result.rows] == ["finished", "finished"]
    client = MlflowClient()
    kids = children(client, "stage_row_sweep", result.parent_run_id)
    assert len(kids) == 2 and not [k for k in kids if "itrlab.stage" in k.data.tags]  # no stage trained alone
    (row,) = [k for k in kids if "itrlab.stage.base" not in k.data.tags]
    (convse,) = [k for k in kids if "itrlab.stage.base" in k.data.tags]
    assert convse.data.tags["itrlab.stage.base"] == row.info.run_id
    assert convse.data.metrics["stage_seconds"] > 0
    (sweep_dir,) = (workdir / "sweeps" / "stage_row_sweep").iterdir()
    assert [p.name.split("-")[0] for p in (sweep_dir / "stages").iterdir() if (p / "stage.json").is_file()] == ["run"]


def test_a_row_with_its_own_seeds_runs_them_and_the_pivot_pairs_the_shared_ones(workdir):
    """Row B runs seeds 0-2, row A the sweep's 0-1: five trials, each tagged with its row and seed, the pivot
    counting each row's own, the paired difference over the two seeds both ran."""
    sweep = write_sweep(
        workdir / "sweep.yaml",
        name="row_seeds_sweep",
        experiment="vsepp_synthetic_tiny",
        overrides=[f"dataset.root={workdir / 'data'}", "train.epochs=1"],
        grid={"variant": [{"name": "A", "loss.margin": 0.2}, {"name": "B", "loss.margin": 0.1, "seeds": [0, 1, 2]}]},
        seeds=[0, 1],
        concurrency=2,
        table={"rows": ["variant"]},
    )
    result = run_sweep(load_sweep(sweep), storage=workdir / "sweeps")
    assert sorted((row.params["variant"]["name"], row.params["seed"], row.status) for row in result.rows) == [
        ("A", 0, "finished"),
        ("A", 1, "finished"),
        ("B", 0, "finished"),
        ("B", 1, "finished"),
        ("B", 2, "finished"),
    ]
    assert all(
        row.params["variant"] in ({"name": "A", "loss.margin": 0.2}, {"name": "B", "loss.margin": 0.1})
        for row in result.rows
    )  # the trial's point: the row without its seeds
    client = MlflowClient()
    kids = children(client, "row_seeds_sweep", result.parent_run_id)
    tagged = sorted((k.data.tags["param.variant"], k.data.tags["param.seed"]) for k in kids)
    assert tagged == [("A", "0"), ("A", "1"), ("B", "0"), ("B", "1"), ("B", "2")]
    assert {k.data.params["loss.margin"] for k in kids if k.data.tags["param.variant"] == "B"} == {"0.1"}
    table = json.loads(
        Path(client.download_artifacts(result.parent_run_id, "sweep/table.json", str(workdir))).read_text()
    )
    column = table["columns"].index
    rows = {row[column("variant")]: row for row in table["data"]}
    assert rows["A"][column("seeds")] == 2 and rows["B"][column("seeds")] == 3
    assert rows["B"][column("test_rsum_diff_paired_seeds")] == 2
    report = Path(client.download_artifacts(result.parent_run_id, "sweep/report.md", str(workdir))).read_text()
    assert r"over seeds \[0, 1\]; B: \[0, 1, 2\]" in report  # Markdown's escaped brackets
    assert "of 3 seeds" not in report and "of 2 seeds" not in report  # each row complete with its own
    assert main(["report", result.parent_run_id, "--out", str(workdir / "results")]) == 0  # the dated page
    (page,) = (workdir / "results").glob("*-row_seeds_sweep.md")
    assert r"seeds \[0, 1\]; B: \[0, 1, 2\]" in page.read_text()


def test_optuna_search_runs_each_configuration_on_every_seed_and_reports_what_its_parameters_did(workdir):
    """Three configurations Optuna suggests, each trained with seeds 0 and 1 (Optuna learns their mean); the parent
    run's report lists the configurations over their seeds and each parameter's importance beside the seeds'
    spread, with the parallel-coordinates plot; its description links the report and says the best configuration."""
    sweep = write_sweep(
        workdir / "sweep.yaml",
        name="optuna_sweep",
        grid={},
        table=None,
        seeds=[0, 1],
        optuna={
            "space": {
                "cooperative.gamma": {"type": "uniform", "low": 0.1, "high": 0.3},
                "cooperative.strategy": {"type": "choice", "values": ["F", "G"]},
            },
            "num_trials": 3,
            "seed": 0,
        },
    )
    result = run_sweep(load_sweep(sweep), storage=workdir / "sweeps")
    assert len(result.rows) == 6 and all(row.status == "finished" for row in result.rows)
    assert all(0.1 <= row.params["cooperative.gamma"] <= 0.3 for row in result.rows)
    seeds: dict[tuple, list[int]] = {}
    for row in result.rows:
        seeds.setdefault((row.params["cooperative.gamma"], row.params["cooperative.strategy"]), []).append(
            row.params["seed"]
        )
    assert len(seeds) == 3 and all(sorted(found) == [0, 1] for found in seeds.values()), seeds
    client = MlflowClient()
    parent = client.get_run(result.parent_run_id)
    page = Path(client.download_artifacts(result.parent_run_id, "sweep/report.html", str(workdir))).read_text()
    assert "best of 3 configurations by validation rsum (mean over its 2 seeds)" in page
    assert "<h2>What the parameters did</h2>" in page and "<th>seeds&#39; spread</th>" in page
    assert "parallel coordinates" in page
    importance = json.loads(
        Path(client.download_artifacts(result.parent_run_id, "sweep/importance.json", str(workdir))).read_text()
    )
    assert importance["configurations"] == 3 and importance["seeds"] == 2 and importance["seed_sd"] is not None
    assert {param["name"] for param in importance["params"]} == {"cooperative.gamma", "cooperative.strategy"}
    description = parent.data.tags["mlflow.note.content"]
    assert description.startswith("[**The report**](#/experiments/") and "**best of 3 configurations" in description


@pytest.mark.parametrize(
    "fields, fragment",
    [
        ({"grid": {"cooperative.strategy": ["A", "Z"]}}, "'cooperative.strategy'"),
        ({"grid": {"train.epoch": [1]}}, "did you mean 'epochs'"),
        (
            {"optuna": {"space": {"cooperative.gamma": {"type": "uniform", "low": 0.3, "high": 0.1}}, "num_trials": 2}},
            "low < high",
        ),
        (
            {
                "optuna": {
                    "space": {"cooperative.gamma": {"type": "uniform", "low": 0.1, "high": 0.3}},
                    "num_trials": 2,
                },
                "grid": {"cooperative.strategy": ["A"]},
            },
            "not both",
        ),
        ({"concurrency": 0}, "'sweep.yaml: concurrency'"),
    ],
)
def test_bad_sweeps_exit_2_before_ray_or_mlflow_work(workdir, capsys, fields, fragment):
    sweep = write_sweep(workdir / "sweep.yaml", **fields)
    code = main(["sweep", "--sweep", str(sweep), "--storage", str(workdir / "sweeps")])
    err = capsys.readouterr().err
    assert code == 2 and fragment in err, err
    assert not (workdir / "mlflow.db").exists() and not (workdir / "sweeps").exists()


def test_unknown_preset_and_nothing_to_resume(workdir, capsys):
    assert main(["sweep", "--preset", "tabel4"]) == 2
    assert "did you mean 'table4'" in capsys.readouterr().err
    assert (
        main(["sweep", "--sweep", str(write_sweep(workdir / "s.yaml")), "--resume", "--storage", str(workdir / "x")])
        == 2
    )
    assert "no interrupted sweep" in capsys.readouterr().err


def test_multi_worker_trial_trains_with_ddp_in_a_torch_trainer(workdir):
    sweep = write_sweep(
        workdir / "sweep.yaml",
        name="ddp_sweep",
        grid={"cooperative.strategy": ["F"]},
        table=None,
        num_workers=2,
        overrides=[f"dataset.root={workdir / 'data'}", "train.epochs=1"],
    )
    result = run_sweep(load_sweep(sweep), storage=workdir / "sweeps")
    (row,) = result.rows
    assert row.status == "finished" and row.metrics["test_rsum"] >= 0
    (kid,) = children(MlflowClient(), "ddp_sweep", result.parent_run_id)
    assert kid.info.status == "FINISHED" and "test_rsum" in flat_metrics(kid.data.metrics)
    assert [m.step for m in MlflowClient().get_metric_history(kid.info.run_id, chart_name("rsum"))] == [1]
