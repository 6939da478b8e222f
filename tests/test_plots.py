"""The sweep's plots read at a glance: bars from 0 with an x label, a chance band, intervals only
where rows have them, a tick at every swept value on a log axis; curves grouped by pivot row (one
colour and one legend entry per row, a band over its seeds), whole epochs, and a log loss axis when
the rows' losses differ in scale. Asserted on the matplotlib figures, not on the PNG files."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_rgba
from matplotlib.container import ErrorbarContainer

from itrlab.config.sweep import load_sweep
from itrlab.report.plots import curves_figure, pivot_figure, plot_curves, plot_pivot

STRATEGIES = list("ABCDEFGHI")
TAUS = [0.01, 0.02, 0.05, 0.1, 0.2]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def pivot_table(key: str, values: list, means: list[float], halves: list[float | None]) -> dict[str, list]:
    """A pivot as :func:`itrlab.report.pivot.pivot` shapes it, for the test_rsum column."""
    return {
        key: values,
        "seeds": [1 if h is None else 3 for h in halves],
        "test_rsum_mean": means,
        "test_rsum_ci95": halves,
    }


def legend_texts(ax) -> list[str]:
    return [text.get_text() for text in ax.get_legend().get_texts()]


def error_bar_count(ax) -> int:
    return sum(len(c.lines[2][0].get_segments()) for c in ax.containers if isinstance(c, ErrorbarContainer))


def bands(ax) -> list[PolyCollection]:
    return [c for c in ax.collections if isinstance(c, PolyCollection)]


def chance_bands(ax) -> list:
    """The shaded chance band(s): patches labelled "chance ..." (axhspan)."""
    return [p for p in ax.patches if p.get_label().startswith("chance")]


def test_bars_start_at_zero_with_an_x_label_and_a_chance_band():
    spec = load_sweep("dbl_table4", "budget")
    means = [100.0 + 2 * i for i in range(9)]  # F (110) is 1.1x A (100): from 0 the bars say so
    fig = pivot_figure(pivot_table("cooperative.strategy", STRATEGIES, means, [3.0] * 9), spec, chance=(2.0, 6.0))
    ax = fig.axes[0]
    assert ax.get_ylim()[0] == 0
    assert ax.get_xlabel() == "cooperative.strategy"
    assert [t.get_text() for t in ax.get_xticklabels()] == STRATEGIES
    (band,) = chance_bands(ax)  # the random model's 95% range, the one the report's "at chance" reaches
    ys = band.get_path().transformed(band.get_patch_transform()).vertices[:, 1]
    assert min(ys) == pytest.approx(2.0) and max(ys) == pytest.approx(6.0)
    assert "chance: random scores' 95% range (2.0-6.0)" in legend_texts(ax) and "95% interval" in legend_texts(ax)
    assert error_bar_count(ax) == 9


def test_one_seed_bars_have_no_interval_and_say_1_seed():
    spec = load_sweep("dbl_table4", "budget")
    fig = pivot_figure(pivot_table("cooperative.strategy", STRATEGIES, [50.0] * 9, [None] * 9), spec)
    ax = fig.axes[0]
    texts = legend_texts(ax)
    assert not any("95% interval" in t for t in texts)
    assert any("1 seed" in t for t in texts)
    assert error_bar_count(ax) == 0
    assert not chance_bands(ax)  # no chance given: no band


def test_error_bars_only_on_rows_with_an_interval():
    spec = load_sweep("dbl_table4", "budget")
    halves = [2.0, None, 1.5, None, None, 4.0, None, None, None]
    fig = pivot_figure(pivot_table("cooperative.strategy", STRATEGIES, [60.0] * 9, halves), spec)
    ax = fig.axes[0]
    assert error_bar_count(ax) == 3
    assert "95% interval" in legend_texts(ax)


def test_log_tau_axis_has_a_tick_at_every_swept_value():
    spec = load_sweep("ascl_tau")
    fig = pivot_figure(pivot_table("loss.tau", TAUS, [300, 320, 310, 280, 250], [5.0] * 5), spec, chance=(2.0, 6.0))
    ax = fig.axes[0]
    assert ax.get_xscale() == "log"
    assert list(ax.get_xticks()) == pytest.approx(TAUS)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0.01", "0.02", "0.05", "0.1", "0.2"]
    assert len(ax.xaxis.get_minorticklocs()) == 0
    assert ax.get_xlabel() == "loss.tau"
    assert chance_bands(ax)
    assert [b.get_label() for b in bands(ax)] == ["95% interval"]


def test_swept_line_with_one_seed_has_no_band():
    spec = load_sweep("dbl_fig4_gamma")  # 0.1 .. 0.3: a linear axis
    fig = pivot_figure(pivot_table("cooperative.gamma", [0.1, 0.15, 0.2, 0.25, 0.3], [1, 2, 3, 4, 5], [None] * 5), spec)
    ax = fig.axes[0]
    assert ax.get_xscale() == "linear"
    assert not bands(ax) and error_bar_count(ax) == 0
    assert any("1 seed" in t for t in legend_texts(ax)) and "95% interval" not in legend_texts(ax)


def test_published_numbers_are_drawn_where_the_pivot_holds_them():
    spec = load_sweep("dbl_table4", "budget")
    table = pivot_table("cooperative.strategy", STRATEGIES, [60.0] * 9, [1.0] * 9)
    table["test_rsum_paper"] = [400.0, None, 410.0] + [None] * 6
    ax = pivot_figure(table, spec).axes[0]
    published = [line for line in ax.lines if line.get_label() == "published"]
    assert len(published) == 1 and list(published[0].get_ydata()) == [400.0, 410.0]


def seeds_of(rows: list[str], loss_scales: list[float], epochs: int = 5) -> dict[str, dict]:
    """Three seeds per row; rsum grows with the epoch, the loss is the row's scale shrinking."""
    curves = {}
    for r, (row, scale) in enumerate(zip(rows, loss_scales)):
        for seed in range(3):
            curves[f"trial_{r}_{seed}"] = {
                "row": row,
                "rsum": [(e, 10.0 * e + r + seed) for e in range(1, epochs + 1)],
                "loss": [(e, scale / e * (1 + 0.01 * seed)) for e in range(1, epochs + 1)],
            }
    return curves


def test_curves_group_15_trials_into_5_rows_with_distinct_colours():
    spec = load_sweep("dbl_table4", "budget")
    fig = curves_figure(seeds_of(list("EDCBA"), [200.0, 2.0, 2.0, 2.0, 2.0]), spec)
    top, bottom = fig.axes
    assert [t.get_text() for t in fig.legends[0].get_texts()] == list("ABCDE")  # the grid's order
    assert len(top.lines) == len(bottom.lines) == 5  # a mean line per row, not a line per trial
    colours = [to_rgba(line.get_color()) for line in top.lines]
    assert len(set(colours)) == 5
    assert len(bands(top)) == len(bands(bottom)) == 5
    assert "band: range over seeds" in top.get_title()


def test_the_mean_line_and_band_span_the_seeds():
    spec = load_sweep("dbl_table4", "budget")
    fig = curves_figure(seeds_of(["A"], [2.0]), spec)
    top = fig.axes[0]
    assert list(top.lines[0].get_ydata()) == pytest.approx([10.0 * e + 1 for e in range(1, 6)])  # seeds +0, +1, +2
    ys = bands(top)[0].get_paths()[0].vertices[:, 1]
    assert min(ys) == pytest.approx(10.0) and max(ys) == pytest.approx(52.0)


def test_epoch_ticks_are_whole_numbers():
    spec = load_sweep("dbl_table4", "budget")
    fig = curves_figure(seeds_of(list("AB"), [2.0, 2.0], epochs=3), spec)
    fig.canvas.draw()
    for ax in fig.axes:
        ticks = ax.get_xticks()
        assert len(ticks) >= 2 and all(float(t).is_integer() for t in ticks)


def test_losses_of_different_scales_are_drawn_relative_to_their_first_epoch():
    """A summed hinge near 200 beside an InfoNCE near 2: each row's curve starts at 1.0, so both descents
    fill the panel; rows of one scale keep their logged values."""
    spec = load_sweep("dbl_table4", "budget")
    _, bottom = curves_figure(seeds_of(list("AB"), [200.0, 2.0]), spec).axes
    assert bottom.get_ylabel() == "training loss / its first epoch's"
    assert [line.get_ydata()[0] for line in bottom.lines] == pytest.approx([1.0, 1.0])
    assert all(min(line.get_ydata()) < 1.0 for line in bottom.lines)  # each row's descent is visible
    _, bottom = curves_figure(seeds_of(list("AB"), [3.0, 2.0]), spec).axes
    assert bottom.get_ylabel() == "training loss" and bottom.lines[0].get_ydata()[0] != pytest.approx(1.0)


def test_many_rows_get_distinct_colours_and_a_legend_below_the_panels():
    spec = load_sweep("dbl_table4", "budget")
    rows = [f"row{i:02d}" for i in range(15)]
    fig = curves_figure(seeds_of(rows, [2.0] * 15), spec)
    assert len({to_rgba(line.get_color()) for line in fig.axes[0].lines}) == 15
    legend = fig.legends[0]
    assert len(legend.get_texts()) == 15 and legend._ncols > 1
    fig.canvas.draw()
    box = legend.get_window_extent()
    assert all(box.y1 <= ax.get_window_extent().y0 for ax in fig.axes)  # covers no line


def test_trials_without_a_row_are_rows_of_their_own():
    spec = load_sweep("dbl_table4", "budget")
    curves = {name: {"rsum": [(1, 5.0), (2, 6.0)], "loss": [(1, 1.0), (2, 0.5)]} for name in ("x", "y")}
    fig = curves_figure(curves, spec)
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["x", "y"]
    assert not bands(fig.axes[0])  # one trial per row: no band


def test_plot_functions_write_png_and_close_their_figures(tmp_path):
    spec = load_sweep("dbl_table4", "budget")
    table = pivot_table("cooperative.strategy", STRATEGIES, [60.0] * 9, [1.0] * 9)
    assert plot_pivot(table, spec, tmp_path / "pivot.png", chance=(2.0, 6.0)) == tmp_path / "pivot.png"
    assert plot_curves(seeds_of(list("AB"), [2.0, 2.0]), spec, tmp_path / "curves.png") == tmp_path / "curves.png"
    for name in ("pivot.png", "curves.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plt.get_fignums() == []
    assert plot_pivot({"cooperative.strategy": []}, spec, tmp_path / "none.png") is None
    assert plot_curves({"t": {"row": "A", "rsum": [], "loss": []}}, spec, tmp_path / "none.png") is None
    assert not (tmp_path / "none.png").exists()
