"""The claims board (itrlab.report.claims_board, itrlab.report.claims_page, ``itrlab claims``): claims judged on a
sweep's evidence, Holm within the family and across the board, a claim built on one that is not reproduced is
inconclusive, a row still learning blocks its claims, and the command refuses evidence without per-query ranks
before writing anything; the experiments that separate the setting from the method, judged by the same analysis (in
the embedding they read), each shown under its claim with its reading, or with the command that measures it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import yaml

from itrlab.cli import main
from itrlab.config.claims import Claim
from itrlab.config.profiles import COMMAND_OVERRIDES_TAG
from itrlab.config.separating import Separating
from itrlab.eval.rank_file import QueryRanks
from itrlab.report.analysis import CONTRADICTED, INCONCLUSIVE, NO_EFFECT, REPRODUCED
from itrlab.report.bootstrap import rank_metrics
from itrlab.report.claims_board import Measured, counts, judge_claims, judge_separating, newest_evidence
from itrlab.report.claims_page import render
from itrlab.report.evidence import Evidence, TrialEvidence, recorded_overrides
from itrlab.report.evidence_file import read_evidence, write_evidence

N, CPI, SEEDS = 200, 5, (0, 1, 2, 3, 4)
FLAT = tuple((epoch, 250.0 + 5 * min(epoch, 5)) for epoch in range(1, 11))  # turned at epoch 5
RISING = tuple((epoch, 200.0 + 5 * epoch) for epoch in range(1, 11))  # still rising at its last epoch


def ranks(seed: int, hit_share: float) -> QueryRanks:
    """A fold of N images: about ``hit_share`` of the queries at rank 0, the others further down."""
    rng = np.random.default_rng(seed)
    i2t = np.where(rng.random(N) < hit_share, 0, rng.integers(1, 40, N)).astype(np.int32)
    t2i = np.where(rng.random(CPI * N) < hit_share, 0, rng.integers(1, 40, CPI * N)).astype(np.int32)
    return QueryRanks("all", CPI, (N,), i2t, t2i)


def trial(row: str, seed: int, share: float, curve=FLAT, with_ranks=True) -> TrialEvidence:
    found = ranks(1000 * sum(map(ord, row)) + seed, share)
    metrics = {f"test_{name}": value for name, value in rank_metrics(found).items()}
    return TrialEvidence(
        f"{row}{seed}",
        f"run-{row}{seed}",
        row,
        seed,
        "finished",
        metrics,
        curve,
        5,
        (3,),
        "",
        found if with_ranks else None,
    )


def evidence(shares: dict[str, float], curves: dict[str, tuple] | None = None, with_ranks=True) -> Evidence:
    curves = curves or {}
    trials = tuple(
        trial(row, s, share, curves.get(row, FLAT), with_ranks) for row, share in shares.items() for s in SEEDS
    )
    learning = {row: "still rising" for row in curves if curves[row] is RISING}
    convergence = {row: {"still_learning": learning.get(row, ""), "epochs": 10, "best_epoch": 5} for row in shares}
    return Evidence(
        "dbl_table4", "flickr8k", "parent", "vsepp_flickr8k", "f8k_1k", "rsum", "max", tuple(shares), "A", (), None,
        trials, convergence,
    )  # fmt: skip


def claim(claim_id: str, row: str, direction="greater", depends_on=(), family="t4", **more) -> Claim:
    return Claim.model_validate(
        {
            "id": claim_id,
            "claim": f"{row} beats A",
            "sweep": "dbl-table4",
            "profile": "flickr8k",
            "row": row,
            "baseline": "A",
            "direction": direction,
            "metric": "rsum",
            "family": family,
            "paper_effect": {"value": 5.0, "metric": "rsum", "source": "a table"},
            "depends_on": list(depends_on),
            **more,
        }
    )


def judged(shares, claims, curves=None) -> dict[str, object]:
    measured = {("dbl_table4", "flickr8k"): Measured(evidence(shares, curves), "2026-11-29-dbl_table4-flickr8k.md")}
    return {result.claim.id: result for result in judge_claims(claims, measured)}


def test_each_claim_gets_its_verdict_word_from_the_fixed_analysis():
    found = judged(
        {"A": 0.3, "F": 0.5, "B": 0.3, "C": 0.1},
        [claim("f", "F"), claim("b", "B"), claim("c", "C"), claim("after-b", "F", depends_on=["b"])],
    )
    assert found["f"].verdict.word == REPRODUCED and found["f"].verdict.stats.bootstrap is not None
    assert found["c"].verdict.word == CONTRADICTED  # the interval excludes 0 the other way
    assert found["b"].verdict.word == NO_EFFECT and found["b"].verdict.stats.mde > 0
    assert found["b"].paper_outside is not None
    after = found["after-b"].verdict
    assert after.word == INCONCLUSIVE and "claim b, which is no effect detected" in after.reason
    for result in found.values():  # the board's family of four, against the board-wide Holm over the same four
        assert result.board_p >= result.verdict.stats.p


def test_holm_across_the_board_is_at_least_holm_within_a_family():
    found = judged(
        {"A": 0.3, "F": 0.36, "G": 0.36, "B": 0.3},
        [claim("f", "F", family="one"), claim("g", "G", family="two"), claim("b", "B", family="two")],
    )
    assert found["f"].verdict.holm_p == pytest.approx(found["f"].verdict.stats.p)  # a family of one
    assert all(result.board_p >= result.verdict.holm_p for result in found.values())


def test_a_row_still_learning_makes_its_claims_inconclusive():
    found = judged({"A": 0.3, "F": 0.5}, [claim("f", "F")], curves={"F": RISING})
    assert found["f"].verdict.word == INCONCLUSIVE and "F still learning" in found["f"].verdict.reason


def test_a_paper_effect_in_another_metric_is_compared_in_that_metric():
    effect = {"value": 40.0, "metric": "i2t_R1", "source": "a table of R@1"}
    found = judged({"A": 0.3, "F": 0.5}, [claim("f", "F", paper_effect=effect, also=["i2t_R1"])])
    assert found["f"].paper_stats.metric == "i2t_R1" and found["f"].paper_outside is True  # +40 is far outside ours


def test_the_board_renders_every_measured_claim_and_the_rest_apart():
    found = judged(
        {"A": 0.3, "F": 0.5}, [claim("f", "F", also=["t2i_R1"]), claim("x", "F", sweep="vsepp-flickr8k", profile=None)]
    )
    board = render(list(found.values()), {"t4": "Table IV's rows against A"})
    also = found["f"].also[0]
    assert (
        f"| t2i_R1 {also.bootstrap.value:+.1f} [{also.bootstrap.low:+.1f}, {also.bootstrap.high:+.1f}] |".replace(
            "[", "\\["
        ).replace("]", "\\]")
        in board
    )  # the claim's other metric beside its verdict, escaped as a cell
    assert "| f: F vs A, rsum ([page](results/2026-11-29-dbl_table4-flickr8k.md)) |" in board
    assert "**reproduced**" in board and "## Not measured yet" in board
    assert "`python jobs/sweep.py --preset vsepp-flickr8k`, then `itrlab report`" in board
    assert counts(list(found.values())) == {REPRODUCED: 1, "not measured": 1}


def test_the_newest_evidence_of_a_sweep_is_read(tmp_path):
    write_evidence(evidence({"A": 0.3, "F": 0.3}), tmp_path / "2026-11-28-dbl_table4-flickr8k.npz")
    write_evidence(evidence({"A": 0.3, "F": 0.5}), tmp_path / "2026-11-29-dbl_table4-flickr8k.npz")
    write_evidence(evidence({"A": 0.3, "F": 0.4}), tmp_path / "2026-11-29-dbl_table4-flickr8k-2.npz")
    (key, measured), *_ = newest_evidence(tmp_path, read_evidence).items()
    assert key == ("dbl_table4", "flickr8k") and measured.page == "2026-11-29-dbl_table4-flickr8k-2.md"


def test_evidence_of_a_sweep_whose_command_line_changed_its_recipe_is_not_read(tmp_path):
    """A run with a command-line override of its recipe measures another experiment than the claim's: the board
    keeps the newest run as declared; one that only says where the data lie is as declared."""
    write_evidence(evidence({"A": 0.3, "F": 0.3}), tmp_path / "2026-11-28-dbl_table4-flickr8k.npz")
    changed = replace(evidence({"A": 0.3, "F": 0.5}), command_overrides=("loss.reading=infonce",))
    write_evidence(changed, tmp_path / "2026-11-29-dbl_table4-flickr8k.npz")
    assert read_evidence(tmp_path / "2026-11-29-dbl_table4-flickr8k.npz").command_overrides == ("loss.reading=infonce",)
    unreadable = replace(evidence({"A": 0.3, "F": 0.6}), command_overrides=None)
    write_evidence(unreadable, tmp_path / "2026-11-29-dbl_table4-flickr8k-2.npz")
    (measured,) = newest_evidence(tmp_path, read_evidence).values()
    assert measured.page == "2026-11-28-dbl_table4-flickr8k.md"
    located = replace(
        evidence({"A": 0.3, "F": 0.4}), command_overrides=("dataset.root=/data/flickr8k_precomp/pool1x1",)
    )
    write_evidence(located, tmp_path / "2026-11-29-dbl_table4-flickr8k-3.npz")
    (measured,) = newest_evidence(tmp_path, read_evidence).values()
    assert measured.page == "2026-11-29-dbl_table4-flickr8k-3.md"


def test_the_parent_runs_tag_gives_the_command_lines_overrides():
    assert recorded_overrides({"tags": {}}) == ()  # a sweep recorded before the tag: as declared
    assert recorded_overrides({"tags": {COMMAND_OVERRIDES_TAG: '["loss.reading=infonce"]'}}) == (
        "loss.reading=infonce",
    )
    for bad in ("not json", '{"a": 1}', "[1, 2]"):
        assert recorded_overrides({"tags": {COMMAND_OVERRIDES_TAG: bad}}) is None


def test_itrlab_claims_writes_the_board_and_logs_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    (tmp_path / "docs" / "results" / "evidence").mkdir(parents=True)
    write_evidence(
        evidence({row: 0.3 + 0.02 * i for i, row in enumerate("ABCFGHI")}),
        tmp_path / "docs" / "results" / "evidence" / "2026-11-29-dbl_table4-flickr8k.npz",
    )
    assert main(["claims"]) == 0
    board = (tmp_path / "docs" / "claims.md").read_text()
    assert "dbl-f-over-a: F vs A" in board and "## Not measured yet" in board
    out = capsys.readouterr().out
    from mlflow import MlflowClient

    client = MlflowClient()
    (run,) = client.search_runs([client.get_experiment_by_name("itrlab-claims").experiment_id])
    assert run.info.status == "FINISHED" and "claims.md" in [a.path for a in client.list_artifacts(run.info.run_id)]
    assert "claims board: docs/claims.md" in out


def test_evidence_without_ranks_is_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "evidence").mkdir()
    write_evidence(
        evidence({row: 0.3 for row in "ABCFGHI"}, with_ranks=False),
        tmp_path / "evidence" / "2026-11-29-dbl_table4-flickr8k.npz",
    )
    assert main(["claims", "--evidence", "evidence", "--out", "board.md", "--no-log"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1
        and "have no per-query test ranks" in err[0]
        and "--preset dbl-table4 --profile flickr8k" in err[0]
    )
    assert not (tmp_path / "board.md").exists()


# --------------------------------------------------------------------------- separating experiments


def separating(exp_id: str, row: str, serves="f", family="checks", embedding="output", **more) -> Separating:
    return Separating.model_validate(
        {
            "id": exp_id,
            "serves": serves,
            "question": f"Does {row} beat A elsewhere?",
            "sweep": "dbl-table4",
            "profile": "flickr8k",
            "row": row,
            "baseline": "A",
            "direction": "greater",
            "metric": "rsum",
            "family": family,
            "embedding": embedding,
            "reads": {
                "reproduced": {"belongs_to": "setting", "because": "it holds once the setting changes"},
                "no effect detected": {"belongs_to": "open", "because": "it separates nothing"},
                "contradicted": {"belongs_to": "method", "because": "it fails there too"},
            },
            **more,
        }
    )


def with_prehead(found: Evidence, shares: dict[str, float]) -> Evidence:
    """``found`` whose rows of ``shares`` also hold a reading before the projection head with its own ranks."""
    trials = []
    for t in found.trials:
        if t.row in shares:
            before = ranks(7000 + 1000 * sum(map(ord, t.row)) + t.seed, shares[t.row])
            metrics = {**t.metrics, **{f"prehead_test_{k}": v for k, v in rank_metrics(before).items()}}
            t = replace(t, metrics=metrics, prehead_ranks=before)
        trials.append(t)
    return replace(found, trials=tuple(trials))


def board(found: Evidence, claims, experiments):
    measured = {("dbl_table4", "flickr8k"): Measured(found, "2026-11-29-dbl_table4-flickr8k.md")}
    return judge_claims(claims, measured), {r.experiment.id: r for r in judge_separating(experiments, measured)}


def test_a_separating_experiment_gets_its_verdict_and_its_reading_from_the_same_analysis():
    found = evidence({"A": 0.3, "F": 0.5, "B": 0.1, "C": 0.3, "G": 0.5}, curves={"G": RISING})
    claims = [claim("f", "F"), claim("b", "B")]
    experiments = [separating("up", "F"), separating("down", "B"), separating("same", "C"), separating("rising", "G")]
    results, separated = board(found, claims, experiments)
    assert separated["up"].verdict.word == REPRODUCED and separated["up"].reading() == (
        "setting",
        "it holds once the setting changes",
    )
    assert separated["down"].verdict.word == CONTRADICTED and separated["down"].reading()[0] == "method"
    assert separated["same"].verdict.word == NO_EFFECT and separated["same"].reading()[0] == "open"
    assert separated["rising"].verdict.word == INCONCLUSIVE and "G still learning" in separated["rising"].verdict.reason
    assert separated["rising"].reading() == ("open", "inconclusive: it separates nothing yet")
    # the same numbers as a claim of the same rows: one analysis
    twin = {
        r.claim.id: r
        for r in judge_claims(
            [claim("twin", "F", family="other")], {("dbl_table4", "flickr8k"): Measured(found, "p.md")}
        )
    }
    assert separated["up"].verdict.stats == twin["twin"].verdict.stats
    # Holm within the separating family, the board-wide adjustment over separating experiments only
    assert all(r.board_p >= r.verdict.holm_p for r in separated.values() if r.verdict.holm_p is not None)
    alone, _ = board(found, claims, [])
    assert [(r.verdict.to_dict(), r.board_p) for r in results] == [(r.verdict.to_dict(), r.board_p) for r in alone]


def test_a_separating_experiment_before_the_heads_reads_that_embedding_and_its_ranks():
    found = with_prehead(evidence({"A": 0.3, "F": 0.3}), {"A": 0.3, "F": 0.6})
    _, separated = board(
        found, [claim("f", "F")], [separating("out", "F"), separating("pre", "F", embedding="prehead")]
    )
    assert separated["out"].verdict.word == NO_EFFECT  # through the heads F and A tie
    pre = separated["pre"].verdict
    assert pre.word == REPRODUCED and pre.stats.bootstrap is not None  # before them F wins, on its own ranks
    assert pre.stats.difference == pytest.approx(
        sum(found.values("F", "rsum", True)[s] - found.values("A", "rsum", True)[s] for s in SEEDS) / len(SEEDS)
    )


def test_the_board_shows_each_separating_experiment_under_its_claim_and_the_unmeasured_with_their_command():
    found = evidence({"A": 0.3, "F": 0.5})
    claims = [claim("f", "F"), claim("x", "F", sweep="vsepp-flickr8k", profile=None, baseline="VSE", family="v")]
    experiments = [
        separating("up", "F"),
        separating("later", "VSE++", serves="f", sweep="vsepp-flickr8k", profile=None, baseline="VSE"),
        separating("for-x", "VSE++", serves="x", sweep="vsepp-flickr8k", profile=None, baseline="VSE"),
    ]
    results, separated = board(found, claims, experiments)
    page = render(results, {"t4": "Table IV's rows against A"}, "results/", list(separated.values()))
    lines = page.splitlines()
    at = lines.index(next(line for line in lines if line.startswith("| f: F vs A")))
    assert lines[at + 1].startswith(
        "| ↳ separating up: F vs A, rsum ([page](results/2026-11-29-dbl_table4-flickr8k.md)) |"
    )
    assert lines[at + 1].endswith("| **reproduced**: setting |")
    assert lines[at + 2] == (
        "| ↳ separating later: VSE++ vs VSE, rsum | — | not measured: `python jobs/sweep.py --preset vsepp-flickr8k` "
        "| — | — | — | — | — | not measured |"
    )
    assert "Reads: **setting**: it holds once the setting changes." in page
    assert (
        "Not measured: `python jobs/sweep.py --preset vsepp-flickr8k`, then `itrlab report`. Its reading, fixed "
        "before the data: reproduced → setting (it holds once the setting changes); no effect detected → open"
    ) in page
    waiting = page[page.index("## Not measured yet") :]
    assert "| ↳ separating for-x: VSE++ vs VSE, rsum | `python jobs/sweep.py --preset vsepp-flickr8k`, then" in waiting
    assert "Their separating experiments:" in waiting and "↳ for-x (separates x)" in waiting
    assert counts(list(separated.values())) == {REPRODUCED: 1, "not measured": 2}


def test_a_separating_experiment_without_the_ranks_it_reads_is_one_line_and_writes_nothing(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "evidence").mkdir()
    (tmp_path / "claims").mkdir()
    write_evidence(evidence({row: 0.3 for row in "AF"}), tmp_path / "evidence" / "2026-11-29-dbl_table4-flickr8k.npz")
    experiment = separating("pre", "F", embedding="prehead", sweep="convse-heads-flickr8k", profile=None)
    text = {
        "families": {"t4": "the claims", "checks": "the separating experiments"},
        "claims": [claim("f", "F").model_dump()],
        "separating": [{**experiment.model_dump(), "row": "ConVSE", "baseline": "VSE++"}],
    }
    (tmp_path / "claims" / "one.yaml").write_text(yaml.safe_dump(text, sort_keys=False), encoding="utf-8")
    convse = replace(evidence({"VSE++": 0.3, "ConVSE": 0.3}), baseline="VSE++")
    write_evidence(
        replace(convse, sweep="convse_heads_flickr8k", profile=None),
        tmp_path / "evidence" / "2026-11-29-convse_heads_flickr8k.npz",
    )
    args = ["claims", "--claims", "claims", "--evidence", "evidence", "--out", "board.md", "--no-log"]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "separating experiment pre: 10 trial(s)" in err[0], err
    assert "no per-query test ranks read before the projection head" in err[0]
    assert "--preset convse-heads-flickr8k" in err[0] and not (tmp_path / "board.md").exists()
    write_evidence(
        replace(with_prehead(convse, {"VSE++": 0.3, "ConVSE": 0.6}), sweep="convse_heads_flickr8k", profile=None),
        tmp_path / "evidence" / "2026-11-29-convse_heads_flickr8k.npz",
    )
    assert main(args) == 0
    page = (tmp_path / "board.md").read_text()
    assert "| ↳ separating pre: ConVSE vs VSE++, rsum before the projection head ([page](" in page
    assert "2026-11-29-convse_heads_flickr8k.md)) |" in page
    assert "separating experiments: 1 reproduced" in capsys.readouterr().out
