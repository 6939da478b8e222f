"""The claims files (configs/claims/, itrlab.config.claims): every shipped file loads, names presets, profiles
and pivot rows that exist, and reads the paper's effect off the published table it cites; every bad input is
one line (exit status 2) naming the file, the claim and the key."""

from __future__ import annotations

import pytest
import yaml

from itrlab.config.claims import ClaimsError, load_claim_files, load_claims
from itrlab.config.loader import config_dir, read_yaml
from itrlab.config.sweep import load_sweep, pivot_labels, sweep_presets
from itrlab.errors import UserInputError, report

# the claims the verdicts issue names (docs/claims-files.md): at least these, under these ids
NAMED = {
    "vsepp-over-vse",
    "dbl-f-over-a",
    "dbl-g-over-a",
    "convse-over-vsepp",
    "convsepp-over-convse",
    "convsepp-over-vsepp",
    "coder-dcl-over-btr",
    "coder-mdcl-over-dcl",
    "coder-concept-dcl-over-mdcl",
    "coder-pgc-over-concept-dcl",
    "coder-full-over-btr",
    "ascl-over-without-pn",
    "ascl-over-without-neg",
}

# each family's published table under configs/paper/ (rows keyed like the pivot's)
PUBLISHED = {
    "vsepp": "convse_table3",
    "dbl-table4": "dbl_table4",
    "convse-table3": "convse_table3",
    "coder-table2": "coder_table2",
    "ascl-table2": "ascl_table2_f30k",
}
RECALLS = ("i2t_R1", "i2t_R5", "i2t_R10", "t2i_R1", "t2i_R5", "t2i_R10")


# --------------------------------------------------------------------------- the shipped files


def test_every_shipped_file_loads():
    files = load_claim_files()
    assert [file.path.name for file in files] == ["ascl.yaml", "coder.yaml", "convse.yaml", "dbl.yaml", "vse.yaml"]
    claims = load_claims()
    assert len(claims) >= 12
    assert NAMED <= {claim.id for claim in claims}
    assert all(claim.file is not None and claim.file.parent == config_dir() / "claims" for claim in claims)
    assert len({claim.id for claim in claims}) == len(claims)


def test_every_sweep_profile_and_row_named_exists():
    presets = sweep_presets()
    for claim in load_claims():
        assert claim.sweep in presets, claim.id
        raw = read_yaml(config_dir() / "sweeps" / f"{presets[claim.sweep]}.yaml")
        profiles = list(raw.get("profiles") or {})
        assert (claim.profile in profiles) if profiles else claim.profile is None, claim.id
        labels = pivot_labels(load_sweep(presets[claim.sweep], claim.profile))
        assert claim.row in labels and claim.baseline in labels, (claim.id, labels)


def published(entry: dict, metric: str) -> float:
    """A published row's ``metric``; rsum as the six recalls summed where the table prints none."""
    return entry[metric] if metric in entry else sum(entry[m] for m in RECALLS)


def test_every_claim_reads_its_paper_effect_off_the_published_table():
    """Each paper_effect is row minus baseline in the published table the family names (rsum: the six recalls
    summed where the table prints no rsum); the rows are keyed there as the pivot keys them."""
    for claim in load_claims():
        rows = read_yaml(config_dir() / "paper" / f"{PUBLISHED[claim.family]}.yaml")["rows"]
        metric = claim.paper_effect.metric
        expected = published(rows[claim.row], metric) - published(rows[claim.baseline], metric)
        assert claim.paper_effect.value == pytest.approx(expected, abs=0.05), claim.id
        assert (claim.paper_effect.value > 0) == (claim.direction == "greater"), claim.id


def test_families_and_dependencies_of_the_shipped_claims():
    claims = {claim.id: claim for claim in load_claims()}
    assert {claim.family for claim in claims.values()} == set(PUBLISHED)
    assert claims["coder-mdcl-over-dcl"].depends_on == ["coder-dcl-over-btr"]
    assert claims["coder-concept-dcl-over-mdcl"].depends_on == ["coder-mdcl-over-dcl"]
    assert claims["coder-pgc-over-concept-dcl"].depends_on == ["coder-concept-dcl-over-mdcl"]
    assert claims["dbl-f-over-a"].metric == "i2t_R1" and claims["vsepp-over-vse"].metric == "rsum"
    # rows D and E train exactly as F and G on cosine scores: no claim names them
    assert not {"D", "E"} & {c.row for c in claims.values() if c.sweep == "dbl-table4"}


# --------------------------------------------------------------------------- bad input: one line each


def claim(**changes) -> dict:
    """A valid claim on the VSE++ preset (no profiles), with ``changes`` applied (None removes a key)."""
    entry = {
        "id": "a-claim",
        "claim": "The hardest negative beats the sum of hinges.",
        "sweep": "vsepp-flickr8k",
        "row": "VSE++",
        "baseline": "VSE",
        "direction": "greater",
        "metric": "rsum",
        "also": ["t2i_R1"],
        "family": "fam",
        "paper_effect": {"value": 42.0, "metric": "rsum", "source": "a table"},
        "depends_on": [],
    }
    entry.update(changes)
    return {key: value for key, value in entry.items() if value is not None}


def on_a_profile(**changes) -> dict:
    """A valid claim on a preset with profiles."""
    return claim(**{"sweep": "dbl-table4", "profile": "flickr8k", "row": "F", "baseline": "A", **changes})


def write(folder, name: str, *claims: dict, families=None) -> None:
    families = families if families is not None else {"fam": "a family for the test"}
    (folder / name).write_text(yaml.safe_dump({"families": families, "claims": list(claims)}), encoding="utf-8")


def refused(folder, *fragments: str) -> str:
    with pytest.raises(ClaimsError) as caught:
        load_claims(folder)
    message = str(caught.value)
    assert "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, message
    assert isinstance(caught.value, UserInputError) and report(caught.value) == 2
    return message


def test_a_valid_folder_loads(tmp_path):
    write(tmp_path, "one.yaml", claim(), on_a_profile(id="b-claim", depends_on=["a-claim"]))
    loaded = load_claims(tmp_path)
    assert [c.id for c in loaded] == ["a-claim", "b-claim"]
    assert loaded[0].profile is None and loaded[1].profile == "flickr8k"
    assert loaded[1].file == tmp_path / "one.yaml" and loaded[0].metrics == ("rsum", "t2i_R1")


@pytest.mark.parametrize(
    ("entry", "fragments"),
    [
        (
            claim(sweep="vsepp-flickr9k"),
            ["one.yaml: a-claim.sweep", "'vsepp-flickr9k'", "did you mean 'vsepp-flickr8k'"],
        ),
        (on_a_profile(profile="flickr9k"), ["a-claim.profile", "a profile of preset dbl-table4", "flickr8k"]),
        (on_a_profile(profile=None), ["a-claim.profile", "got None", "a profile of preset dbl-table4"]),
        (claim(profile="flickr8k"), ["a-claim.profile", "defines no profiles", "leave profile out"]),
        (claim(row="VSE+++"), ["a-claim.row", "'VSE+++'", "preset vsepp-flickr8k's pivot: VSE, VSE++"]),
        (on_a_profile(baseline="Z"), ["a-claim.baseline", "under profile flickr8k", "A, B, C"]),
        (claim(row="VSE"), ["a-claim.baseline", "a row other than the claim's row ('VSE')"]),
        (claim(direction="up"), ["a-claim.direction", "'up'", "'greater' or 'less'"]),
        (claim(direction=None), ["a-claim.direction", "this key is required"]),
        (claim(metric="rsum5"), ["a-claim.metric", "'rsum5'", "rsum, i2t_R1", "did you mean 'rsum'"]),
        (claim(metric="md"), ["a-claim.metric", "per-query ranks"]),
        (claim(also=["t2i_R2"]), ["a-claim.also", "shown beside the verdict"]),
        (claim(also=["rsum"]), ["a-claim.also", "not the verdict's own"]),
        (claim(also=["md", "md"]), ["a-claim.also", "lists md twice"]),
        (
            claim(paper_effect={"value": 1, "metric": "i2t_R1", "source": "x"}),
            ["a-claim.paper_effect.metric", "'i2t_R1'", "(rsum, t2i_R1)"],
        ),
        (claim(paper_effect={"value": 1, "metric": "r1", "source": "x"}), ["a-claim.paper_effect.metric", "'r1'"]),
        (
            claim(paper_effect={"value": 1, "metric": "rsum", "source": "x", "page": 3}),
            ["a-claim.paper_effect.page", "keys allowed in a-claim.paper_effect: metric, source, value"],
        ),
        (claim(depends_on=["no-such-claim"]), ["a-claim.depends_on", "'no-such-claim'", "the id of a claim"]),
        (claim(depends_on=["a-claim"]), ["a-claim.depends_on", "not the claim's own"]),
        (claim(family="other"), ["a-claim.family", "'other'", "declares under families: fam"]),
        (claim(id="A_Claim"), ["claims[0].id", "kebab-case"]),
        (claim(colour="red"), ["a-claim.colour", "keys allowed in a-claim: also, baseline"]),
        (claim(sweep="dbl-optuna", profile=None), ["a-claim.sweep", "no pivot"]),
    ],
)
def test_a_bad_claim_is_one_line(tmp_path, entry, fragments):
    write(tmp_path, "one.yaml", entry)
    message = refused(tmp_path, *fragments)
    assert "one.yaml" in message


def test_a_duplicate_id_is_one_line(tmp_path):
    write(tmp_path, "a.yaml", claim())
    write(tmp_path, "b.yaml", on_a_profile(family="other"), families={"other": "another family"})
    refused(tmp_path, "b.yaml: a-claim.id", "a.yaml has it already")
    (tmp_path / "b.yaml").unlink()
    write(tmp_path, "a.yaml", claim(), on_a_profile())
    refused(tmp_path, "a.yaml: a-claim.id", "a.yaml has it already")


def test_a_family_declared_twice_or_unused_is_one_line(tmp_path):
    write(tmp_path, "a.yaml", claim())
    write(tmp_path, "b.yaml", on_a_profile(id="b-claim"))
    refused(tmp_path, "b.yaml: families", "'fam'", "a.yaml declares it already")
    (tmp_path / "b.yaml").unlink()
    write(tmp_path, "a.yaml", claim(), families={"fam": "used", "spare": "unused"})
    refused(tmp_path, "a.yaml: families", "'spare'", "a claim of this file belongs to")
    write(tmp_path, "a.yaml", claim(), families={"fam": " "})
    refused(tmp_path, "a.yaml: families", "description is empty")


def test_a_circle_of_dependencies_is_one_line(tmp_path):
    write(
        tmp_path,
        "a.yaml",
        claim(id="one", depends_on=["two"]),
        on_a_profile(id="two", depends_on=["three"]),
        on_a_profile(id="three", row="G", depends_on=["one"]),
    )
    refused(tmp_path, "a.yaml: one.depends_on", "one -> two -> three -> one")


def test_a_folder_without_claims_or_a_broken_file_is_one_line(tmp_path):
    refused(tmp_path / "missing", "a folder of claims files")
    refused(tmp_path, "it holds none")
    (tmp_path / "a.yaml").write_text("claims: [unclosed\n", encoding="utf-8")
    refused(tmp_path, "a.yaml", "not valid YAML")
    (tmp_path / "a.yaml").write_text(yaml.safe_dump({"families": {"fam": "x"}, "claims": []}), encoding="utf-8")
    refused(tmp_path, "a.yaml: claims")
    (tmp_path / "a.yaml").write_text(yaml.safe_dump({"claims": [claim()]}), encoding="utf-8")
    refused(tmp_path, "a.yaml: families", "this key is required")


def test_a_preset_whose_file_does_not_load_is_one_line(tmp_path, monkeypatch):
    """The claims folder defaults to the config folder's claims/; a preset file that does not load is the
    claim's one line, naming what the sweep loader says."""
    monkeypatch.setenv("ITRLAB_CONFIG_DIR", str(tmp_path))
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "claims").mkdir()
    (tmp_path / "sweeps" / "broken.yaml").write_text("name: broken\nexperiment: vsepp_flickr8k\n", encoding="utf-8")
    write(tmp_path / "claims", "one.yaml", claim(sweep="broken"))
    refused(None, "claims/one.yaml: a-claim.sweep", "'broken'", "a preset whose file loads", "the grid is empty")
    (tmp_path / "sweeps" / "broken.yaml").write_text("grid: [unclosed\n", encoding="utf-8")
    refused(None, "broken.yaml", "not valid YAML")


# --------------------------------------------------------------------------- separating experiments


def test_the_shipped_separating_experiments_serve_failing_claims_of_their_file():
    """Each shipped separating experiment serves a claim of its own file, in a family of its own kind, and reads
    every verdict word; those of the claims the issue names are there."""
    for file in load_claim_files():
        own = {claim.id for claim in file.claims}
        claimed = {claim.family for claim in file.claims}
        for experiment in file.separating:
            assert experiment.serves in own and experiment.family not in claimed, experiment.id
            assert list(experiment.reads) == ["reproduced", "no effect detected", "contradicted"], experiment.id
    served = {e.serves: e for file in load_claim_files() for e in file.separating}
    assert {"convse-over-vsepp", "convsepp-over-vsepp", "coder-dcl-over-btr", "vsepp-over-vse", "dbl-f-over-a"} <= set(
        served
    )
    prehead = [e for file in load_claim_files() for e in file.separating if e.prehead]
    assert {e.row for e in prehead} == {"ConVSE", "ConVSE++"} and all(e.baseline == "VSE++" for e in prehead)


def separating(**changes) -> dict:
    """A valid separating experiment serving :func:`claim`'s a-claim, on DBL Table IV's flickr8k pivot."""
    entry = {
        "id": "a-check",
        "serves": "a-claim",
        "question": "Does F beat A where the claim's setting changes?",
        "sweep": "dbl-table4",
        "profile": "flickr8k",
        "row": "F",
        "baseline": "A",
        "direction": "greater",
        "metric": "rsum",
        "family": "checks",
        "reads": {
            "reproduced": {"belongs_to": "setting", "because": "it holds there"},
            "no effect detected": {"belongs_to": "open", "because": "nothing separated"},
            "contradicted": {"belongs_to": "method", "because": "it fails there too"},
        },
    }
    entry.update(changes)
    return {key: value for key, value in entry.items() if value is not None}


def write_with(folder, *experiments: dict, families=None, claims=None) -> None:
    families = families if families is not None else {"fam": "the claims", "checks": "the separating experiments"}
    (folder / "one.yaml").write_text(
        yaml.safe_dump({"families": families, "claims": claims or [claim()], "separating": list(experiments)}),
        encoding="utf-8",
    )


def test_a_separating_experiment_loads_beside_its_claim(tmp_path):
    write_with(tmp_path, separating(), separating(id="b-check", embedding="output", row="G"))
    (file,) = load_claim_files(tmp_path)
    first, second = file.separating
    assert first.serves == "a-claim" and not first.prehead and first.reads["contradicted"].belongs_to == "method"
    assert second.row == "G" and [c.id for c in file.claims] == ["a-claim"]
    ids = [entry.id for entry in load_claims(tmp_path)]
    assert ids == ["a-claim"]  # load_claims gives the claims only


def test_a_separating_experiment_before_the_heads_needs_a_preset_that_reads_there(tmp_path):
    before = separating(
        sweep="convse-heads-flickr8k", profile=None, row="ConVSE", baseline="VSE++", embedding="prehead"
    )
    write_with(tmp_path, before)
    (file,) = load_claim_files(tmp_path)
    assert file.separating[0].prehead
    write_with(tmp_path, separating(embedding="prehead"))
    refused(tmp_path, "one.yaml: a-check.embedding", "'prehead'", "no column prehead_test_rsum")


@pytest.mark.parametrize(
    ("entry", "fragments"),
    [
        (separating(serves="a-clam"), ["one.yaml: a-check.serves", "'a-clam'", "a claim of this file", "a-claim"]),
        (separating(row="Z"), ["one.yaml: a-check.row", "'Z'", "preset dbl-table4's pivot under profile flickr8k"]),
        (separating(sweep="dbl-table5"), ["a-check.sweep", "'dbl-table5'", "did you mean 'dbl-table4'"]),
        (separating(profile="flickr9k"), ["a-check.profile", "a profile of preset dbl-table4"]),
        (separating(metric="md"), ["a-check.metric", "'md'", "per-query ranks"]),
        (separating(also=["t2i_R2"]), ["a-check.also", "shown beside the verdict"]),
        (separating(baseline="F"), ["a-check.baseline", "a row other than the separating experiment's row ('F')"]),
        (separating(embedding="head"), ["a-check.embedding", "'head'", "'output' or 'prehead'"]),
        (separating(family="other"), ["a-check.family", "'other'", "declares under families"]),
        (separating(id="A-Check"), ["one.yaml: separating[0].id", "kebab-case"]),
        (separating(id="a-claim"), ["a-claim.id", "no other claim or separating experiment has"]),
        (separating(question=None), ["a-check.question", "this key is required"]),
        (separating(colour="red"), ["a-check.colour", "keys allowed in a-check: also, baseline"]),
        (
            separating(reads={"reproduced": {"belongs_to": "setting", "because": "x"}}),
            ["a-check.reads", "a reading for each verdict word", "lacks no effect detected, contradicted"],
        ),
        (
            separating(
                reads={
                    word: {"belongs_to": "setting", "because": "x"}
                    for word in ("reproduced", "no effect detected", "contradicted", "inconclusive")
                }
            ),
            ["a-check.reads", "has inconclusive"],
        ),
        (
            separating(
                reads={
                    word: {"belongs_to": "paper", "because": "x"}
                    for word in ("reproduced", "no effect detected", "contradicted")
                }
            ),
            ["a-check.reads.", ".belongs_to", "'paper'", "'setting', 'method' or 'open'"],
        ),
    ],
)
def test_a_bad_separating_experiment_is_one_line(tmp_path, entry, fragments):
    write_with(tmp_path, entry)
    message = refused(tmp_path, *fragments)
    assert "one.yaml" in message


def test_a_family_of_separating_experiments_holds_no_claim_and_is_used(tmp_path):
    write_with(tmp_path, separating(family="fam"), families={"fam": "the claims and a separating experiment"})
    refused(tmp_path, "one.yaml: a-check.family", "'fam'", "separating experiments only", "Holm adjustment")
    write_with(tmp_path, families={"fam": "the claims", "checks": "unused"})
    refused(tmp_path, "one.yaml: families", "'checks'", "a claim of this file belongs to, or a separating experiment")
