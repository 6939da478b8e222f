"""What a sweep found about its parameters (itrlab.report.importance): fANOVA's importance on each configuration's
mean over seeds, beside the seeds' spread, and the rule that says when a parameter's effect is below the seed noise.

The known answer: a grid where one parameter moves the objective by 10 a step and another does nothing, every run
with seed noise of standard deviation 1; and an Optuna search whose objective follows one of its parameters."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from itrlab.config.sweep import SweepSpec
from itrlab.report.importance import (
    ABOVE,
    BELOW,
    UNKNOWN,
    Configuration,
    applies,
    effects,
    param_importances,
    pooled_sd,
    search_space,
)
from itrlab.report.summary import TrialRow

SEEDS = [0, 1, 2, 3, 4]


def grid_spec(**grid) -> SweepSpec:
    return SweepSpec(name="known", experiment="vsepp_synthetic_tiny", grid=grid, seeds=SEEDS)


def grid_rows(matters: list[float], noise: list[float], step: float = 10.0, sd: float = 1.0) -> list[TrialRow]:
    """Finished trials: test rsum = 100 + step x (index of ``a``) + N(0, sd) per run; ``b`` does nothing."""
    rng = np.random.default_rng(0)
    rows = []
    for i, a in enumerate(matters):
        for b in noise:
            for seed in SEEDS:
                value = 100.0 + step * i + rng.normal(0.0, sd)
                rows.append(
                    TrialRow(f"{a}-{b}-{seed}", {"a": a, "b": b, "seed": seed}, {"test_rsum": value}, "finished")
                )
    return rows


def test_one_parameter_that_matters_and_one_that_is_pure_noise():
    spec = grid_spec(a=[1, 2, 3], b=[0.1, 0.2, 0.3])
    found = param_importances(grid_rows([1, 2, 3], [0.1, 0.2, 0.3]), spec, "test_rsum")
    by_name = {p.name: p for p in found.params}
    assert [p.name for p in found.params] == ["a", "b"]  # most important first
    assert by_name["a"].importance > 0.95 and by_name["b"].importance < 0.05
    assert found.configurations == 9 and found.seeds == 5 and found.left_out == 0
    assert found.seed_sd == pytest.approx(1.0, abs=0.25)  # the noise the runs were drawn with
    # a moves the mean by 0, 10 and 20 over its three values; b by what the seeds left in the means
    assert by_name["a"].effect == pytest.approx(20.0, abs=2.0) and by_name["a"].verdict == ABOVE
    assert by_name["b"].effect < found.seed_sd and by_name["b"].verdict == BELOW


def test_the_below_noise_wording_says_what_the_rule_is():
    spec = grid_spec(a=[1, 2, 3], b=[0.1, 0.2, 0.3])
    found = param_importances(grid_rows([1, 2, 3], [0.1, 0.2, 0.3]), spec, "test_rsum")
    rows = found.rows()
    assert rows[1][0] == "b" and rows[1][-1] == "below the seed noise" and rows[0][-1] == "above the seed noise"
    assert rows[0][3] == rows[1][3] == f"{found.seed_sd:.1f}"  # the seeds' spread beside each importance
    note = found.note()
    assert "when its effect is smaller than that spread: moving it moved the mean less than another seed" in note
    assert "not which one matters" in note
    assert "b" in found.summary() and "(below the seed noise)" in found.summary()
    page = found.html()
    assert "<th>seeds&#39; spread</th>" in page and "below the seed noise" in page
    assert "| b | " in found.markdown() and found.text().splitlines()[0] == "What the parameters did"


def test_a_small_real_effect_under_large_seed_noise_is_called_below_it():
    """A parameter that moves the objective by 1 where seeds move a run by 5: its effect is real but below the
    seed noise, and the page says so rather than ranking it as what mattered."""
    spec = grid_spec(a=[1, 2], b=[0.1, 0.2])
    found = param_importances(grid_rows([1, 2], [0.1, 0.2], step=1.0, sd=5.0), spec, "test_rsum")
    assert all(p.verdict == BELOW for p in found.params), found.rows()


def test_pooled_sd_by_hand_and_the_effect_on_a_full_grid_is_the_range_of_its_marginal_means():
    configs = [
        Configuration({"x": 1.0}, [1.0, 3.0]),  # variance 2
        Configuration({"x": 2.0}, [5.0, 5.0, 8.0]),  # variance 3
        Configuration({"x": 3.0}, [10.0]),
    ]
    assert pooled_sd(configs) == pytest.approx(math.sqrt((1 * 2.0 + 2 * 3.0) / 3))
    assert pooled_sd([Configuration({"x": 1.0}, [1.0])]) is None
    grid = [Configuration({"a": a, "b": b}, [10.0 * a + (1.0 if b == "y" else 0.0)]) for a in (0, 1) for b in "xy"]
    space = search_space(grid_spec(a=[0, 1], b=["x", "y"]))
    found = effects(grid, space, ["a", "b"])
    assert found["a"] == pytest.approx(10.0, abs=1.0) and found["b"] == pytest.approx(1.0, abs=0.5)


def test_one_seed_per_configuration_cannot_tell_noise_from_effect():
    spec = SweepSpec(name="one", experiment="vsepp_synthetic_tiny", grid={"a": [1, 2, 3]}, seeds=[0])
    rows = [TrialRow(str(a), {"a": a, "seed": 0}, {"test_rsum": 100.0 + a}, "finished") for a in (1, 2, 3)]
    found = param_importances(rows, spec, "test_rsum")
    assert found.seed_sd is None and found.params[0].verdict == UNKNOWN and found.rows()[0][3] == "-"
    assert "no spread over seeds is known" in found.note()


def test_which_sweeps_get_an_importance():
    assert applies(grid_spec(a=[1, 2]))
    assert not applies(grid_spec(strategy=["A", "F"]))  # named rows: the pivot compares them
    assert not applies(grid_spec(a=[1]))
    optuna = {"space": {"x": {"type": "uniform", "low": 0.0, "high": 1.0}}, "num_trials": 4}
    assert applies(SweepSpec(name="o", experiment="vsepp_synthetic_tiny", optuna=optuna))


def test_an_optuna_search_over_seeds_names_the_parameter_its_objective_follows():
    """An Optuna space with a log-uniform, an integer and a choice dimension (and one set only for some choices):
    the objective follows the log-uniform one; each configuration runs on three seeds; unfinished trials are
    left out and counted."""
    space = {
        "lr": {"type": "loguniform", "low": 1e-4, "high": 1e-1},
        "k": {"type": "int", "low": 1, "high": 8},
        "kind": {"type": "choice", "values": ["x", "y"]},
        "alpha": {"type": "uniform", "low": 0.0, "high": 1.0, "when": {"kind": ["y"]}},
    }
    spec = SweepSpec(
        name="o", experiment="vsepp_synthetic_tiny", optuna={"space": space, "num_trials": 16}, seeds=[0, 1, 2]
    )
    rng = np.random.default_rng(1)
    rows = []
    for trial in range(16):
        point = {"lr": float(10 ** rng.uniform(-4, -1)), "k": int(rng.integers(1, 9)), "kind": ["x", "y"][trial % 2]}
        if point["kind"] == "y":
            point["alpha"] = float(rng.uniform())
        for seed in (0, 1, 2):
            value = 200.0 + 20.0 * math.log10(point["lr"]) + rng.normal(0.0, 0.5)
            rows.append(TrialRow(f"t{trial}-{seed}", {**point, "seed": seed}, {"test_rsum": value}, "finished"))
    rows.append(TrialRow("stopped", {"lr": 0.01, "k": 2, "kind": "x", "seed": 0}, {"test_rsum": 1.0}, "stopped"))
    found = param_importances(rows, spec, "test_rsum")
    by_name = {p.name: p for p in found.params}
    assert found.params[0].name == "lr" and by_name["lr"].importance > 0.8 and by_name["lr"].verdict == ABOVE
    assert found.configurations == 16 and found.seeds == 3 and found.left_out == 1
    assert by_name["alpha"].importance is None and "set in 8 of 16 configurations" in by_name["alpha"].note
    assert statistics.fmean([by_name["k"].importance, by_name["kind"].importance]) < 0.1


# --------------------------------------------------------------------------- in the sweep's report and its run

RECALLS = ("i2t_R1", "i2t_R5", "i2t_R10", "t2i_R1", "t2i_R5", "t2i_R10")


def finished(trial: str, params: dict, rsum: float) -> TrialRow:
    metrics = {f"test_{k}": rsum / 6 for k in RECALLS} | {"test_rsum": rsum, "best_val_rsum": rsum + 1.0, "rsum": rsum}
    return TrialRow(trial, params, metrics | {"test_md": 0.01, "run_seconds": 5.0, "best_epoch": 1}, "finished")


def reported(tmp_path, spec: SweepSpec, rows: list[TrialRow]):
    """``report_sweep`` in process on a real SQLite MLflow store: the parent's artifacts and description."""
    from itrlab.assembly import load_experiment
    from itrlab.sweep.reporting import report_sweep
    from itrlab.tracking import MlflowTracker

    parent = MlflowTracker(spec.name, f"sqlite:///{tmp_path / 'mlflow.db'}")
    run_id = parent.start(run_name=spec.name, tags={"itrlab.sweep": spec.name}, params={})
    report_sweep(spec, rows, parent, load_experiment(spec.experiment, [f"dataset.root={tmp_path / 'nodata'}"]), 9.0)
    parent.end()
    parent.client.download_artifacts(run_id, "sweep", str(tmp_path))
    files = {name: tmp_path / "sweep" / name for name in ("report.html", "report.md", "importance.json")}
    plots = {item.path for item in parent.client.list_artifacts(run_id, "sweep/plots")}
    return parent.client.get_run(run_id), files, plots


def test_an_optuna_sweeps_report_shows_each_parameters_importance_beside_the_seed_spread(tmp_path):
    import json
    import re

    space = {
        "loss.margin": {"type": "uniform", "low": 0.05, "high": 0.5},
        "train.lr": {"type": "loguniform", "low": 1e-4, "high": 1e-2},
    }
    spec = SweepSpec(
        name="optuna_report",
        experiment="vsepp_synthetic_tiny",
        optuna={"space": space, "num_trials": 16},
        seeds=[0, 1, 2],
    )
    rng = np.random.default_rng(2)
    rows = []
    for trial in range(16):
        point = {"loss.margin": float(rng.uniform(0.05, 0.5)), "train.lr": float(10 ** rng.uniform(-4, -2))}
        for seed in (0, 1, 2):
            rsum = 150.0 + 200.0 * point["loss.margin"] + rng.normal(0.0, 1.0)  # the margin matters, the rate not
            rows.append(finished(f"t{trial}{seed}", {**point, "seed": seed}, rsum))
    run, files, plots = reported(tmp_path, spec, rows)
    page = files["report.html"].read_text()
    assert "<h2>What the parameters did</h2>" in page and "<th>seeds&#39; spread</th>" in page
    table = re.search(r'<table class="importance">.*?</table>', page, re.S).group(0)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)][1:]
    assert [row[0] for row in cells] == ["loss.margin", "train.lr"]  # the one that matters first
    assert cells[0][3] == cells[1][3] and float(cells[0][3]) > 0  # the seeds' spread beside each importance
    assert cells[0][4] == "above the seed noise" and float(cells[1][1]) < 0.05  # the rate: a small share
    assert (
        cells[1][4] in ("above the seed noise", "below the seed noise") and float(cells[1][2]) < float(cells[0][2]) / 10
    )
    assert "data:image/png;base64," in page and "parallel coordinates" in page
    assert "sweep/plots/parallel_coordinates.png" in plots
    saved = json.loads(files["importance.json"].read_text())
    assert saved["configurations"] == 16 and saved["seeds"] == 3 and saved["params"][0]["name"] == "loss.margin"
    assert "| loss.margin | " in files["report.md"].read_text()
    description = run.data.tags["mlflow.note.content"]
    first = description.split("\n\n")[0]  # the links first: above the fold on the parent's page
    assert first.startswith("[**The report**](#/experiments/") and "/artifacts/sweep/report.html?" in first
    assert "[The trials](#/experiments/" in first and "viewStateShareKey=itrlab-" in first
    assert "**best of 16 configurations by validation rsum (mean over its 3 seeds): margin=" in description
    assert "importance for test_rsum (fANOVA): loss.margin" in description


def test_a_grid_with_a_numeric_axis_gets_the_importance_in_its_pivots_report(tmp_path):
    spec = SweepSpec(
        name="numeric_grid",
        experiment="vsepp_synthetic_tiny",
        grid={"loss.margin": [0.1, 0.2, 0.4]},
        seeds=[0, 1],
        table={"rows": ["loss.margin"]},
    )
    rows = [
        finished(f"m{margin}s{seed}", {"loss.margin": margin, "seed": seed}, 150.0 + 100 * margin + seed)
        for margin in (0.1, 0.2, 0.4)
        for seed in (0, 1)
    ]
    run, files, plots = reported(tmp_path, spec, rows)
    page = files["report.html"].read_text()
    assert page.index("<h2>What the parameters did</h2>") > page.index("<table>")  # after the pivot's tables
    assert "<td>loss.margin</td><td>1.00</td>" in page and "above the seed noise" in page
    assert "sweep/plots/parallel_coordinates.png" in plots and "sweep/plots/pivot_test_rsum.png" in plots
    description = run.data.tags["mlflow.note.content"]
    assert description.startswith("[**The report**](#/experiments/") and run.data.tags["itrlab.headline"] in description
