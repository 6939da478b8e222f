"""The sweep's plots (PNG, matplotlib), logged on the parent run under ``sweep/plots/``.

* :func:`plot_pivot`: for a one-dimensional sweep over numbers (DBL's γ and α, CODER's ε and K,
  ConVSE's τ), the test metric against the swept value with its 95% interval band over seeds; for
  any other grid, a bar per pivot row with its interval. Published numbers are drawn only where the
  pivot holds them (the trials ran on the paper's data and protocol).
* :func:`plot_curves`: every trial's validation rsum and training loss per epoch.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display, no GUI toolkit
import matplotlib.pyplot as plt  # noqa: E402

from itrlab.config.sweep import SweepSpec  # noqa: E402
from itrlab.report.summary import row_label  # noqa: E402


def _numbers(values: list) -> list[float] | None:
    """``values`` as floats when every one is a number (a swept numeric key), else None."""
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return [float(v) for v in values]
    return None


def plot_pivot(table: dict[str, list], spec: SweepSpec, path: Path, column: str = "test_rsum") -> Path | None:
    """The pivot's ``column`` (mean ± 95% interval) against the rows; None when there is nothing to draw."""
    means = table.get(f"{column}_mean") or []
    if not means:
        return None
    half = [h if isinstance(h, (int, float)) else 0.0 for h in table[f"{column}_ci95"]]
    keys = spec.table.rows
    swept = _numbers(table[keys[0]]) if len(keys) == 1 else None
    published = table.get(f"{column}_paper")
    name = column.removeprefix("test_")
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    if swept is not None:
        order = sorted(range(len(swept)), key=lambda i: swept[i])
        x = [swept[i] for i in order]
        y = [means[i] for i in order]
        band = [half[i] for i in order]
        ax.plot(x, y, marker="o", label="ours (mean over seeds)")
        ax.fill_between(x, [a - b for a, b in zip(y, band)], [a + b for a, b in zip(y, band)], alpha=0.25,
                        label="95% interval")
        if published and any(p is not None for p in published):
            points = [(swept[i], published[i]) for i in order if published[i] is not None]
            ax.plot(*zip(*points), linestyle="none", marker="x", color="black", label="published")
        if len(x) > 2 and min(x) > 0 and max(x) / min(x) >= 20:
            ax.set_xscale("log")
        ax.set_xlabel(keys[0])
    else:
        labels = [row_label(table[k][i] for k in keys) for i in range(len(means))]
        positions = list(range(len(means)))
        ax.bar(positions, means, yerr=half, capsize=4, label="ours (mean over seeds, 95% interval)")
        if published and any(p is not None for p in published):
            points = [(i, p) for i, p in enumerate(published) if p is not None]
            ax.plot(*zip(*points), linestyle="none", marker="x", color="black", label="published")
        ax.set_xticks(positions, labels, rotation=30 if max(map(len, labels)) > 6 else 0, ha="right")
        lows = [m - h for m, h in zip(means, half) if math.isfinite(m)]
        highs = [m + h for m, h in zip(means, half) if math.isfinite(m)]
        if lows:  # room above the tallest interval for the legend
            ax.set_ylim(max(0.0, min(lows) * 0.9), max(highs) + 0.25 * (max(highs) - max(0.0, min(lows) * 0.9)))
    ax.set_ylabel(f"test {name}")
    ax.set_title(f"{spec.name}: test {name} over seeds {spec.seeds}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="upper left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_curves(curves: dict[str, dict[str, list[tuple[int, float]]]], spec: SweepSpec, path: Path) -> Path | None:
    """``curves[trial name][metric]`` = [(epoch, value)]: validation rsum and loss of every trial."""
    if not any(curves.values()):
        return None
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.4, 6.0), dpi=100, sharex=True)
    for name, metrics in sorted(curves.items()):
        for ax, key in ((top, "rsum"), (bottom, "loss")):
            points = metrics.get(key) or []
            if points:
                ax.plot(*zip(*sorted(points)), marker=".", label=name)
    top.set_ylabel("validation rsum")
    bottom.set_ylabel("training loss")
    bottom.set_xlabel("epoch")
    top.set_title(f"{spec.name}: every trial")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
    if len(curves) <= 12:
        top.legend(fontsize="x-small", ncol=2)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
