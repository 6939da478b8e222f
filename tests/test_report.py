"""The sweep's paper-shaped report: the chance row, the one honest headline, and the table's cells.

The chance level is checked against a simulation of random scores; the headline against hand-made
pivots: overlapping intervals name no winner, a one-seed row beside complete rows is never named, a
row a random model could produce is marked "at chance"."""

from __future__ import annotations

import math

import markupsafe
import numpy as np
import pytest

from browser import CHROMIUM, NEEDS_CHROMIUM
from itrlab.config.sweep import load_sweep
from itrlab.data.shape import DataShape
from itrlab.report.chance import chance_level, image_to_text_hit
from itrlab.report.headline import headline, row_marks
from itrlab.report.paper_report import ReportInputs, build_report
from itrlab.report.pivot import pivot, published_numbers, trial_cost_unit
from itrlab.report.summary import TrialRow, fmt_cell, metric_text

SYNTHETIC = DataShape(200, 50, 50, 5, 6, 32, synthetic=True)
F30K = DataShape(29000, 1014, 1000, 5, 36, 2048, synthetic=False)
RECALLS = ("i2t_R1", "i2t_R5", "i2t_R10", "t2i_R1", "t2i_R5", "t2i_R10")


def simulated_random_recalls(n: int, cpi: int, trials: int, seed: int = 0) -> np.ndarray:
    """R@1/5/10 both ways of random score matrices, written from the definition (ranks of true items)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(trials):
        scores = rng.random((n, n * cpi))
        own = np.arange(n * cpi) // cpi  # caption j belongs to image j // cpi
        i2t_rank = np.array([min(int((scores[i] > scores[i, own == i].max()).sum()) for _ in [0]) for i in range(n)])
        t2i_rank = np.array([int((scores[:, j] > scores[own[j], j]).sum()) for j in range(n * cpi)])
        row = [100 * np.mean(i2t_rank < k) for k in (1, 5, 10)] + [100 * np.mean(t2i_rank < k) for k in (1, 5, 10)]
        out.append(row)
    return np.array(out)


def test_chance_level_matches_random_scores():
    level = chance_level(50, 5, "all")
    assert level.recalls["t2i_R1"] == pytest.approx(2.0) and level.recalls["t2i_R10"] == pytest.approx(20.0)
    assert image_to_text_hit(50, 5, 1) == pytest.approx(5 / 250)  # one of 5 of 250 captions first
    assert level.recalls["rsum"] == pytest.approx(sum(level.recalls[k] for k in RECALLS))
    sims = simulated_random_recalls(50, 5, trials=400)
    assert sims.mean(axis=0) == pytest.approx([level.recalls[k] for k in RECALLS], abs=1.0)
    # the spread of a random model's rsum: an upper bound of the simulated one (13.2 here), not far above it
    assert sims.sum(axis=1).std() <= level.rsum_sd <= 1.2 * sims.sum(axis=1).std()
    # COCO 1K averages 5 folds of 1000 images: the same recalls as one fold, a narrower spread
    coco, one_fold = chance_level(5000, 5, "coco_1k"), chance_level(1000, 5, "all")
    assert coco.recalls["rsum"] == pytest.approx(one_fold.recalls["rsum"])
    assert coco.rsum_sd == pytest.approx(one_fold.rsum_sd / math.sqrt(5))


def test_the_chance_range_of_16_test_images_holds_a_random_models_rsums():
    """The issue's 16 test images: a random ranking's expected recalls and the 95% range of its rsum against 2,000
    random score matrices ranked from the definition. The range holds at least 95% of their rsums and is not
    much wider than their own 2.5%-97.5% range (the normal range of an upper bound of the spread)."""
    level = chance_level(16, 5, "all")
    assert level.recalls["t2i_R10"] == pytest.approx(62.5) and level.recalls["t2i_R1"] == pytest.approx(6.25)
    sims = simulated_random_recalls(16, 5, trials=2000, seed=1)
    assert sims.mean(axis=0) == pytest.approx([level.recalls[k] for k in RECALLS], abs=1.0)
    rsums = sims.sum(axis=1)
    assert rsums.mean() == pytest.approx(level.recalls["rsum"], abs=2.0)
    low, high = level.rsum_band
    assert np.mean((rsums >= low) & (rsums <= high)) >= 0.95
    sim_low, sim_high = np.quantile(rsums, [0.025, 0.975])
    assert low <= sim_low and sim_high <= high
    assert high - low <= 1.3 * (sim_high - sim_low)


def test_the_chance_level_beside_a_table_says_every_recall_and_the_range():
    """What a training prints under its table, and what MLflow keeps beside it: the same numbers."""
    level = chance_level(16, 5, "all")
    low, high = level.rsum_band
    lines = level.lines()
    assert lines[0] == "Chance (random scores on 16 images x 5 captions)"
    assert lines[1].split()[-3:] == [f"{level.recalls[f'i2t_R{k}']:.2f}" for k in (1, 5, 10)]
    assert lines[2].split()[-3:] == ["6.25", "31.25", "62.50"]
    assert lines[3] == f"  rsum {level.recalls['rsum']:.2f}, 95% range {low:.2f} to {high:.2f}"
    metrics = level.metrics()
    assert metrics["chance_t2i_R10"] == pytest.approx(62.5) and metrics["chance_rsum_high"] == high
    assert set(metrics) == {f"chance_{k}" for k in (*RECALLS, "rsum", "rsum_low", "rsum_high")}
    assert "| t2i (text->image) | 6.25 | 31.25 | 62.50 |" in level.markdown()


def cells(spec_name: str, key: str, values: dict[str, list[float]]) -> list[TrialRow]:
    """Finished trials: ``values[row]`` = test rsum per seed; the recalls split it evenly."""
    rows = []
    for label, rsums in values.items():
        for seed, rsum in enumerate(rsums):
            metrics = {f"test_{k}": rsum / 6 for k in RECALLS} | {
                "test_rsum": rsum,
                "test_md": 0.01,
                "run_seconds": 60.0,
            }
            rows.append(TrialRow(f"{label}{seed}", {key: label, "seed": seed}, metrics, "finished"))
    return rows


def dbl_table(values: dict[str, list[float]]):
    spec = load_sweep("dbl_table4", "budget").model_copy(update={"seeds": [0, 1, 2]})
    return pivot(cells("dbl_table4", "cooperative.strategy", values), spec, SYNTHETIC, "all"), spec


def test_overlapping_intervals_name_no_winner():
    # B's seeds in another order than A's: neither Welch's nor the paired interval excludes 0
    table, spec = dbl_table({"A": [150.0, 160.0, 170.0], "B": [175.0, 155.0, 165.0]})
    top = headline(table, spec, chance_level(50, 5, "all"))
    assert top.winner is None and "best_row" not in str(top.tags())
    assert top.text.startswith("no row differs from A at 95% (3 seeds)") and "highest mean: B, +5.0 ± " in top.text
    assert "best_row_rsum_vs_baseline" not in top.metrics


def test_a_clear_difference_names_the_winner():
    table, spec = dbl_table({"A": [150.0, 151.0, 152.0], "F": [170.0, 171.0, 172.0]})
    top = headline(table, spec, chance_level(50, 5, "all"))
    assert top.winner == "F" and top.tags() == {"itrlab.headline": top.text, "itrlab.best_row": "F"}
    assert top.text.startswith("best row: F, test rsum 171.0 ± 2.5, +20.0 ± ") and "over A at 95% (3 seeds)" in top.text
    assert top.metrics["best_row_rsum_vs_baseline"] == pytest.approx(20.0)


def test_a_one_seed_row_beside_complete_rows_is_not_named():
    # Ctrl-C left C with one seed and the highest mean; F beats A clearly over all three seeds
    table, spec = dbl_table({"A": [150.0, 151.0, 152.0], "C": [200.0], "F": [170.0, 171.0, 172.0]})
    top = headline(table, spec, chance_level(50, 5, "all"))
    assert top.winner == "F"
    assert "fewer seeds than the grid: C (1 seed), never named over a complete row (C's mean is higher)" in top.text
    # alone with its baseline, a one-seed row has no interval: no winner either
    table, spec = dbl_table({"A": [150.0], "C": [200.0]})
    assert headline(table, spec, None).winner is None


def test_rows_a_random_model_could_produce_are_at_chance_and_never_win():
    level = chance_level(50, 5, "all")  # rsum ~ 62, a random model's 95% range up to ~ 90
    reach = f"(rsum within a random model's 95% range, up to {level.rsum_band[1]:.1f})"
    table, spec = dbl_table({"A": [30.0, 31.0, 32.0], "F": [35.0, 36.0, 37.0]})  # F "beats" A, both at chance
    top = headline(table, spec, level)
    assert top.winner is None and top.text.endswith(f"every row is at chance {reach}")
    assert row_marks(table, spec, level).at_chance == [True, True]
    table, spec = dbl_table({"A": [30.0, 31.0, 32.0], "F": [170.0, 171.0, 172.0]})
    top = headline(table, spec, level)
    assert top.winner == "F" and top.text.endswith(f"; at chance {reach}: A")


def test_the_plot_band_and_the_at_chance_mark_are_one_range():
    """A row is "at chance" exactly when its rsum interval reaches the band the plot shades."""
    level = chance_level(50, 5, "all")
    low, high = level.rsum_band
    assert 0 < low < level.recalls["rsum"] < high == level.rsum_high
    means = {"A": [high - 1.0], "B": [high + 1.0]}  # one seed: the mean is what reaches the band, or not
    table, spec = dbl_table(means)
    assert row_marks(table, spec, level).at_chance == [True, False]


def test_the_report_reads_like_a_papers_table():
    table, spec = dbl_table({"A": [150.0, 151.0, 152.0], "C": [200.0], "F": [170.0, 171.0, 172.0]})
    level = chance_level(50, 5, "all")
    top = headline(table, spec, level)
    published, note = published_numbers(spec, SYNTHETIC, "all")
    cost_column, devices = trial_cost_unit(spec)
    report = build_report(
        table,
        spec,
        ReportInputs(
            top,
            row_marks(table, spec, level),
            level,
            published,
            note,
            cost_column,
            devices,
            ["experiment dbl_synthetic_small"],
        ),
    )
    assert report.header[:9] == [
        "cooperative.strategy",
        "rsum",
        "i2t R@1",
        "i2t R@5",
        "i2t R@10",
        "t2i R@1",
        "t2i R@5",
        "t2i R@10",
        "MD",
    ]  # rsum first: inside a narrow viewer
    first, c_row, f_row, chance_row = report.rows
    assert first[0] == "A" and first[1] == "151.0 ± 2.5" and first[9] == "baseline"
    assert c_row[1] == "200.0 (1 seed)" and c_row[-1] == "1 of 3 seeds"
    assert f_row[9].startswith("+20.0 ± ") and f_row[-1] == "best"
    low, high = level.rsum_band  # the chance row's rsum is the band the plot shades
    assert chance_row[0] == "chance" and chance_row[1] == f"{low:.1f}-{high:.1f}"
    assert chance_row[2] == f"{level.recalls['i2t_R1']:.1f}"
    assert report.notes[0].startswith("Cells: mean ± 95% Student-t interval over seeds [0, 1, 2]")
    assert report.row_kinds == ["baseline", "result", "result", "chance"]
    assert any("left out, not comparable" in n for n in report.notes)  # synthetic data: no published rows
    page = report.html()
    assert "<th>i2t R@1</th>" in page and 'class="chance"' in page
    assert '<td>151.0 <span class="ci">± 2.5</span></td>' in page  # a narrow page wraps a cell before its interval
    assert "<th>cooperative.<wbr>strategy</th>" in page  # and the first header after a dot
    assert str(markupsafe.escape(top.text)) in page  # the template's autoescape
    markdown = report.markdown()
    assert "| A | 151.0 ± 2.5 | 25.2 ± 0.4 |" in markdown and f"**{top.text}**" in markdown
    assert report.text().splitlines()[-1] == top.text  # the console ends with the headline


def test_one_seed_says_it_has_no_interval_and_each_metric_has_one_format():
    spec = load_sweep("dbl_tiny")  # one seed
    table = pivot(cells("dbl_tiny", "cooperative.strategy", {"A": [75.6], "F": [72.0]}), spec, SYNTHETIC, "all")
    level = chance_level(50, 5, "all")
    top = headline(table, spec, level)
    report = build_report(
        table, spec, ReportInputs(top, row_marks(table, spec, level), level, None, "", "cpu_hours", 1, [])
    )
    assert report.notes[0].startswith("Cells: one run per row (seed 0): no interval") and "±" not in report.notes[0]
    assert not any("±" in cell for row in report.rows for cell in row)
    assert f"rsum is at or below {level.rsum_high:.1f}, inside that band" in report.notes[1]
    assert "interval" not in report.notes[1]
    # one format per metric, wherever it is shown: the report, the trials table, the results page
    assert fmt_cell(0.000353123, "test_md") == metric_text(0.000353123, "md") == "0.000353"
    assert fmt_cell(75.6333, "test_rsum") == fmt_cell(75.6333, "rsum") == metric_text(75.6333, "test_rsum") == "75.6"
    assert fmt_cell(5e-05, "train.lr") == "5e-05" and fmt_cell(0.2, "cooperative.gamma") == "0.2"


def test_published_rows_appear_only_on_the_papers_data():
    spec = load_sweep("dbl_table4", "budget")
    rows = cells("dbl_table4", "cooperative.strategy", {"A": [400.0, 410.0], "F": [420.0, 430.0]})
    level = chance_level(1000, 5, "f30k_1k")
    for shape, expected in ((F30K, True), (DataShape(29000, 1014, 1000, 5, 36, 2048, True), False)):
        table = pivot(rows, spec, shape, "f30k_1k")
        top = headline(table, spec, level)
        published, note = published_numbers(spec, shape, "f30k_1k")
        report = build_report(
            table, spec, ReportInputs(top, row_marks(table, spec, level), level, published, note, "cpu_hours", 2, [])
        )
        assert ("published" in report.row_kinds) == expected
        assert any(row[0] == "F (published)" for row in report.rows) == expected


def test_the_data_shape_is_read_from_the_files_not_the_name(tmp_path):
    """The trials' data shape comes from the feature headers, caption counts and synthetic.json: a
    synthetic set named f30k_precomp is still synthetic, and its numbers stand beside no paper's."""
    from itrlab.data import generate_synthetic, synthetic_spec
    from itrlab.data.shape import data_shape

    root = tmp_path / "f30k_precomp"  # the name proves nothing
    generate_synthetic(root, synthetic_spec("tiny"))
    shape = data_shape(root, ("train", "dev", "test"), 5)
    assert shape == DataShape(200, 50, 50, 5, 6, 32, synthetic=True)
    spec = load_sweep("dbl_table4", "budget")
    numbers, note = published_numbers(spec, shape, "all")
    assert numbers is None and "synthetic True vs False" in note


def test_other_pairs_of_rows_get_their_difference_with_welchs_interval():
    """``table.compare`` (ConVSE Table III: ConVSE++ against ConVSE, besides both against VSE++): each pair's
    difference of the objective with Welch's interval, a note under the table and in the summary."""
    from itrlab.report.pivot import comparisons
    from itrlab.report.stats import difference_interval

    spec = load_sweep("convse_table3")
    assert spec.table.compare == [("ConVSE++", "ConVSE")]
    values = {
        "MVN": [250.0, 255.0, 260.0],
        "VSE": [270.0, 280.0, 275.0],
        "VSE++": [300.0, 310.0, 320.0],
        "ConVSE": [290.0, 300.0, 295.0],
        "ConVSE++": [270.0, 282.0, 276.0],
    }
    rows = cells("convse_table3", "variant", values)
    (pair,) = comparisons(rows, spec, "test_rsum")
    expected = difference_interval(values["ConVSE++"], values["ConVSE"])
    assert (pair.row, pair.reference, pair.difference.value) == ("ConVSE++", "ConVSE", pytest.approx(-19.0))
    assert pair.difference.half_width == pytest.approx(expected.half_width) and pair.difference.excludes_zero()
    assert pair.to_dict()["seeds"] == 3
    table = pivot(rows, spec, SYNTHETIC, "all")
    level = chance_level(50, 5, "all")
    top = headline(table, spec, level)
    published, note = published_numbers(spec, SYNTHETIC, "all")
    report = build_report(
        table,
        spec,
        ReportInputs(top, row_marks(table, spec, level), level, published, note, "cpu_hours", 2, [], [pair]),
    )
    assert (
        f"Other differences, with Welch's 95% interval: ConVSE++ vs ConVSE -19.0 ± {expected.half_width:.1f} "
        f"(differs at 95%)."
    ) in report.notes
    # a pair whose reference has one seed: the difference without an interval, and the seed count
    (lone,) = comparisons(cells("convse_table3", "variant", {**values, "ConVSE": [295.0]}), spec, "test_rsum")
    assert lone.difference.half_width is None and lone.difference.n == 1


FRAME_AT_1280 = 480  # px: the frame MLflow's artifact view gives an HTML file in a 1280-px window (its panels open)
WIDTH_PROBE = """<script>
const page = document.scrollingElement;
document.body.setAttribute("data-scroll", page.scrollWidth + " " + page.clientWidth);
</script></body>"""


def scroll_widths(page: str, folder, width: int) -> tuple[int, int]:
    """The page's scroll width and the window's width, as headless Chromium lays the page out ``width`` px wide."""
    import re

    from browser import browser_dom

    probe = folder / "probe.html"
    probe.write_text(page.replace("</body>", WIDTH_PROBE), encoding="utf-8")
    dom = browser_dom(probe.as_uri(), width=width, budget_ms=5000, timeout=120)
    scroll, client = re.search(r'data-scroll="(\d+) (\d+)"', dom).groups()
    return int(scroll), int(client)


@pytest.mark.e2e
@pytest.mark.skipif(CHROMIUM is None, reason=NEEDS_CHROMIUM)
def test_the_report_needs_no_horizontal_scroll_in_mlflows_frame_at_1280_px(tmp_path):
    """The report's HTML in the width MLflow's artifact view gives it in a 1280-px window: every column (the
    recalls, MD, the difference to the baseline, the cost, the note), the models' URIs and the provenance fit
    without a horizontal scroll; the tables each lead with the row's label."""
    spec = load_sweep("dbl_table4", "budget").model_copy(update={"seeds": [0, 1, 2]})
    rows = cells(
        "dbl_table4", "cooperative.strategy", {"A": [150.0, 151.0, 152.0], "C": [200.0], "F": [170.0, 171.0, 172.0]}
    )
    for i, row in enumerate(rows):  # MD with an interval of 3 significant digits, as a real sweep's: the widest cell
        row.metrics["test_md"] = 0.28 + 0.00565 * i
    table = pivot(rows, spec, SYNTHETIC, "all")
    level = chance_level(50, 5, "all")
    top = headline(table, spec, level)
    cost_column, devices = trial_cost_unit(spec)
    report = build_report(
        table,
        spec,
        ReportInputs(
            top,
            row_marks(table, spec, level, {"C": "best validation epoch 3 of 3"}),
            level,
            None,
            "Published numbers (dbl_table4) left out, not comparable: the trials' data differ.",
            cost_column,
            devices,
            ["experiment dbl_synthetic_small with train.epochs=3 train.lr_decay_epochs=[] dataset.root=" + "x" * 60],
        ),
    )
    report.models = [["A", "a0", "runs:/0123456789abcdef0123456789abcdef/model", ""]]
    page = report.html()
    assert page.count("<table>") == 2 and page.count("<th>cooperative.<wbr>strategy</th>") == 2
    scroll, window = scroll_widths(page, tmp_path, FRAME_AT_1280)
    assert scroll <= window, f"the page is {scroll} px wide in a {window}-px frame"


def report_of(table, spec, level=None, learning=None, converged=None, pairs=()):
    top = headline(table, spec, level, learning)
    return top, build_report(
        table,
        spec,
        ReportInputs(
            top,
            row_marks(table, spec, level, learning),
            level,
            None,
            "",
            "cpu_hours",
            1,
            [],
            list(pairs),
            convergence=converged,
        ),
    )


def test_a_headline_never_calls_a_row_still_learning_no_better_than_the_baseline():
    """With a row still learning, "no row differs" becomes "inconclusive", naming why."""
    level = chance_level(50, 5, "all")
    table, spec = dbl_table({"A": [150.0, 160.0, 170.0], "B": [175.0, 155.0, 165.0], "C": [160.0, 150.0, 171.0]})
    assert headline(table, spec, level).text.startswith("no row differs from A at 95% (3 seeds)")
    why = "best validation rsum still rising: +12.5 from epoch 3 to 4 (mean over 2 seeds), more than the tolerance 1.0"
    top, report = report_of(table, spec, level, {"C": why}, converged={})
    assert top.text.startswith(
        f"no converged row differs from A at 95% (3 seeds); inconclusive for the rows still learning: C ({why})"
    )
    assert report.rows[2][-1] == f"still learning: {why}"
    top = headline(table, spec, level, {"A": why})  # the baseline still learning: every comparison is open
    assert top.text.startswith(f"inconclusive against A (3 seeds): still learning: A ({why})") and top.winner is None
    assert "differs" not in top.text.split(";")[0] and "beats" not in top.text
    top = headline(table, spec, level, {"B": why, "C": why})
    assert top.text.startswith(f"inconclusive against A (3 seeds): still learning: B ({why}), C ({why})")
    # a winner still learning keeps its name, said to hold at this budget only; the notes give the rule
    from itrlab.report.convergence import convergence

    converged = {"A": convergence([[(1, 100.0), (2, 120.0), (3, 119.0)]]), "F": convergence([[(1, 100.0), (2, 130.0)]])}
    learning = {row: found.learning for row, found in converged.items()}
    table, spec = dbl_table({"A": [150.0, 151.0, 152.0], "F": [170.0, 171.0, 172.0], "C": [150.0, 152.0, 151.0]})
    top, report = report_of(table, spec, level, learning, converged)
    assert top.winner == "F"
    assert (
        "; still learning, so at this budget only: F (best validation rsum still rising: +30.0 from epoch 1 to 2 "
        "(mean over 1 seed), more than the tolerance 1.0)"
    ) in top.text
    assert any(
        note.startswith("Still learning: a row whose best validation rsum so far rose")
        and "Still learning here: F." in note
        and note.endswith("Not judged (no validation history): C.")
        for note in report.notes
    )
    # a row whose seeds chose their decay on validation: which each chose, in its note; the rule says so
    chose = [(1,), (1,), (2,)]
    converged["F"] = convergence(
        [[(1, 100.0), (2, 130.0), (3, 130.0)]] * 3, seed_decays=chose, chosen="after 1 (seeds 0, 1), after 2 (seed 2)"
    )
    _, report = report_of(table, spec, level, {}, converged)
    assert report.rows[2][-1].startswith("decay chosen on validation: after 1 (seeds 0, 1), after 2 (seed 2)")
    assert any("each seed judged at the decay it chose on validation" in note for note in report.notes)


def test_rows_that_share_seeds_are_compared_paired_and_the_page_says_which_interval_the_headline_used():
    """The per-seed differences' t interval beside Welch's; the headline uses the paired one."""
    from itrlab.report.stats import difference_interval

    level = chance_level(50, 5, "all")
    table, spec = dbl_table({"A": [150.0, 160.0, 170.0], "B": [155.0, 166.0, 174.0]})
    welch = difference_interval([155.0, 166.0, 174.0], [150.0, 160.0, 170.0])
    assert not welch.excludes_zero()  # Welch's interval holds 0: the seeds' spread swamps the difference
    assert table["test_rsum_diff_paired"][1] == pytest.approx(5.0) and table["test_rsum_diff_paired_seeds"][1] == 3
    paired = mean_interval_of([5.0, 6.0, 4.0])
    assert table["test_rsum_diff_paired_ci95"][1] == pytest.approx(paired.half_width)
    top, report = report_of(table, spec, level)
    assert top.winner == "B" and top.interval == "paired"
    assert top.text.endswith(f"+5.0 ± {paired.half_width:.1f} over A at 95% (3 seeds), paired by seed")
    assert report.header[9:11] == ["rsum vs A", "rsum vs A, paired"]
    assert report.rows[1][9:11] == [f"+5.0 ± {welch.half_width:.1f}", f"+5.0 ± {paired.half_width:.1f}"]
    assert (
        "The headline's interval: the paired one (the per-seed differences over the seeds both rows finished)."
        in report.notes
    )
    # B has one seed in common with A: Welch's interval, said to be so; no paired column
    rows = cells("dbl_table4", "cooperative.strategy", {"A": [150.0, 151.0, 152.0], "B": [170.0, 171.0, 172.0]})
    rows = [
        row
        if not row.trial_id.startswith("B")
        else TrialRow(row.trial_id, {**row.params, "seed": row.params["seed"] + 2}, row.metrics, row.status)
        for row in rows
    ]
    table = pivot(
        rows, load_sweep("dbl_table4", "budget").model_copy(update={"seeds": [0, 1, 2, 3, 4]}), SYNTHETIC, "all"
    )
    top, report = report_of(
        table, load_sweep("dbl_table4", "budget").model_copy(update={"seeds": [0, 1, 2, 3, 4]}), level
    )
    assert top.interval == "Welch" and "paired" not in top.text and "rsum vs A, paired" not in report.header
    assert "The headline's interval: Welch's (the two rows share fewer than two finished seeds)." in report.notes


def test_a_baseline_below_which_every_row_lies_is_said_to_beat_them():
    """The best row is the baseline and every other row is below it at 95%: the headline says so, with each
    difference and its interval (VSE++ over VSE on Flickr8K read "no row beats VSE++" before)."""
    level = chance_level(50, 5, "all")
    table, spec = dbl_table({"A": [170.0, 176.0, 181.0], "B": [160.0, 167.0, 171.0], "C": [165.0, 171.0, 177.0]})
    top, report = report_of(table, spec, level)
    paired_b, paired_c = mean_interval_of([-10.0, -9.0, -10.0]), mean_interval_of([-5.0, -5.0, -4.0])
    assert top.winner is None and top.interval == "paired"
    assert top.text == (
        f"A beats every row at 95% (3 seeds): B -9.7 ± {paired_b.half_width:.1f} (paired), "
        f"C -4.7 ± {paired_c.half_width:.1f} (paired)"
    )
    assert "The headline's interval: the paired one" in " ".join(report.notes)
    table, spec = dbl_table({"A": [170.0, 176.0, 181.0], "B": [160.0, 167.0, 171.0], "C": [169.0, 177.0, 180.0]})
    assert report_of(table, spec, level)[0].text.startswith("no row beats A at 95%")  # C is not below A


def mean_interval_of(values):
    from itrlab.report.stats import mean_interval

    return mean_interval(values)


def test_a_row_whose_every_seed_diverged_stays_in_the_table_and_the_headline_names_it():
    """A row whose every seed diverged stays in the table and the headline names it, so it never reads as a
    row never run."""
    spec = load_sweep("dbl_table4", "budget").model_copy(update={"seeds": [0, 1, 2]})
    rows = cells("dbl_table4", "cooperative.strategy", {"A": [150.0, 151.0, 152.0], "F": [170.0, 171.0, 172.0]})
    rows += [
        TrialRow(
            f"C{seed}",
            {"cooperative.strategy": "C", "seed": seed},
            {"loss": math.nan},
            "diverged",
            "loss became nan at epoch 2 | step 7",
        )
        for seed in range(3)
    ]
    table = pivot(rows, spec, SYNTHETIC, "all")
    assert table["cooperative.strategy"] == ["A", "C", "F"] and table["seeds"] == [3, 0, 3]
    assert table["test_rsum_mean"][1] is None and table["unfinished"] == [
        "",
        "diverged 3/3: loss became nan at epoch 2 | step 7",
        "",
    ]
    top, report = report_of(table, spec, chance_level(50, 5, "all"))
    assert top.winner == "F" and "; no result: C (diverged 3/3: loss became nan at epoch 2 | step 7)" in top.text
    c_row = report.rows[1]
    assert c_row[0] == "C" and c_row[1] == "-"
    assert c_row[-1] == "0 of 3 seeds, diverged 3/3: loss became nan at epoch 2 | step 7"
    assert "| C | - |" in report.markdown() and "step 7 |" in report.markdown().split("| C |")[1].splitlines()[0]
    # some seeds failed: the row keeps its mean and says what became of the others
    rows = cells("dbl_table4", "cooperative.strategy", {"A": [150.0, 151.0, 152.0], "F": [170.0]})
    rows += [
        TrialRow(f"F{seed}x", {"cooperative.strategy": "F", "seed": seed}, {}, "error", "killed") for seed in (1, 2)
    ]
    top = headline(pivot(rows, spec, SYNTHETIC, "all"), spec)
    assert "fewer seeds than the grid: F (1 seed; failed 2/3)" in top.text
    # every row diverged: the headline says so, and the report still has a table
    rows = [
        TrialRow(f"{s}{seed}", {"cooperative.strategy": s, "seed": seed}, {}, "diverged", "loss became inf")
        for s in "AF"
        for seed in range(3)
    ]
    table = pivot(rows, spec, SYNTHETIC, "all")
    top, report = report_of(table, spec)
    assert top.text == ("no row finished: A (diverged 3/3: loss became inf), F (diverged 3/3: loss became inf)")
    assert [row[0] for row in report.rows] == ["A", "F"] and top.winner is None
