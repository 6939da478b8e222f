"""A sweep's rows in MLflow's model registry (``itrlab report --register``): each row's name, one version per seed's
model whose description carries the row's mean, interval and seed count as the results page computes them, a
report registered twice, and the bad inputs (a sweep whose trials logged no model, an unknown ``models:/`` name or
version), on a real SQLite store. The round trip through a real sweep's models, ``itrlab evaluate
models:/<name>/<version>``, is in tests/test_sweep.py."""

from __future__ import annotations

import re

from scipy import stats

from itrlab.cli import main
from itrlab.report.findings import findings
from itrlab.report.row_models import registered_rows
from itrlab.tracking.model_registry import SEED_TAG, logged_models, model_names, slug
from test_findings import SEEDS, _store, query_ranks, sweep_evidence, trial


def test_a_rows_name_is_its_sweep_profile_and_label_and_never_two_rows():
    assert (
        slug("oss / F") == "oss-F" and slug("VSE++") == "VSE++" and slug(" ../x: y ") == "x-y" and slug("//") == "row"
    )
    names = model_names("dbl_table4", "flickr8k", ["A", "oss / F", "oss-F", "VSE++"])
    assert names["A"] == "dbl_table4-flickr8k-A" and names["VSE++"] == "dbl_table4-flickr8k-VSE++"
    # two labels that give one name: each keeps it with its label's digest, the same in every report
    assert re.fullmatch(r"dbl_table4-flickr8k-oss-F-[0-9a-f]{8}", names["oss / F"])
    assert names["oss / F"] != names["oss-F"] and names == model_names("dbl_table4", "flickr8k", list(names))
    assert all("/" not in name and ":" not in name for name in names.values())  # MLflow refuses both


def ranks_of(row: str, seed: int):
    return query_ranks(10 * "ABDF".index(row) + seed, 0.15 if row == "A" else 0.6)


def test_each_version_carries_its_rows_mean_interval_seed_count_and_comparisons():
    rows = {row: [trial(row, seed, ranks_of(row, seed)) for seed in SEEDS] for row in "AB"}
    evidence = sweep_evidence(rows)
    logged = {
        f"{row}{seed}": f"{row}{seed}".ljust(32, "0") for row in "AB" for seed in SEEDS if (row, seed) != ("B", 2)
    }
    found = findings(evidence)
    a, b = registered_rows(evidence, found, logged)
    values = [t.metrics["test_rsum"] for t in rows["B"]]
    low, high = stats.t.interval(0.95, len(values) - 1, loc=sum(values) / 3, scale=stats.sem(values))
    said = f"test rsum {sum(values) / 3:.1f} ± {(high - low) / 2:.1f} (mean ± 95% Student-t interval over 3 seeds"
    assert b.name == "dbl_tiny-budget-B" and said in b.description
    assert [v.tags[SEED_TAG] for v in b.versions] == ["0", "1"]  # seed 2 logged no model: no version
    assert (
        all(said in v.description for v in b.versions) and "This version: seed 1's model" in b.versions[1].description
    )
    assert "B vs A in rsum: paired over 3 seeds +" in b.description and "; reproduced" in b.description
    assert "B vs A" in a.description and len(a.versions) == 3 and a.tags["itrlab.row_seeds"] == "3"


def test_report_register_writes_a_version_per_seeds_model_once(tmp_path, capsys):
    """On a real SQLite store: a sweep whose trials logged no model is one line and exit 2, no page written; once
    its trials carry their model's tag, each row is a registered model with a version per seed; a second report
    registers nothing again and updates the descriptions; a version or a name the registry does not hold is one
    line."""
    from mlflow import MlflowClient

    from itrlab.tracking import MlflowTracker

    uri, parent = _store(tmp_path, ranks_of)
    out = tmp_path / "results"
    assert main(["report", parent, "--out", str(out), "--tracking-uri", uri, "--register"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--register: no finished trial of sweep 'tiny_sweep'" in err[0], err
    assert "logged its model" in err[0] and not list(out.glob("*.md"))

    reader = MlflowTracker.for_reading(uri)
    runs = reader.trial_runs(parent)
    assert logged_models(runs) == {}
    for trial_id, run in runs.items():
        model = f"runs:/{run['run_id'] if trial_id != 'F2' else '0' * 32}/model"  # F2's tag names another run
        reader.client.set_tag(run["run_id"], "itrlab.model", model)
    assert main(["report", parent, "--out", str(out), "--tracking-uri", uri, "--register"]) == 0
    printed = capsys.readouterr().out
    assert (
        len(re.findall(r"^registered: models:/tiny_sweep-budget-[ABDF]/[123] \(run [0-9a-f]{32}\)$", printed, re.M))
        == 11
    )
    client = MlflowClient(tracking_uri=uri)
    versions = client.search_model_versions("name = 'tiny_sweep-budget-B'")
    assert sorted(v.tags[SEED_TAG] for v in versions) == ["0", "1", "2"]
    by_seed = {v.tags[SEED_TAG]: v for v in versions}
    assert by_seed["1"].run_id == runs["B1"]["run_id"] and by_seed["1"].source == f"runs:/{runs['B1']['run_id']}/model"
    assert "over 3 seeds: 0, 1, 2" in by_seed["1"].description
    assert len(client.search_model_versions("name = 'tiny_sweep-budget-F'")) == 2  # F2's tag is not its own model
    model = client.get_registered_model("tiny_sweep-budget-B")
    assert model.tags["itrlab.sweep"] == "tiny_sweep" and model.tags["itrlab.parent_run"] == parent

    client.update_model_version("tiny_sweep-budget-B", by_seed["1"].version, description="edited")
    assert main(["report", parent, "--out", str(out), "--tracking-uri", uri, "--register"]) == 0
    printed = capsys.readouterr().out
    assert "registered: " not in printed.replace("already registered: ", "")
    assert printed.count("already registered: models:/tiny_sweep-budget-") == 11
    again = client.search_model_versions("name = 'tiny_sweep-budget-B'")
    assert len(again) == 3 and "edited" not in {v.description for v in again}

    for wrong, says in (
        ("models:/tiny_sweep-budget-B/7", "registered model 'tiny_sweep-budget-B' holds versions 1, 2, 3"),
        ("models:/no-such-model/1", "holds no model named 'no-such-model'"),
    ):
        assert main(["evaluate", wrong, "--tracking-uri", uri, "--no-tracking"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err
