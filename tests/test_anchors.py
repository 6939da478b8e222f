"""Published anchors (``table.anchors``): results of other methods on the trials' data set, shown as
reference rows under the report only where the trials' data have the anchors' data shape (read from
the files) and test protocol; never rows of the grid, never in the difference to the baseline or the
headline. And the data-shape files' schema, whose region features may be ``any``.

The anchors here are a fixture (a fictional row in a copy of the configs), not published numbers."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import yaml

from conftest import REPO
from itrlab.config.sweep import check_sweep_keys, load_sweep
from itrlab.data.shape import DataShape, ShapeRequirement, data_shape
from itrlab.errors import ConfigError
from itrlab.report.anchors import load_anchors, reference_rows
from itrlab.report.chance import chance_level
from itrlab.report.headline import headline, row_marks
from itrlab.report.paper_report import ReportInputs, build_report
from itrlab.report.pivot import check_published, pivot, published_numbers
from itrlab.report.summary import TrialRow

RECALLS = ("i2t_R1", "i2t_R5", "i2t_R10", "t2i_R1", "t2i_R5", "t2i_R10")
FLICKR8K_GRID = DataShape(6000, 1000, 1000, 5, 49, 1280, synthetic=False)  # EfficientNet-Lite0's 7 x 7 grid
FIXTURE = {
    "source": "a fixture, not a paper",
    "features": "fixture features",
    "model": "fixture model",
    "i2t_R1": 10.0,
    "i2t_R5": 20.0,
    "i2t_R10": 30.0,
    "t2i_R1": 5.0,
    "t2i_R5": 15.0,
    "t2i_R10": 25.0,
    "i2t_medr": 12,
    "t2i_medr": 14,
}


@pytest.fixture
def configs(tmp_path, monkeypatch):
    """A copy of the repository's configs with a fixture anchors file ``f8k_fixture`` on Flickr8K."""
    root = tmp_path / "configs"
    shutil.copytree(REPO / "configs", root)
    (root / "paper" / "anchors").mkdir(exist_ok=True)
    anchors = {
        "dataset": "Flickr8K 1K test",
        "matches": {"dataset": "flickr8k_precomp", "test_protocol": "f8k_1k"},
        "rows": {
            "Fixture anchor": FIXTURE,
            "Half a row": {**{k: FIXTURE[k] for k in ("source", "features", "model", "i2t_R1")}},
        },
    }
    (root / "paper" / "anchors" / "f8k_fixture.yaml").write_text(yaml.safe_dump(anchors))
    monkeypatch.setenv("ITRLAB_CONFIG_DIR", str(root))
    return root


def with_anchors(name: str | None):
    spec = load_sweep("convse_table3").model_copy(update={"seeds": [0, 1, 2]})
    return spec.model_copy(update={"table": spec.table.model_copy(update={"anchors": name})})


def trials(values: dict[str, list[float]]) -> list[TrialRow]:
    return [
        TrialRow(
            f"{label}{seed}",
            {"variant": label, "seed": seed},
            {**{f"test_{k}": rsum / 6 for k in RECALLS}, "test_rsum": rsum, "run_seconds": 60.0},
            "finished",
        )
        for label, rsums in values.items()
        for seed, rsum in enumerate(rsums)
    ]


def report_for(spec, shape: DataShape, protocol: str):
    rows = trials({"VSE": [150.0, 151.0, 152.0], "VSE++": [170.0, 171.0, 172.0]})
    table = pivot(rows, spec, shape, protocol)
    level = chance_level(1000, 5, "all")
    top = headline(table, spec, level)
    published, note = published_numbers(spec, shape, protocol)
    anchors, anchors_note = reference_rows(spec, shape, protocol)
    inputs = ReportInputs(
        top, row_marks(table, spec, level), level, published, note, "cpu_hours", 1, [], [], anchors, anchors_note
    )
    return table, top, build_report(table, spec, inputs)


def test_any_features_admit_every_feature_shape_but_nothing_else_of_the_data():
    from itrlab.report.published import PublishedSource

    required = PublishedSource("f8k", "Flickr8K 1K test", "flickr8k_precomp", "f8k_1k").data_shape()
    assert (required.regions, required.feature_dim) == (None, None)
    assert required.describe() == "6,000 / 1,000 / 1,000 images x 5 captions, any features"
    for regions, dim in ((49, 1280), (9, 1280), (1, 1280), (20, 4096)):
        assert required.differences(DataShape(6000, 1000, 1000, 5, regions, dim, False)) == []
    assert required.differences(DataShape(6000, 1000, 1000, 5, 49, 1280, True)) == ["synthetic True vs False"]
    assert required.differences(DataShape(6091, 1000, 1000, 5, 1, 8, False)) == ["train images 6091 vs 6000"]
    # the papers' own tables still require their features exactly
    scan = PublishedSource("t", "Flickr30K 1K test", "f30k_precomp", "f30k_1k").data_shape()
    assert scan.differences(DataShape(29000, 1014, 1000, 5, 49, 1280, False)) == [
        "regions 49 vs 36",
        "feature dim 1280 vs 2048",
    ]


@pytest.mark.parametrize(
    "change, fragment",
    [
        ({"regions": "all"}, "'x.yaml: regions': got 'all'; a positive integer or 'any'"),
        ({"train_images": "any"}, "'x.yaml: train_images': got 'any'; a positive integer"),
        ({"feature_dim": 0}, "'x.yaml: feature_dim': got 0"),
        ({"synthetic": "no"}, "'x.yaml: synthetic': got 'no'; true or false"),
        ({"captions_per_image": None}, "'x.yaml: captions_per_image'"),
        ({"region": 36}, "'x.yaml: region': got 36; a data shape has the keys"),
    ],
)
def test_a_data_shape_file_is_validated(change, fragment):
    data = {
        "train_images": 6000,
        "val_images": 1000,
        "test_images": 1000,
        "captions_per_image": 5,
        "regions": "any",
        "feature_dim": 1280,
        "synthetic": False,
        **change,
    }
    data = {k: v for k, v in data.items() if v is not None}
    with pytest.raises(ConfigError) as err:
        ShapeRequirement.from_dict(data, "x.yaml")
    assert fragment in str(err.value)


def test_a_data_shape_file_may_describe_itself_and_leave_one_feature_field_open():
    required = ShapeRequirement.from_dict(
        {
            "description": "words",
            "train_images": 1,
            "val_images": 1,
            "test_images": 1,
            "captions_per_image": 1,
            "regions": 1,
            "feature_dim": "any",
            "synthetic": True,
        },
        "x.yaml",
    )
    assert (required.regions, required.feature_dim) == (1, None)
    assert required.describe() == "1 / 1 / 1 images x 1 captions, 1 x any features, synthetic"
    assert required.differences(DataShape(1, 1, 1, 1, 1, 4096, True)) == []


def fake_precomp(root, sizes: tuple[int, int, int], regions: int, dim: int) -> None:
    """A precomp folder of the given split sizes: float16 zeros (written through a memory map) and 5
    one-word captions per image; only the headers and line counts are ever read here."""
    root.mkdir(parents=True)
    for split, n in zip(("train", "dev", "test"), sizes):
        np.lib.format.open_memmap(
            root / f"{split}_ims.npy", mode="w+", dtype=np.float16, shape=(n, regions, dim)
        ).flush()
        (root / f"{split}_caps.txt").write_text("a\n" * (5 * n))


def test_a_flickr8k_folder_read_from_its_files_fits_the_anchors_whatever_its_features(tmp_path):
    from itrlab.data.synthetic import MANIFEST
    from itrlab.report.published import PublishedSource

    source = PublishedSource("f8k", "Flickr8K 1K test", "flickr8k_precomp", "f8k_1k")
    for regions, dim in ((1, 8), (3, 4)):
        root = tmp_path / f"f8k_{regions}x{dim}"
        fake_precomp(root, (6000, 1000, 1000), regions, dim)
        shape = data_shape(root, ("train", "dev", "test"), 5)
        assert shape == DataShape(6000, 1000, 1000, 5, regions, dim, synthetic=False)
        assert source.comparable(shape, "f8k_1k") is None
    (tmp_path / "f8k_1x8" / MANIFEST).write_text("{}")  # a generated set of Flickr8K's sizes is still synthetic
    assert "synthetic True vs False" in source.comparable(
        data_shape(tmp_path / "f8k_1x8", ("train", "dev", "test"), 5), "f8k_1k"
    )


def test_anchors_are_reference_rows_under_the_table_on_flickr8k_only(configs):
    spec = with_anchors("f8k_fixture")
    plain_table, plain_top, plain = report_for(with_anchors(None), FLICKR8K_GRID, "f8k_1k")
    table, top, report = report_for(spec, FLICKR8K_GRID, "f8k_1k")
    assert table == plain_table and top.text == plain_top.text  # the pivot and the headline never see them
    assert report.row_kinds == ["result", "baseline", "chance", "reference", "reference"]  # below everything of ours
    anchor, half = (dict(zip(report.header, row)) for row in report.rows[-2:])
    assert list(anchor.values())[:8] == [
        "Fixture anchor (published)",
        "105.0",
        "10.0",
        "20.0",
        "30.0",
        "5.0",
        "15.0",
        "25.0",
    ]  # rsum first, as for every row
    assert anchor["MD"] == "-" and anchor["rsum vs VSE++"] == anchor["wall / trial"] == anchor["CPU-h"] == ""
    assert anchor["note"] == "published, other features: fixture features; fixture model; a fixture, not a paper"
    assert list(half.values())[1:8] == ["-", "10.0", "-", "-", "-", "-", "-"]  # no rsum without the six recalls
    assert any(n.startswith("Published anchors (f8k_fixture, Flickr8K 1K test): other methods") for n in report.notes)
    markdown, page = report.markdown(), report.html()
    assert "| *Fixture anchor (published)* | *105.0* | *10.0* |" in markdown and '<tr class="reference">' in page
    assert report.rows[:3] == plain.rows[:3]


@pytest.mark.parametrize(
    "shape, protocol, reason",
    [
        (DataShape(6000, 1000, 1000, 5, 49, 1280, synthetic=True), "f8k_1k", "synthetic True vs False"),
        (DataShape(200, 50, 50, 5, 6, 32, synthetic=True), "all", "train images 200 vs 6000"),
        (FLICKR8K_GRID, "all", "the trials used test protocol all"),
        (DataShape(29000, 1014, 1000, 5, 36, 2048, synthetic=False), "f30k_1k", "train images 29000 vs 6000"),
        (None, "f8k_1k", "the trials' data shape is unknown"),
    ],
    ids=["synthetic-flickr8k-sizes", "synthetic", "other-protocol", "flickr30k", "unreadable"],
)
def test_anchors_are_left_out_elsewhere_and_the_report_says_why(configs, shape, protocol, reason):
    table, top, report = report_for(with_anchors("f8k_fixture"), shape, protocol)
    assert "reference" not in report.row_kinds and not any("Fixture" in row[0] for row in report.rows)
    (note,) = [n for n in report.notes if n.startswith("Published anchors (f8k_fixture) left out, not comparable")]
    assert reason in note


def test_a_sweep_without_anchors_says_nothing_of_them():
    anchors, note = reference_rows(with_anchors(None), FLICKR8K_GRID, "f8k_1k")
    assert anchors == [] and note == ""


def test_an_anchors_name_that_names_no_file_is_a_config_error(configs):
    with pytest.raises(ConfigError) as err:
        check_sweep_keys(with_anchors("f8k_fixtur"), prefix="sweep.yaml: ")
    assert err.value.field == "sweep.yaml: table.anchors" and "did you mean 'f8k_fixture'" in str(err.value)
    check_sweep_keys(with_anchors("f8k_fixture"))


@pytest.mark.parametrize(
    "row, fragment",
    [
        ({k: v for k, v in FIXTURE.items() if k != "source"}, "rows.Bad.source': got None; a non-empty line"),
        ({**FIXTURE, "features": " "}, "rows.Bad.features'"),
        ({**FIXTURE, "i2t_R1": 140.0}, "rows.Bad.i2t_R1': got 140.0; a recall in percent, 0 to 100"),
        ({**FIXTURE, "t2i_medr": 0}, "rows.Bad.t2i_medr': got 0; a median rank"),
        ({**FIXTURE, "rsum": 105.0}, "rows.Bad.rsum': got 105.0; a row's keys are"),
        ({k: FIXTURE[k] for k in ("source", "features", "model")}, "at least one of i2t_R1"),
    ],
    ids=["no-source", "blank-features", "recall-over-100", "rank-0", "typed-rsum", "no-numbers"],
)
def test_a_malformed_anchor_row_is_refused_before_training(configs, row, fragment):
    path = configs / "paper" / "anchors" / "f8k_fixture.yaml"
    data = yaml.safe_load(path.read_text())
    data["rows"] = {"Bad": row}
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as err:
        check_published(with_anchors("f8k_fixture"))  # what the sweep runner checks before Ray starts
    assert fragment in str(err.value)


def test_a_malformed_data_shape_file_is_refused_before_training(configs):
    assert load_anchors("f8k_fixture").rows[0].numbers["rsum"] == pytest.approx(105.0)
    check_published(with_anchors("f8k_fixture"))
    path = configs / "paper" / "data" / "flickr8k_precomp.yaml"
    path.write_text(path.read_text().replace("regions: any", "regions: every"))
    with pytest.raises(ConfigError, match="flickr8k_precomp.yaml: regions"):
        check_published(with_anchors("f8k_fixture"))


def test_every_shipped_anchors_file_reads_with_its_data_and_protocol():
    """A shipped anchors file validates (sources, features, models, numbers), names a data-shape file and
    a known protocol; whichever sweep names it, check_published passes before Ray."""
    from itrlab.config.sweep import published_files
    from itrlab.eval import PROTOCOLS

    for name in published_files("anchors"):
        anchors = load_anchors(name)
        assert anchors.rows and anchors.test_protocol in PROTOCOLS, name
        required = anchors.data_shape()
        assert not required.synthetic, name
        PROTOCOLS[anchors.test_protocol].folds(required.test_images)
