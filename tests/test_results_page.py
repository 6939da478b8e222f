"""``itrlab report RUN_ID``: a sweep's dated results page, written from its parent run's summary, its
rendering tested on a fabricated summary (the command on a real tiny sweep: tests/test_sweep.py)."""

from __future__ import annotations

from itrlab.report.results_page import page_name, render

RUN = {"run_id": "abc123", "experiment": "dbl_tiny", "status": "FINISHED", "start_time": 1795435200000,
       "end_time": 1795435260000, "tags": {"mlflow.source.git.commit": "0123456789abcdef"}}
SUMMARY = {"sweep": "dbl_tiny", "description": "", "experiment": "dbl_synthetic_tiny", "objective": "max rsum",
           "seeds": [0, 1], "dataset": "synthetic_tiny", "test_protocol": "all",
           "trial_counts": {"finished": 3, "error": 1},
           "trials": {"rank": [1, 2], "trial": ["t1", "t2"], "status": ["finished", "error"], "rsum": [60.0, None],
                      "reason": ["", "loss became nan"]},
           "data_shape": {"train_images": 200, "val_images": 50, "test_images": 50, "captions_per_image": 5,
                          "regions": 6, "feature_dim": 32, "synthetic": True},
           "report": {"title": "dbl_tiny: test results over seeds [0, 1]",
                      "header": ["cooperative.strategy", "rsum", "rsum vs A", "wall / trial", "CPU-h", "note"],
                      "rows": [["A", "84.4 ± 3.1", "baseline", "12 s", "0.0133", ""],
                               ["F", "68.8 (1 seed)", "-15.6 (1 seed)", "11 s", "0.00611", "1 of 2 seeds"],
                               ["chance", "32.1", "", "", "", "rsum of random scores ≤ 60.1 at 95%"]],
                      "row_kinds": ["baseline", "result", "chance"],
                      "headline": "no row differs from A at 95% (1-2 seeds)",
                      "notes": ["Cells: mean ± 95% Student-t interval over seeds [0, 1]",
                                "Cost: wall / trial = the mean run time of a row's trials"], "provenance": []},
           "headline": "no row differs from A at 95% (1-2 seeds)",
           "plots": ["sweep/plots/pivot_test_rsum.png"]}


def test_the_page_holds_provenance_pivot_headline_trials_cost_and_plots():
    page = render(SUMMARY, RUN, {"sweep/plots/pivot_test_rsum.png": "img/x.png"})
    assert page_name(RUN, SUMMARY) == "2026-11-23-dbl_tiny"
    assert page.startswith("# dbl_tiny: 2026-11-23\n")
    assert "parent run `abc123` (FINISHED)" in page and "commit `0123456789ab`" in page
    assert "| A | 84.4 ± 3.1 | baseline | 12 s | 0.0133 |  |" in page
    assert "| F | 68.8 (1 seed) | -15.6 (1 seed) | 11 s | 0.00611 | 1 of 2 seeds |" in page
    assert "| chance | 32.1 |" in page and "200 / 50 / 50 images x 5 captions, 6 x 32 features, synthetic" in page
    assert "**no row differs from A at 95% (1-2 seeds)**" in page and "Cost: wall / trial" in page
    assert "- `t2`: loss became nan" in page and "![sweep/plots/pivot_test_rsum.png](img/x.png)" in page
    assert "trials: 4 (3 finished, 1 error)" in page and "1 min 0 s" in page


def test_a_sweep_without_a_table_still_gets_its_trials():
    summary = {k: v for k, v in SUMMARY.items() if k not in ("report", "headline")}
    page = render(summary, RUN)
    assert "## Results" not in page and "## Trials" in page
