"""``itrlab report RUN_ID``: a sweep's dated results page, written from its parent run's summary, its
rendering tested on a fabricated summary (the command on a real tiny sweep: tests/test_sweep.py)."""

from __future__ import annotations

from itrlab.report.results_page import page_name, render, unused_page_name

RUN = {
    "run_id": "abc123",
    "experiment": "dbl_tiny",
    "status": "FINISHED",
    "start_time": 1795435200000,
    "end_time": 1795435260000,
    "tags": {"mlflow.source.git.commit": "0123456789abcdef"},
}
SUMMARY = {
    "sweep": "dbl_tiny",
    "description": "",
    "experiment": "dbl_synthetic_tiny",
    "objective": "max rsum",
    "seeds": [0, 1],
    "dataset": "synthetic_tiny",
    "test_protocol": "all",
    "trial_counts": {"finished": 3, "error": 1},
    "trials": {
        "rank": [1, 2],
        "trial": ["t1", "t2"],
        "status": ["finished", "error"],
        "rsum": [60.0, None],
        "reason": ["", "loss became nan"],
    },
    "data_shape": {
        "train_images": 200,
        "val_images": 50,
        "test_images": 50,
        "captions_per_image": 5,
        "regions": 6,
        "feature_dim": 32,
        "synthetic": True,
    },
    "report": {
        "title": "dbl_tiny: test results over seeds [0, 1]",
        "header": ["cooperative.strategy", "rsum", "rsum vs A", "wall / trial", "CPU-h", "note"],
        "rows": [
            ["A", "84.4 ± 3.1", "baseline", "12 s", "0.0133", ""],
            ["F", "68.8 (1 seed)", "-15.6 (1 seed)", "11 s", "0.00611", "1 of 2 seeds"],
            ["chance", "32.1", "", "", "", "rsum of random scores ≤ 60.1 at 95%"],
        ],
        "row_kinds": ["baseline", "result", "chance"],
        "headline": "no row differs from A at 95% (1-2 seeds)",
        "notes": [
            "Cells: mean ± 95% Student-t interval over seeds [0, 1]",
            "Cost: wall / trial = the mean run time of a row's trials",
        ],
        "provenance": [],
    },
    "headline": "no row differs from A at 95% (1-2 seeds)",
    "plots": ["sweep/plots/pivot_test_rsum.png"],
}


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
    assert "trials: 4 (3 finished, 1 error)" in page
    # a summary from before the invocation's time was recorded: the parent run's span, said to be so
    assert "the parent run's span: 1 min 0 s (every invocation and the gaps between them)" in page


def test_the_wall_time_is_the_invocations_own_and_the_ranking_is_said():
    summary = {**SUMMARY, "invocation_seconds": 95.2, "ranking": "ranked by their best epoch's validation rsum"}
    page = render(summary, RUN)
    assert "wall time of the invocation that wrote these results: 1 min 35 s (its start to its report" in page
    assert "parent run's span" not in page and "Trials ranked by their best epoch's validation rsum." in page


def test_a_sweep_resumed_at_other_code_names_every_commit_it_ran_under():
    tags = {
        "mlflow.source.git.commit": "bbbbbbbbbbbbbbbb",
        "itrlab.source.commits": "aaaaaaaaaaaaaaaa bbbbbbbbbbbbbbbb",
    }
    page = render(SUMMARY, {**RUN, "tags": tags})
    assert "- code: commits `aaaaaaaaaaaa`, then `bbbbbbbbbbbb` (the sweep was resumed at other code" in page
    assert "code: commit `" not in page


def test_a_sweep_without_a_table_still_gets_its_trials():
    summary = {k: v for k, v in SUMMARY.items() if k not in ("report", "headline")}
    page = render(summary, RUN)
    assert "## Results" not in page and "## Trials" in page


def test_what_the_runs_show_reads_each_part_from_its_own_first_epoch_against_its_floor():
    """Never one "last / first" of a total across rows whose first epoch is another loss. A warm-up
    epoch (another loss) is not read; a term switched on after epoch 1 (0 before) is read from its first
    epoch, and so is the total that sums it; a statistic logged beside the loss moves no total; a ratio
    is given only against a declared floor, never for a part that can go below zero. A trial that did
    not finish, or that has no run, is left out."""
    from itrlab.losses.parts import PartBound
    from itrlab.report.diagnostics import diagnostics

    summary = {
        **SUMMARY,
        "table_rows": ["cooperative.strategy"],
        "trials": {
            "trial": ["a0", "a1", "f0", "f1"],
            "status": ["finished", "finished", "finished", "error"],
            "cooperative.strategy": ["A", "A", "F", "F"],
            "seed": [0, 1, 0, 1],
        },
    }
    warmup = {"params": {"loss.warmup_epochs": "1"}, "tags": {"method": "plain"}}
    runs = {
        "a0": {
            **warmup,
            "history": {
                "loss": [(1, 1860.0), (2, 10.0), (3, 6.0)],  # epoch 1: the warm-up's loss
                "loss_i2t": [(1, 930.0), (2, 5.0), (3, 3.0)],
            },
        },
        "a1": {
            **warmup,
            "history": {"loss": [(1, 1800.0), (2, 12.0), (3, 6.0)], "loss_i2t": [(1, 900.0), (2, 6.0), (3, 3.0)]},
        },
        "f0": {
            "params": {"loss.warmup_epochs": "0"},
            "tags": {"method": "clustered"},
            "history": {
                "loss": [(1, 4.0), (2, 5.0), (3, 3.0)],
                "loss_cluster": [(1, 0.0), (2, 2.3), (3, 1.15)],  # on from epoch 2
                "loss_labelled": [(1, 0.0), (2, 0.0), (3, 1.0)],  # a statistic: moves no total
                "loss_signed": [(1, 4.0), (2, 2.7), (3, -0.15)],
            },
        },  # can go below zero
        "f1": {"history": {"loss": [(1, 1.0), (2, 1.0)]}},
    }  # its trial failed: not counted
    bounds = {"clustered": {"cluster": PartBound(0.0, "ln K"), "labelled": PartBound(0.0, "a share", statistic=True)}}
    table = diagnostics(summary, runs, bounds)
    assert table["header"] == [
        "row",
        "seeds",
        "part",
        "from epoch",
        "first",
        "to epoch",
        "last",
        "last - first",
        "% of the way to its floor",
        "floor / plateau",
    ]
    assert table["rows"] == [
        ["A", 2, "loss (total)", "2", 11.0, "3", 6.0, -5.0, None, ""],
        ["A", 2, "i2t", "2", 5.5, "3", 3.0, -2.5, None, ""],
        ["F", 1, "loss (total)", "2", 5.0, "3", 3.0, -2.0, None, ""],
        ["F", 1, "cluster", "2", 2.3, "3", 1.15, -1.15, 50.0, "floor 0; ln K"],
        ["F", 1, "labelled", "3", 1.0, "3", 1.0, 0.0, None, "statistic; floor 0; a share"],
        ["F", 1, "signed", "1", 4.0, "3", -0.15, -4.15, None, ""],
    ]
    assert (
        "the first epoch after the loss's warm-up, if it has one (here 1 epoch of another loss, not read), at "
        "which it is not 0" in table["notes"][0]
    )
    page = render(summary, RUN, diagnostics=table)
    assert "## What the runs show" in page and "| A | 2 | loss (total) | 2 | 11 | 3 | 6 | -5 |  |  |" in page
    assert "| F | 1 | cluster | 2 | 2.3 | 3 | 1.15 | -1.15 | 50 | floor 0; ln K |" in page
    assert page.index("## What the runs show") < page.index("## Trials")
    # a run as older callers give it (the total's history alone): the total from epoch 1
    old = diagnostics(summary, {"a0": {"loss": [(1, 10.0), (2, 6.0)], "metrics": {}}})
    assert old["rows"] == [["A", 1, "loss (total)", "1", 10.0, "2", 6.0, -4.0, None, ""]]
    # no finished trial with a loss history, or a summary whose rows cannot be named: no section
    assert (
        diagnostics(summary, {}) is None and diagnostics({**summary, "table_rows": ["nope"], "grid": {}}, runs) is None
    )
    assert "## What the runs show" not in render(summary, RUN)


def test_a_profile_other_than_budget_names_its_page():
    """Two profiles of one sweep on one day get two pages (coder_table2's budget and flickr8k runs)."""
    assert page_name({**RUN, "tags": {"itrlab.profile": "flickr8k"}}, SUMMARY) == "2026-11-23-dbl_tiny-flickr8k"
    assert page_name({**RUN, "tags": {"itrlab.profile": "budget"}}, SUMMARY) == "2026-11-23-dbl_tiny"
    assert render(SUMMARY, {**RUN, "tags": {"itrlab.profile": "flickr8k"}}).startswith(
        "# dbl_tiny --profile flickr8k: 2026-11-23\n"
    )


def test_the_page_says_how_its_setting_deviates_from_the_paper_before_any_verdict():
    deviations = "Flickr8K, not Flickr30K: real photos on 2 cores\nrows D and E left out: *identical* to F and G"
    page = render(SUMMARY, {**RUN, "tags": {"itrlab.profile": "flickr8k", "itrlab.deviations": deviations}})
    setting = page.index("## Setting: how it deviates from the paper")
    assert setting < page.index("## Results")
    assert (
        "- Flickr8K, not Flickr30K: real photos on 2 cores\n- rows D and E left out: \\*identical\\* to F and G" in page
    )
    assert "## Setting" not in render(SUMMARY, {**RUN, "tags": {"itrlab.deviations": "none"}})  # a sweep as written


def test_a_page_of_another_sweep_is_never_written_over(tmp_path):
    """The same sweep twice on one day (on a GPU, then on a CPU): the second page gets the next free name;
    the page of the same parent run is written again in place."""
    assert unused_page_name(tmp_path, "2026-11-23-dbl_tiny", "abc123") == "2026-11-23-dbl_tiny"
    (tmp_path / "2026-11-23-dbl_tiny.md").write_text(render(SUMMARY, RUN))
    assert unused_page_name(tmp_path, "2026-11-23-dbl_tiny", "abc123") == "2026-11-23-dbl_tiny"
    assert unused_page_name(tmp_path, "2026-11-23-dbl_tiny", "def456") == "2026-11-23-dbl_tiny-2"
    (tmp_path / "2026-11-23-dbl_tiny-2.md").write_text(render(SUMMARY, {**RUN, "run_id": "def456"}))
    assert unused_page_name(tmp_path, "2026-11-23-dbl_tiny", "def456") == "2026-11-23-dbl_tiny-2"
    assert unused_page_name(tmp_path, "2026-11-23-dbl_tiny", "0a0b0c") == "2026-11-23-dbl_tiny-3"
