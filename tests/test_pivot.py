"""The sweep's pivot: intervals over seeds, differences to the baseline row, and published numbers
shown only where the data set and protocol are the paper's."""

from __future__ import annotations

import math
import statistics

import pytest
from scipy import stats as scipy_stats

from itrlab.config.sweep import load_sweep
from itrlab.data.shape import DataShape
from itrlab.report.pivot import load_paper, pivot, published_numbers
from itrlab.report.stats import difference_interval, mean_interval
from itrlab.report.summary import TrialRow


def test_mean_interval_is_student_t_from_the_definition():
    values = [70.0, 74.0, 71.5]
    interval = mean_interval(values)
    n, mean, sd = len(values), sum(values) / 3, statistics.stdev(values)
    assert interval.value == pytest.approx(mean)
    assert interval.half_width == pytest.approx(4.302652729911275 * sd / math.sqrt(n))  # t(0.975, 2)
    assert mean_interval([5.0]).half_width is None and mean_interval([5.0]).n == 1  # one seed: no interval
    assert mean_interval([]).n == 0 and math.isnan(mean_interval([]).value)


def test_difference_interval_is_welchs():
    a, b = [80.0, 82.0, 85.0, 79.0], [70.0, 74.0, 71.0]
    interval = difference_interval(a, b)
    va, vb = statistics.variance(a) / 4, statistics.variance(b) / 3
    df = (va + vb) ** 2 / (va**2 / 3 + vb**2 / 2)
    assert interval.value == pytest.approx(statistics.fmean(a) - statistics.fmean(b))
    assert interval.half_width == pytest.approx(scipy_stats.t.ppf(0.975, df) * math.sqrt(va + vb))
    welch = scipy_stats.ttest_ind(a, b, equal_var=False)  # the interval excludes 0 exactly when p < 0.05
    assert interval.excludes_zero() == (welch.pvalue < 0.05)
    assert difference_interval([1.0], b).half_width is None


SYNTHETIC = DataShape(5000, 500, 1000, 5, 10, 64, synthetic=True)
F30K = DataShape(29000, 1014, 1000, 5, 36, 2048, synthetic=False)  # SCAN's Flickr30K features


def rows_for(spec_name: str, key: str, cells: list[tuple[str, int, float]]) -> list[TrialRow]:
    return [
        TrialRow(
            f"t{i:02d}",
            {key: value, "seed": seed},
            {"test_i2t_R1": r1, "test_rsum": 3 * r1, "test_md": 0.5},
            "finished",
        )
        for i, (value, seed, r1) in enumerate(cells)
    ]


def test_pivot_gives_intervals_and_the_difference_to_the_baseline_in_grid_order():
    spec = load_sweep("dbl_table4", "budget")
    # F listed before A in the trials: the pivot follows the grid (A first, the baseline)
    rows = rows_for(
        "dbl_table4",
        "cooperative.strategy",
        [
            ("F", 0, 80.0),
            ("F", 1, 82.0),
            ("F", 2, 84.0),
            ("A", 0, 70.0),
            ("A", 1, 74.0),
            ("A", 2, 72.0),
            ("C", 0, 60.0),
        ],
    )
    rows.append(TrialRow("t99", {"cooperative.strategy": "C", "seed": 1}, {"test_i2t_R1": 0.0}, "diverged"))
    table = pivot(rows, spec, SYNTHETIC, "all")
    assert table["cooperative.strategy"] == ["A", "C", "F"] and table["seeds"] == [3, 1, 3]
    assert table["baseline"] == [True, False, False]
    assert table["test_i2t_R1_mean"] == [72.0, 60.0, 82.0]
    assert table["test_i2t_R1_ci95"][0] == pytest.approx(mean_interval([70.0, 74.0, 72.0]).half_width)
    assert table["test_i2t_R1_ci95"][1] is None  # one seed
    assert table["test_i2t_R1_diff"] == [None, -12.0, 10.0]
    assert table["test_i2t_R1_diff_ci95"][2] == pytest.approx(
        difference_interval([80.0, 82.0, 84.0], [70.0, 74.0, 72.0]).half_width
    )
    assert table["wall_s_mean"] == [None, None, None] and table["cpu_hours"] == [None, None, None]  # not reported


def test_published_numbers_stand_only_beside_data_of_the_papers_shape_and_protocol():
    spec = load_sweep("dbl_table4", "budget")
    rows = rows_for("dbl_table4", "cooperative.strategy", [("A", 0, 70.0), ("A", 1, 74.0), ("F", 0, 80.0)])
    synthetic = pivot(rows, spec, SYNTHETIC, "all")
    assert not any(key.endswith("_paper") for key in synthetic)  # F30K numbers beside synthetic ones: none
    assert synthetic["published"][0].startswith("not comparable: the trials' data (5,000 / 500 / 1,000 images")
    numbers, note = published_numbers(spec, SYNTHETIC, "all")
    assert numbers is None and note.startswith("Published numbers (dbl_table4) left out, not comparable")
    wrong_protocol = pivot(rows, spec, F30K, "all")
    assert "published" in wrong_protocol and not any(key.endswith("_paper") for key in wrong_protocol)
    assert "test protocol all" in wrong_protocol["published"][0]
    # a synthetic set of Flickr30K's exact sizes (the f30k-shape benchmark data) is still synthetic
    lookalike = DataShape(29000, 1014, 1000, 5, 36, 2048, synthetic=True)
    assert "synthetic True vs False" in pivot(rows, spec, lookalike, "f30k_1k")["published"][0]
    assert published_numbers(spec, None, "f30k_1k")[0] is None  # the shape could not be read: no numbers

    real = pivot(rows, spec, F30K, "f30k_1k")
    paper = load_paper("dbl_table4")
    assert real["published"] == ["", ""]
    assert real["test_i2t_R1_paper"] == [paper.rows["A"]["i2t_R1"], paper.rows["F"]["i2t_R1"]]
    assert real["test_i2t_R1_vs_paper"][0] == pytest.approx(72.0 - paper.rows["A"]["i2t_R1"])
    numbers, note = published_numbers(spec, F30K, "f30k_1k")
    assert numbers == paper.rows and note.startswith("Published: dbl_table4, Flickr30K 1K test")


def test_every_paper_table_names_its_data_and_protocol():
    from itrlab.config.loader import config_dir
    from itrlab.eval import PROTOCOLS

    for path in sorted((config_dir() / "paper").glob("*.yaml")):
        paper = load_paper(path.stem)
        assert paper.dataset in ("f30k_precomp", "coco_precomp"), path.name
        assert paper.test_protocol in PROTOCOLS, path.name
        assert (config_dir() / "datasets" / f"{paper.dataset}.yaml").is_file()
        shape = paper.data_shape()  # the shape its numbers were measured on (configs/paper/data/)
        assert (
            not shape.synthetic and shape.captions_per_image == 5 and (shape.regions, shape.feature_dim) == (36, 2048)
        )
        PROTOCOLS[paper.test_protocol].folds(shape.test_images)  # the protocol fits the paper's test split


def test_trials_rank_by_the_best_epochs_objective():
    from itrlab.report.summary import ranked

    late = TrialRow("late", {"seed": 0}, {"rsum": 10.0, "best_val_rsum": 90.0}, "finished")
    steady = TrialRow("steady", {"seed": 1}, {"rsum": 80.0, "best_val_rsum": 80.0}, "finished")
    assert [r.trial_id for r in ranked([steady, late], "rsum", "max")] == ["late", "steady"]


def test_plots_of_a_numeric_sweep_and_of_a_grid_are_pngs(tmp_path):
    from itrlab.report.plots import plot_curves, plot_pivot

    gamma = load_sweep("dbl_fig4_gamma")
    key = gamma.table.rows[0]
    rows = [
        TrialRow(f"t{i}", {key: g, "seed": s}, {"test_rsum": 200.0 + 10 * g + s}, "finished")
        for i, (g, s) in enumerate((g, s) for g in (0.1, 0.2, 0.4) for s in (0, 1))
    ]
    line = plot_pivot(pivot(rows, gamma, SYNTHETIC, "all"), gamma, tmp_path / "gamma.png")
    table4 = load_sweep("dbl_table4", "budget")
    bars = plot_pivot(
        pivot(
            rows_for("dbl_table4", "cooperative.strategy", [("A", 0, 70.0), ("F", 0, 80.0)]), table4, F30K, "f30k_1k"
        ),
        table4,
        tmp_path / "bars.png",
    )  # published marks
    curves = plot_curves(
        {"strategy=A seed=0": {"rsum": [(1, 100.0), (2, 120.0)], "loss": [(1, 9.0), (2, 8.0)]}},
        table4,
        tmp_path / "curves.png",
    )
    for path in (line, bars, curves):
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000
    assert plot_pivot({"seeds": []}, table4, tmp_path / "none.png") is None
    assert plot_curves({}, table4, tmp_path / "none.png") is None


def test_each_row_says_what_it_cost():
    spec = load_sweep("dbl_table4", "budget")  # resources: 2 CPUs per trial
    rows = rows_for("dbl_table4", "cooperative.strategy", [("A", 0, 70.0), ("A", 1, 74.0), ("F", 0, 80.0)])
    for row, seconds in zip(rows, (1800.0, 3600.0, 900.0)):
        row.metrics["run_seconds"] = seconds
    table = pivot(rows, spec, SYNTHETIC, "all")
    assert table["wall_s_mean"] == [2700.0, 900.0]
    assert table["cpu_hours"] == [pytest.approx(3.0), pytest.approx(0.5)]  # (1800 + 3600) s x 2 CPUs


def test_a_variant_is_shown_by_its_name_even_without_overrides():
    from itrlab.report.summary import label
    from itrlab.sweep.trial import trial_run_name

    assert label({"name": "+PGC (full)"}) == "+PGC (full)"  # the base experiment as a named row
    assert label({"name": "BTR", "loss": {"name": "vsepp"}, "method.mdcl": False}) == "BTR"
    assert label({"name": "vsepp", "margin": 0.2}) == "name=vsepp margin=0.2"  # a whole loss section
    assert trial_run_name({"variant": {"name": "+PGC (full)"}, "seed": 2}) == "+PGC (full) seed=2"
    # a variant of whole sections only (compare-methods' CODER row, DBL Table III) is still a named row
    cmpm = {"name": "CMPM", "loss": {"name": "cmpm"}}
    assert label(cmpm, "variant") == "CMPM" and trial_run_name({"variant": cmpm, "seed": 0}) == "CMPM seed=0"
    assert label(None, "cooperative") == "none"  # DBL Table II's baseline row: cooperative switched off
    assert trial_run_name({"cooperative": None, "seed": 1}) == "cooperative=none seed=1"


def test_the_mlflow_table_artifact_has_readable_numbers(tmp_path):
    """The pivot as MLflow's table view shows it: dotted keys as paths, floats to 6 significant digits."""
    import json

    from itrlab.tracking import MlflowTracker

    tracker = MlflowTracker("tables", f"sqlite:///{tmp_path / 'mlflow.db'}")
    run_id = tracker.start(run_name="parent", tags={}, params={})
    tracker.replace_table(
        {
            "cooperative.strategy": ["A", "F"],
            "test_rsum_mean": [13.833333333333, 281.5],
            "lr": [5e-05, 5e-05],
            "seeds": [3, 3],
            "baseline": [True, False],
        },
        "sweep/table.json",
    )
    path = tracker.client.download_artifacts(run_id, "sweep/table.json", str(tmp_path))
    written = json.loads(open(path).read())
    assert written["columns"] == ["cooperative/strategy", "test_rsum_mean", "lr", "seeds", "baseline"]
    assert written["data"] == [["A", 13.8333, 5e-05, 3, True], ["F", 281.5, 5e-05, 3, False]]
