"""Every shipped sweep validates (each grid point's config, or the corners of its search space)."""

from __future__ import annotations

import pytest

from itrlab.cli import PRESETS
from itrlab.config import config_dir
from itrlab.sweep.runner import base_tree, check_trials
from itrlab.sweep.spec import load_sweep

SWEEPS = sorted(p.stem for p in (config_dir() / "sweeps").glob("*.yaml"))


@pytest.mark.parametrize("name", SWEEPS)
def test_shipped_sweep_validates(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = load_sweep(name)
    check_trials(spec, base_tree(spec, []))
    if spec.table is not None and spec.table.paper:
        from itrlab.sweep.summary import load_paper

        assert load_paper(spec.table.paper)


def test_presets_name_shipped_sweeps():
    assert set(PRESETS.values()) <= set(SWEEPS)
    assert {"smoke", "table4", "table2", "fig4-gamma", "fig4-alpha", "optuna"} <= set(PRESETS)


def test_grid_points_cover_every_combination_times_seeds():
    spec = load_sweep("dbl_table4")
    points = spec.grid_points()
    assert len(points) == 9 * 3
    assert {(p["cooperative.strategy"], p["seed"]) for p in points} == {(s, k) for s in "ABCDEFGHI" for k in (0, 1, 2)}


def test_pivot_averages_seeds_and_sets_the_published_numbers_beside():
    from itrlab.sweep.summary import TrialRow, compact_pivot, pivot, to_text

    spec = load_sweep("dbl_table4")
    rows = [TrialRow(f"t{i}", {"cooperative.strategy": s, "seed": k},
                     {"test_i2t_R1": r1, "test_md": md, "test_rsum": 300.0}, status)
            for i, (s, k, r1, md, status) in enumerate([("A", 0, 70.0, 0.5, "finished"), ("A", 1, 74.0, 0.7, "finished"),
                                                       ("F", 0, 80.0, 1.2345, "finished"), ("F", 1, 0.0, 9.0, "diverged")])]
    table = pivot(rows, spec)
    assert table["cooperative.strategy"] == ["A", "F"] and table["seeds"] == [2, 1]  # the diverged trial is left out
    assert table["test_i2t_R1_mean"] == [72.0, 80.0]
    assert table["test_i2t_R1_std"][0] == pytest.approx(2.8284271, rel=1e-6) and table["test_i2t_R1_std"][1] == 0.0
    assert table["test_i2t_R1_paper"] == [75.8, 79.3] and table["test_i2t_R1_diff"][0] == pytest.approx(-3.8)
    compact = compact_pivot(table, spec)
    assert compact["i2t_R1"] == ["72.00 ± 2.83 (75.80)", "80.00 ± 0.00 (79.30)"]
    assert compact["md"] == ["0.600 ± 0.141 (0.910)", "1.234 ± 0.000 (1.210)"]  # MD keeps 3 decimals
    assert compact["rsum"] == ["300.00 ± 0.00", "300.00 ± 0.00"]  # no published rsum in Table IV
    assert "80.00 ± 0.00 (79.30)" in to_text(compact, "title")
