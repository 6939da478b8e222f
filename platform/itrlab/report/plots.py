"""The sweep's plots (PNG, matplotlib, Agg backend), logged on the parent run under ``sweep/plots/``.

* :func:`plot_pivot`: a one-dimensional sweep over numbers as the test metric against the swept value (a log
  axis when the values span 20x or more, the 95% interval as a band), any other grid as bars with error bars;
  chance shaded grey where known (:attr:`itrlab.report.chance.ChanceLevel.rsum_band`); published numbers only
  where the pivot holds them.
* :func:`plot_curves`: validation rsum and training loss per epoch, one colour per row (the mean over seeds, a
  min-max band), each metric its own panel; when the rows' first-epoch losses differ 3x or more (VSE's summed
  hinges start near 300, an InfoNCE near 4) each loss is drawn relative to its first epoch.
* :func:`plot_parallel`: the configurations of a search or numeric grid in parallel coordinates, an axis per
  parameter and a last one for the objective's mean, coloured by it, the best drawn last and thickest; a
  parameter a configuration does not set breaks its line.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display, no GUI toolkit
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from itrlab.config.sweep import SweepSpec, pivot_labels, row_label, seeds_text  # noqa: E402

LOG_SPAN = 20  # swept values spanning this factor or more get a log axis
LOSS_SPAN = 3  # rows whose first-epoch losses differ this factor or more are drawn relative to it
MAX_VALUE_TICKS = 12  # a linear swept axis gets a tick per value up to this many values
LEGEND_COLUMNS = 5  # the curves' legend (below the panels) has at most this many columns


def _numbers(values: list) -> list[float] | None:
    """``values`` as floats when every one is a number (a swept numeric key), else None."""
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return [float(v) for v in values]
    return None


def _finite(value) -> float | None:
    """``value`` when it is a finite number, else None (a one-seed row's interval, a row with no value)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _save(fig: Figure | None, path: Path) -> Path | None:
    if fig is None:
        return None
    fig.savefig(path, bbox_inches="tight")  # "tight": legends outside the axes stay in the file
    plt.close(fig)
    return path


def pivot_figure(
    table: dict[str, list], spec: SweepSpec, column: str = "test_rsum", chance: tuple[float, float] | None = None
) -> Figure | None:
    """The pivot's ``column`` against its rows (see the module doc); None when there is nothing to draw."""
    means = [_finite(m) for m in table.get(f"{column}_mean") or []]
    if not any(m is not None for m in means):
        return None
    halves = [_finite(h) for h in table.get(f"{column}_ci95") or [None] * len(means)]
    published = table.get(f"{column}_paper") or [None] * len(means)
    keys = spec.table.rows
    swept = _numbers(table[keys[0]]) if len(keys) == 1 else None
    ours = "ours (mean over seeds)" if any(h is not None for h in halves) else "ours (1 seed)"
    name = column.removeprefix("test_")
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    if swept is not None:
        positions = swept
        _draw_swept_line(ax, swept, means, halves, ours)
        ax.set_xlabel(keys[0])
    else:
        positions = list(range(len(means)))
        labels = [row_label(table[key][i] for key in keys) for i in positions]
        _draw_bars(ax, labels, means, halves, ours)
        ax.set_xlabel(" / ".join(keys))
    points = [(x, p) for x, p in zip(positions, published) if _finite(p) is not None]
    if points:
        ax.plot(*zip(*points), linestyle="none", marker="x", color="black", label="published")
    if chance is not None:  # drawn under the bars and lines
        ax.axhspan(
            *chance,
            color="grey",
            alpha=0.25,
            linewidth=0,
            zorder=0,
            label=f"chance: random scores' 95% range ({chance[0]:.1f}-{chance[1]:.1f})",
        )
    ax.set_ylabel(f"test {name}")
    ax.set_title(f"{spec.name}: test {name}, seeds {seeds_text(spec)}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the axes
    return fig


def _draw_swept_line(ax, swept: list[float], means: list, halves: list, ours: str) -> None:
    order = [i for i in sorted(range(len(swept)), key=lambda i: swept[i]) if means[i] is not None]
    x = [swept[i] for i in order]
    y = [means[i] for i in order]
    ax.plot(x, y, marker="o", label=ours)
    has = [halves[i] is not None for i in order]
    if any(has):
        half = [halves[i] or 0.0 for i in order]
        ax.fill_between(
            x,
            [m - h for m, h in zip(y, half)],
            [m + h for m, h in zip(y, half)],
            where=has,
            alpha=0.25,
            linewidth=0,
            label="95% interval",
        )
        with_interval = [i for i, h in enumerate(has) if h]  # a lone row with an interval shows it too
        ax.errorbar(
            [x[i] for i in with_interval],
            [y[i] for i in with_interval],
            yerr=[half[i] for i in with_interval],
            fmt="none",
            capsize=3,
            color="C0",
            alpha=0.6,
        )
    if len(x) > 2 and min(x) > 0 and max(x) / min(x) >= LOG_SPAN:
        ax.set_xscale("log")
    if ax.get_xscale() == "log" or len(x) <= MAX_VALUE_TICKS:
        ax.set_xticks(x, [f"{v:g}" for v in x])
        ax.minorticks_off()


def _draw_bars(ax, labels: list[str], means: list, halves: list, ours: str) -> None:
    positions = list(range(len(means)))
    heights = [m if m is not None else 0.0 for m in means]
    ax.bar(positions, heights, label=ours)
    with_interval = [i for i in positions if halves[i] is not None and means[i] is not None]
    if with_interval:
        ax.errorbar(
            with_interval,
            [means[i] for i in with_interval],
            yerr=[halves[i] for i in with_interval],
            fmt="none",
            capsize=4,
            color="black",
            label="95% interval",
        )
        for i in positions:  # in a mixed table, say which bars are a single seed
            if halves[i] is None and means[i] is not None:
                ax.annotate("1 seed", (i, means[i]), ha="center", va="bottom", fontsize="x-small")
    ax.set_xticks(
        positions,
        labels,
        rotation=30 if max(map(len, labels)) > 6 else 0,
        ha="right" if max(map(len, labels)) > 6 else "center",
    )
    ax.set_ylim(bottom=min(0.0, *heights))  # bars from 0: their heights compare as the numbers do


def plot_pivot(
    table: dict[str, list],
    spec: SweepSpec,
    path: Path,
    column: str = "test_rsum",
    chance: tuple[float, float] | None = None,
) -> Path | None:
    """:func:`pivot_figure` written to ``path`` (PNG); None when there is nothing to draw."""
    return _save(pivot_figure(table, spec, column, chance), path)


def _row_order(rows: set[str], spec: SweepSpec) -> list[str]:
    """``rows`` in the order of the sweep's grid (the pivot's), any others after them by name."""
    grid = pivot_labels(spec)
    return [row for row in grid if row in rows] + sorted(rows - set(grid))


def _row_colours(count: int) -> list:
    """``count`` distinct colours: tab10, tab20, then evenly spaced over a wide colormap (turbo)."""
    if count <= 10:
        return [matplotlib.colormaps["tab10"](i) for i in range(count)]
    if count <= 20:  # tab20's dark shades first, then their light pairs
        return [matplotlib.colormaps["tab20"](i) for i in [*range(0, 20, 2), *range(1, 20, 2)][:count]]
    return [matplotlib.colormaps["turbo"](i / (count - 1)) for i in range(count)]


def _over_seeds(series: list[list[tuple[int, float]]]) -> tuple[list, list, list, list]:
    """Epochs, and at each the mean, minimum and maximum of the seeds that reached it."""
    at: dict[int, list[float]] = {}
    for points in series:
        for epoch, value in points:
            if _finite(value) is not None:
                at.setdefault(epoch, []).append(value)
    epochs = sorted(at)
    return (
        epochs,
        [statistics.fmean(at[e]) for e in epochs],
        [min(at[e]) for e in epochs],
        [max(at[e]) for e in epochs],
    )


def _relative_losses(rows: list[str], by_row: dict[str, dict[str, list]]) -> bool:
    """Whether the rows' losses are drawn relative to their first epoch: when the rows' first-epoch mean
    losses (all positive) differ :data:`LOSS_SPAN` x or more."""
    firsts = [mean[0] for mean in (_over_seeds(by_row[row]["loss"])[1] for row in rows) if mean]
    return len(firsts) > 1 and min(firsts) > 0 and max(firsts) / min(firsts) >= LOSS_SPAN


def curves_figure(curves: dict[str, dict], spec: SweepSpec) -> Figure | None:
    """``curves[trial name]`` = ``{"row": pivot row label, "rsum": [(epoch, value)], "loss": [...]}``: the
    rows' validation rsum and training loss per epoch (see the module doc); None when there is nothing."""
    by_row: dict[str, dict[str, list]] = {}
    for name, trial in curves.items():
        row = str(trial.get("row") or name)  # a trial outside the pivot is a row of its own
        for metric in ("rsum", "loss"):
            if trial.get(metric):
                by_row.setdefault(row, {"rsum": [], "loss": []})[metric].append(trial[metric])
    if not by_row:
        return None
    rows = _row_order(set(by_row), spec)
    ncol = min(len(rows), LEGEND_COLUMNS)
    fig, (top, bottom) = plt.subplots(
        2, 1, sharex=True, dpi=100, layout="constrained", figsize=(7.0, 6.0 + 0.25 * math.ceil(len(rows) / ncol))
    )
    relative = _relative_losses(rows, by_row)
    handles = []
    for row, colour in zip(rows, _row_colours(len(rows))):
        for ax, metric in ((top, "rsum"), (bottom, "loss")):
            epochs, mean, low, high = _over_seeds(by_row[row][metric])
            if not epochs:
                continue
            if metric == "loss" and relative:  # every first loss is positive (_relative_losses)
                mean, low, high = ([v / mean[0] for v in values] for values in (mean, low, high))
            ax.plot(epochs, mean, color=colour, marker=".")
            if len(by_row[row][metric]) > 1:
                ax.fill_between(epochs, low, high, color=colour, alpha=0.2, linewidth=0)
        handles.append(Line2D([], [], color=colour, marker=".", label=row))
    top.set_ylabel("validation rsum")
    bottom.set_ylabel("training loss / its first epoch's" if relative else "training loss")
    bottom.set_xlabel("epoch")
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))  # epochs are whole numbers
    top.set_title(f"{spec.name}: mean over each row's seeds; band: range over seeds")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    title = " / ".join(spec.table.rows) if spec.table is not None else "trial"
    fig.legend(handles=handles, title=title, loc="outside lower center", ncol=ncol, fontsize="small")
    return fig


def plot_curves(curves: dict[str, dict], spec: SweepSpec, path: Path) -> Path | None:
    """:func:`curves_figure` written to ``path`` (PNG); None when there is nothing to draw."""
    return _save(curves_figure(curves, spec), path)


def _position(value, distribution) -> float:
    """Where ``value`` sits on its axis, 0 to 1: a choice by its place in the choices, a number in the range
    (its log where the distribution is log-scaled); NaN for a value the configuration does not have."""
    if value is None:
        return math.nan
    choices = getattr(distribution, "choices", None)
    if choices is not None:
        return choices.index(value) / (len(choices) - 1) if len(choices) > 1 else 0.5
    low, high = float(distribution.low), float(distribution.high)
    if getattr(distribution, "log", False):
        value, low, high = math.log10(value), math.log10(low), math.log10(high)
    return (float(value) - low) / (high - low) if high > low else 0.5


def _axis_labels(distribution) -> list[tuple[float, str]]:
    """The labels of an axis: each choice at its place, or the range's ends."""
    choices = getattr(distribution, "choices", None)
    if choices is not None:
        return [(_position(choice, distribution), str(choice)) for choice in choices]
    return [(0.0, f"{distribution.low:.3g}"), (1.0, f"{distribution.high:.3g}")]


def parallel_figure(
    configurations: list[tuple[dict, float]], space: dict, objective: str, mode: str = "max"
) -> Figure | None:
    """``configurations`` (params, mean objective) in parallel coordinates over ``space`` (a key's distribution:
    ``choices``, or ``low``, ``high`` and ``log``); None with fewer than two configurations."""
    means = [mean for _, mean in configurations if _finite(mean) is not None]
    if len(means) < 2 or not space:
        return None
    keys = list(space)
    low, high = min(means), max(means)
    fig, ax = plt.subplots(figsize=(7.2, 4.0), dpi=100)
    cmap = plt.get_cmap("viridis")
    better = (lambda m: (m - low) / (high - low)) if high > low else (lambda m: 0.5)
    score = better if mode == "max" else (lambda m: 1.0 - better(m))
    ranked = sorted((c for c in configurations if _finite(c[1]) is not None), key=lambda c: score(c[1]))
    xs = list(range(len(keys) + 1))
    for i, (params, mean) in enumerate(ranked):
        ys = [_position(params.get(key), space[key]) for key in keys] + [
            (mean - low) / (high - low) if high > low else 0.5
        ]
        best = i == len(ranked) - 1
        ax.plot(xs, ys, color=cmap(score(mean)), linewidth=2.6 if best else 1.2, alpha=1.0 if best else 0.75)
    for x, key in enumerate(keys):
        ax.axvline(x, color="#444", linewidth=0.8)
        for y, text in _axis_labels(space[key]):
            ax.annotate(text, (x, y), xytext=(4, 0), textcoords="offset points", fontsize=8, va="center")
    ax.axvline(len(keys), color="#444", linewidth=0.8)
    for y, value in ((0.0, low), (1.0, high)):
        ax.annotate(f"{value:.1f}", (len(keys), y), xytext=(4, 0), textcoords="offset points", fontsize=8, va="center")
    ax.set_xticks(xs, [*keys, f"mean {objective}"], rotation=15, ha="right", fontsize=8)
    ax.set_yticks([])
    ax.set_xlim(-0.2, len(keys) + 0.5)
    ax.set_ylim(-0.05, 1.05)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.set_title(f"{len(ranked)} configurations, mean {objective} over seeds (best: thickest)", fontsize=10)
    return fig


def plot_parallel(
    configurations: list[tuple[dict, float]], space: dict, objective: str, path: Path, mode: str = "max"
) -> Path | None:
    """:func:`parallel_figure` saved as ``path`` (None when there is nothing to draw)."""
    return _save(parallel_figure(configurations, space, objective, mode), path)
