"""A sweep's rows with seeds of their own (``{name: A, seeds: [0, 1, 2, 3]}``; docs/sweeps.md#a-rows-own-seeds): the
trials they make, Tune's space of them, what is refused, the pairs they compare, and the report's seed counts."""

from __future__ import annotations

import re

import pytest
import yaml

from itrlab.config.sweep import SweepSpec, check_table_rows, load_sweep, seeds_by_row, seeds_text, shared_seeds
from itrlab.errors import ConfigError
from itrlab.sweep.points import POINT, point_key, trial_point

ROWS = [
    {"name": "A", "cooperative.strategy": "A", "seeds": [0, 1, 2, 3]},
    {"name": "F", "cooperative.strategy": "F"},
    {"name": "G", "cooperative.strategy": "G", "seeds": [0, 1, 2, 3]},
]


def spec_of(rows=ROWS, seeds=(0, 1, 2), **table) -> SweepSpec:
    return SweepSpec.model_validate(
        {
            "name": "row_seeds",
            "experiment": "dbl_synthetic_tiny",
            "grid": {"variant": rows},
            "seeds": list(seeds),
            "table": {"rows": ["variant"], **table},
        }
    )


def test_a_row_runs_its_own_seeds_and_its_points_hold_it_without_them():
    spec = spec_of()
    points = spec.grid_points()
    assert [(p["variant"]["name"], p["seed"]) for p in points] == [
        *(("A", s) for s in range(4)),
        *(("F", s) for s in range(3)),
        *(("G", s) for s in range(4)),
    ]
    assert points[0]["variant"] == {"name": "A", "cooperative.strategy": "A"}  # what the trial sets, no seeds
    assert spec.row_seeds and spec.trial_count == 11
    assert seeds_by_row(spec) == {"A": [0, 1, 2, 3], "F": [0, 1, 2], "G": [0, 1, 2, 3]}
    assert shared_seeds(spec, "A", "G") == 4 and shared_seeds(spec, "A", "F") == 3
    assert seeds_text(spec) == "[0, 1, 2]; A, G: [0, 1, 2, 3]"
    plain = spec_of([{k: v for k, v in row.items() if k != "seeds"} for row in ROWS])
    assert not plain.row_seeds and plain.trial_count == 9 and seeds_text(plain) == "[0, 1, 2]"


def test_a_named_row_of_any_axis_may_carry_seeds():
    spec = SweepSpec.model_validate(
        {
            "name": "axis",
            "experiment": "dbl_synthetic_tiny",
            "grid": {"cooperative.strategy": ["A", {"name": "F", "seeds": [0, 1]}]},
            "seeds": [0],
        }
    )
    assert [(p["cooperative.strategy"], p["seed"]) for p in spec.grid_points()] == [
        ("A", 0),
        ({"name": "F"}, 0),
        ({"name": "F"}, 1),
    ]


@pytest.mark.parametrize(
    ("grid", "says"),
    [
        ({"variant": [{"name": "A", "seeds": []}]}, "row 'A': seeds [] must be a non-empty list of integers"),
        ({"variant": [{"name": "A", "seeds": "0, 1"}]}, "row 'A': seeds '0, 1' must be a non-empty list"),
        ({"variant": [{"name": "A", "seeds": [0, True]}]}, "must be a non-empty list of integers"),
        ({"variant": [{"name": "A", "seeds": [0, 1, 0]}]}, "row 'A': seeds [0, 1, 0] repeat a seed"),
        ({"cooperative.strategy": [{"seeds": [0, 1]}]}, "a value with its own seeds needs a name"),
        (
            {"variant": [{"name": "A", "seeds": [0, 1]}], "loss.margin": [{"name": "m", "seeds": [0, 1]}]},
            "rows of grid keys variant, loss.margin give their own seeds: one grid key at most may",
        ),
    ],
)
def test_bad_row_seeds_are_one_line_naming_the_row(tmp_path, grid, says):
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"name": "bad", "experiment": "dbl_synthetic_tiny", "grid": grid}, sort_keys=False))
    with pytest.raises(ConfigError, match=re.escape(says)) as caught:
        load_sweep(path)
    assert "\n" not in str(caught.value)


def test_rows_compared_must_share_two_seeds():
    lonely = [{"name": "A", "cooperative.strategy": "A"}, {"name": "F", "cooperative.strategy": "F", "seeds": [2, 3]}]
    with pytest.raises(ConfigError, match=re.escape("row 'F' shares 1")):
        check_table_rows(spec_of(lonely))  # the baseline, A, is compared with every row
    rows = [*ROWS, {"name": "H", "cooperative.strategy": "H", "seeds": [0, 1, 2, 5, 6]}]
    check_table_rows(spec_of(rows, compare=[["H", "A"]]))  # 0, 1, 2 in common
    shifted = [*rows[:3], {**rows[3], "seeds": [2, 3, 5, 6]}]  # two in common with the baseline, one with F
    check_table_rows(spec_of(shifted))
    with pytest.raises(ConfigError, match=re.escape("table.compare[0]': got ['H', 'F']")):
        check_table_rows(spec_of(shifted, compare=[["H", "F"]]))


def test_tunes_space_holds_each_grid_point_once_and_each_trial_gets_its_point():
    """Where rows run their own seeds Tune's grid is the points themselves (no product of rows and seeds); the
    trial takes its point apart again, as the driver listed it; a sweep without them keeps Tune's product."""
    from ray.tune.search.variant_generator import generate_variants

    from itrlab.sweep.runner import param_space

    spec = spec_of()
    variants = [trial_point(params) for _, params in generate_variants(param_space(spec))]
    assert sorted(map(point_key, variants)) == sorted(map(point_key, spec.grid_points()))
    assert set(param_space(spec)) == {POINT}
    plain = spec_of([{k: v for k, v in row.items() if k != "seeds"} for row in ROWS])
    assert set(param_space(plain)) == {"variant", "seed"}
    assert trial_point({"variant": "A", "seed": 0}) == {"variant": "A", "seed": 0}


def test_the_checked_configs_are_those_of_the_rows_points(tmp_path, monkeypatch):
    from itrlab.sweep.runner import base_tree, check_trials

    monkeypatch.chdir(tmp_path)
    spec = spec_of()
    checked = check_trials(spec, base_tree(spec, []))
    assert set(checked) == {point_key(p) for p in spec.grid_points()}
    seeds = sorted((c.method.name, c.cooperative.strategy if c.cooperative else None, c.seed) for c in checked.values())
    assert [s for s in seeds if s[1] == "F"] == [("vsepp", "F", k) for k in range(3)]


def test_the_report_counts_each_rows_own_seeds():
    """A row of 4 seeds beside rows of 3 is complete with 4 and says nothing of its count; with 3 of its 4 it is
    marked, and the paired column against it pairs the 3 seeds the rows share."""
    from itrlab.report.chance import chance_level
    from itrlab.report.headline import headline, row_marks
    from itrlab.report.paper_report import ReportInputs, build_report
    from itrlab.report.pivot import pivot
    from itrlab.report.summary import TrialRow
    from test_report import RECALLS, SYNTHETIC

    def rows(values):
        out = []
        for label, rsums in values.items():
            for seed, rsum in enumerate(rsums):
                metrics = {f"test_{k}": rsum / 6 for k in RECALLS} | {"test_rsum": rsum, "run_seconds": 60.0}
                out.append(TrialRow(f"{label}{seed}", {"variant": label, "seed": seed}, metrics, "finished"))
        return out

    spec, level = spec_of(), chance_level(50, 5, "all")
    for a_seeds, marked in ((4, False), (3, True)):
        values = {"A": [150.0, 152.0, 151.0, 153.0][:a_seeds], "F": [160.0, 161.0, 163.0], "G": [150, 151, 149, 152]}
        table = pivot(rows(values), spec, SYNTHETIC, "all")
        marks = row_marks(table, spec, level)
        assert marks.incomplete == [marked, False, False]
        report = build_report(
            table, spec, ReportInputs(headline(table, spec, level), marks, level, None, "", "cpu_hours", 1, [])
        )
        a_row, f_row, g_row = report.rows[:3]
        assert ("(3 seeds)" in a_row[1]) == marked and (a_row[-1] == "3 of 4 seeds") == marked
        assert "seeds)" not in f_row[1] and "seeds)" not in g_row[1]  # each row complete with its own count
        paired = report.header.index("rsum vs A, paired")
        assert "seeds)" not in f_row[paired]  # F and A share 3 seeds, all paired
        assert report.title.endswith("over seeds [0, 1, 2]; A, G: [0, 1, 2, 3]")


def test_ascl_table2_on_flickr8k_gives_the_compared_rows_six_seeds_and_its_own_pairs():
    spec = load_sweep("ascl_table2", "flickr8k")
    six = ["AsCL", "w/o Neg", "w/o P&N", "AsCL (input noise)"]
    assert {row: len(seeds) for row, seeds in seeds_by_row(spec).items() if len(seeds) == 6} == dict.fromkeys(six, 6)
    assert spec.trial_count == 4 * 6 + 3 * 3
    assert spec.table.compare == [("AsCL (input noise)", "w/o Neg"), ("AsCL (input noise)", "AsCL")]
    check_table_rows(spec)
    for profile in ("budget", "paper"):  # the miniature and the paper's recipe keep their six rows, 3 seeds each
        other = load_sweep("ascl_table2", profile)
        assert not other.row_seeds and other.trial_count == 18 and other.table.compare == []
