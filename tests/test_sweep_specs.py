"""Every shipped sweep validates (each grid point's config, or the corners of its search space)."""

from __future__ import annotations

import re

import pytest

from itrlab.cli import PRESETS
from itrlab.config import config_dir
from itrlab.sweep.runner import base_tree, check_trials
from itrlab.config.sweep import check_table_rows, load_sweep

SWEEPS = sorted(p.stem for p in (config_dir() / "sweeps").glob("*.yaml"))


@pytest.mark.parametrize("name", SWEEPS)
def test_shipped_sweep_validates(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = load_sweep(name)
    check_table_rows(spec)  # table.rows and table.baseline name the pivot's keys and a row's label
    check_trials(spec, base_tree(spec, []))
    if spec.table is not None and spec.table.paper:
        from itrlab.report.pivot import load_paper

        assert load_paper(spec.table.paper)


def test_presets_name_shipped_sweeps():
    from itrlab.cli import sweep_presets

    assert set(PRESETS.values()) <= set(SWEEPS)
    assert {"smoke", "table4", "table2", "fig4-gamma", "fig4-alpha", "optuna"} <= set(PRESETS)
    # jobs/sweep.py: every sweep file is a preset, by its name with dashes
    assert {name.replace("_", "-") for name in SWEEPS} <= set(sweep_presets())


def test_grid_points_cover_every_combination_times_seeds():
    spec = load_sweep("dbl_table4")
    points = spec.grid_points()
    assert len(points) == 9 * 3
    assert {(p["cooperative.strategy"], p["seed"]) for p in points} == {(s, k) for s in "ABCDEFGHI" for k in (0, 1, 2)}


@pytest.mark.parametrize("compare, says", [
    ([["ConVSE++", "ConVSE+"]], "table.compare[0]': got 'ConVSE+'; the label of a row of the pivot"),
    ([["ConVSE", "ConVSE"]], "table.compare[0]': got ['ConVSE', 'ConVSE']; two different rows"),
])
def test_a_comparison_names_two_rows_of_the_pivot(compare, says):
    from itrlab.errors import ConfigError

    spec = load_sweep("convse_table3")
    spec = spec.model_copy(update={"table": spec.table.model_copy(update={"compare": compare})})
    with pytest.raises(ConfigError, match=re.escape(says)):
        check_table_rows(spec)
