"""A sweep's evidence and what it says (itrlab.report.evidence, itrlab.report.findings, itrlab.report.verdict):
identical rows as one, a loss that fell onto its max-of-hinges plateau, the evidence file written and read
back checked, and ``itrlab report`` on a real MLflow store writing the verdicts and the evidence beside the page."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from itrlab.cli import main
from itrlab.report.analysis import CONTRADICTED, INCONCLUSIVE, REPRODUCED
from itrlab.report.bootstrap import rank_metrics
from itrlab.report.evidence import (
    PREHEAD_RANKS_ARTIFACT,
    RANKS_ARTIFACT,
    Evidence,
    EvidenceError,
    QueryRanks,
    TrialEvidence,
    collect_evidence,
    with_findings,
)
from itrlab.report.evidence_file import read_evidence, write_evidence
from itrlab.report.findings import EXPECTED_BETTER, FROM_PAPER, findings
from itrlab.report.identical import identical_groups
from itrlab.report.verdict import at_collapse_plateau, collapse_plateau, collapsed, verdicts

N, CPI = 100, 5
CURVE = tuple((epoch, 200.0 + 10 * min(epoch, 7)) for epoch in range(1, 11))  # flat from epoch 7: converged


def query_ranks(seed: int, hit_share: float) -> QueryRanks:
    """Ranks of a fold of N images: about ``hit_share`` of the queries at rank 0, the others further down."""
    rng = np.random.default_rng(seed)
    i2t = np.where(rng.random(N) < hit_share, 0, rng.integers(1, 40, N))
    t2i = np.where(rng.random(CPI * N) < hit_share, 0, rng.integers(1, 40, CPI * N))
    return QueryRanks(
        protocol="all", captions_per_image=CPI, fold_sizes=(N,), i2t=i2t.astype(np.int32), t2i=t2i.astype(np.int32)
    )


def trial(row: str, seed: int, ranks: QueryRanks, curve=CURVE, collapse="", status="finished") -> TrialEvidence:
    metrics = {f"test_{name}": value for name, value in rank_metrics(ranks).items()}
    return TrialEvidence(
        f"{row}{seed}", f"run-{row}{seed}", row, seed, status, metrics, curve, 4, (8,), collapse, ranks
    )


def sweep_evidence(rows: dict[str, list[TrialEvidence]], pairs=(), steps=()) -> Evidence:
    return Evidence(
        "dbl_tiny",
        None,
        "parent",
        "dbl_synthetic_tiny",
        "all",
        "rsum",
        "max",
        tuple(rows),
        "A",
        tuple(pairs),
        None,
        tuple(t for trials in rows.values() for t in trials),
        steps=tuple(steps),
    )


SEEDS = (0, 1, 2)


def test_two_identical_rows_are_reported_and_judged_as_one():
    same = {s: query_ranks(100 + s, 0.5) for s in SEEDS}
    rows = {
        "A": [trial("A", s, query_ranks(s, 0.2)) for s in SEEDS],
        "D": [trial("D", s, same[s]) for s in SEEDS],
        "E": [trial("E", s, query_ranks(200 + s, 0.5)) for s in SEEDS],
        "F": [trial("F", s, same[s]) for s in SEEDS],
    }
    rows["F"] = [TrialEvidence(**{**t.__dict__, "trial": f"F{t.seed}"}) for t in rows["D"]]
    rows["F"] = [TrialEvidence(**{**t.__dict__, "row": "F"}) for t in rows["F"]]
    found = findings(sweep_evidence(rows, pairs=[("F", "E"), ("D", "E")]))
    assert found.identical == [("D", "F")] and found.label("F") == "D = F"
    compared = [(v.stats.row, v.stats.reference) for v in found.verdicts]
    assert compared == [("D = F", "A"), ("E", "A"), ("D = F", "E")]  # F vs A and F vs E not counted twice
    assert all(v.holm_p is not None for v in found.verdicts)  # a Holm family of three, not five
    assert found.verdicts[0].word == REPRODUCED
    # a row that differs in one seed's last digit is no longer identical
    changed = {**rows["F"][0].metrics, "test_rsum": rows["F"][0].metrics["test_rsum"] + 1e-9}
    rows["F"][0] = TrialEvidence(**{**rows["F"][0].__dict__, "metrics": changed})
    assert findings(sweep_evidence(rows)).identical == []
    assert identical_groups({"A": {0: 1}, "B": {0: 1}, "C": {}, "D": {0: 1, 1: 2}}) == [("A", "B")]


def test_a_loss_that_falls_onto_its_max_of_hinges_plateau_is_flagged():
    # VSE++ with margin 0.2 on batches of 128: every hinge at its margin sums to 2 x 0.2 x 128 = 51.2
    params = {"loss.name": "vsepp", "loss.margin": "0.2", "train.batch_size": "128", "loss.warmup_epochs": "0"}
    assert collapse_plateau(params) == pytest.approx(51.2)
    assert collapse_plateau({**params, "loss.name": "vse"}) is None  # a sum of hinges' plateau depends on the data
    assert collapse_plateau({"loss.name": "vsepp"}) is None  # no batch size: unknown
    said = at_collapse_plateau(51.22, 51.2)
    assert said.startswith("on its plateau: the last training loss 51.22 lies within 1% of 51.2, its loss's value when")
    assert at_collapse_plateau(27.8, 51.2) is None and at_collapse_plateau(None, 51.2) is None
    assert collapsed(0.0018).startswith("collapsed: test MD 0.0018 below 0.01") and collapsed(0.28) is None
    # what a training's last lines say of it: the fall onto the plateau and the collapse, without a chance level
    lines = verdicts(236.0, None, {"loss": [(1, 54.96), (6, 51.22)]}, 0, plateau=51.2, test_md=0.0018)
    assert [line.split(":")[0] for line in lines] == ["on its plateau", "collapsed"]
    # a trial whose loss fell from 54.96 onto 51.22 (it moved by 7%: "never left its start" does not see it)
    summary = {
        "sweep": "dbl_tiny",
        "experiment": "x",
        "objective": "max rsum",
        "table_rows": ["cooperative.strategy"],
        "trials": {
            "trial": ["a0", "f0"],
            "status": ["finished", "finished"],
            "cooperative.strategy": ["A", "F"],
            "seed": [0, 0],
        },
        "report": {"rows": [["A"], ["F"]], "row_kinds": ["baseline", "result"]},
    }
    loss = [(1, 54.96), (2, 53.0), (3, 52.1), (4, 51.6), (5, 51.3), (6, 51.22)]
    runs = {
        "a0": {
            "run_id": "ra",
            "params": params,
            "metrics": {"test_rsum": 236.0, "test_md": 0.3},
            "history": {"loss": loss},
        },
        "f0": {"run_id": "rf", "params": params, "metrics": {"test_rsum": 250.0, "test_md": 0.3}, "history": {}},
    }
    evidence = collect_evidence(summary, {"run_id": "p"}, runs, {})
    a0, f0 = evidence.trials
    assert a0.collapse.startswith("on its plateau: the last training loss 51.22") and f0.collapse == ""
    (verdict,) = findings(evidence).verdicts
    assert (
        verdict.word == INCONCLUSIVE
        and "A failed to train (seed 0: on its plateau: the last training loss 51.22" in verdict.reason
    )


def test_a_verdict_is_inconclusive_on_a_failed_base_or_a_row_still_learning_and_takes_the_papers_direction():
    """A step (``table.steps``) on a base that failed its own claim is inconclusive; a sibling pair is not."""
    rising = tuple((epoch, 200.0 + 5 * epoch) for epoch in range(1, 11))  # every seed +10 over epochs 8-10
    rows = {
        "A": [trial("A", s, query_ranks(s, 0.2)) for s in SEEDS],
        "B": [trial("B", s, query_ranks(s, 0.2)) for s in SEEDS],  # A's very ranks: no effect
        "C": [trial("C", s, query_ranks(40 + s, 0.6)) for s in SEEDS],
        "L": [trial("L", s, query_ranks(50 + s, 0.6), curve=rising) for s in SEEDS],
    }
    rows["B"] = [TrialEvidence(**{**t.__dict__, "curve": t.curve[:-1] + ((10, 270.5),)}) for t in rows["B"]]
    published = {"A": {"rsum": 300.0}, "C": {"rsum": 280.0}}
    found = findings(sweep_evidence(rows, pairs=[("C", "B")], steps=[("C", "B")]), published=published)
    words = {(v.stats.row, v.stats.reference): v for v in found.verdicts}
    assert words[("B", "A")].word == "no effect detected"
    assert words[("C", "B")].word == INCONCLUSIVE
    assert words[("C", "B")].reason == "measured on B, whose own comparison with A is no effect detected"
    # declared as siblings (table.compare alone: C is not built on B), the same pair stands on its own numbers
    sibling = findings(sweep_evidence(rows, pairs=[("C", "B")]), published=published)
    (alone,) = [v for v in sibling.verdicts if (v.stats.row, v.stats.reference) == ("C", "B")]
    assert alone.word == "reproduced" and "measured on" not in alone.reason
    assert words[("L", "A")].word == INCONCLUSIVE and words[("L", "A")].reason.startswith(
        "L still learning (best validation rsum still rising: +10.0 from epoch 8 to 10"
    )
    # the paper has C 20 below A: C's clear lead over A contradicts it
    assert words[("C", "A")].direction == -1 and words[("C", "A")].word == CONTRADICTED
    assert words[("C", "A")].paper_effect == -20.0 and words[("C", "A")].paper_outside is True
    assert found.directions[("C", "A")] == FROM_PAPER and found.directions[("B", "A")] == EXPECTED_BETTER


def test_a_declared_pair_is_judged_once_in_its_own_order():
    """A sweep whose baseline is the method it claims better (VSE++), declaring VSE++ against VSE: one comparison,
    VSE++ against VSE, not also VSE against VSE++ (which would read the claim's reference as a failed base)."""
    rows = {
        "VSE++": [trial("VSE++", s, query_ranks(40 + s, 0.6)) for s in SEEDS],
        "VSE": [trial("VSE", s, query_ranks(s, 0.2)) for s in SEEDS],
    }
    evidence = sweep_evidence(rows, pairs=[("VSE++", "VSE")])
    found = findings(replace(evidence, baseline="VSE++"))
    assert [(v.stats.row, v.stats.reference, v.word) for v in found.verdicts] == [("VSE++", "VSE", REPRODUCED)]


def test_a_decay_each_seed_chose_on_validation_is_judged_kept_and_read_back(tmp_path):
    """Trials that chose their decay (``train.lr_decay_choices``): the row's convergence says which decay each seed
    chose and judges each seed at its own (row B's seeds peak at epoch 4 of 10 whatever they chose: the two that
    chose 8 lie 4 epochs before it), and the evidence file keeps the choices."""
    peaked = tuple((epoch, 200.0 + 10 * min(epoch, 4) - (epoch > 4)) for epoch in range(1, 11))
    rows = {row: [trial(row, s, query_ranks(10 * i + s, 0.3 + 0.1 * i)) for s in SEEDS] for i, row in enumerate("AB")}
    for i, decay in enumerate((8, 2, 8)):
        rows["B"][i] = replace(rows["B"][i], curve=peaked, decay_epochs=(decay,), decay_choices=(2, 5, 8))
    evidence = sweep_evidence(rows, pairs=[("B", "A")])
    found = findings(evidence)
    b = found.convergence["B"]
    assert b.chosen == "after 2 (seed 1), after 8 (seeds 0, 2)" and found.convergence["A"].chosen == ""
    assert (
        b.schedule.startswith("best epochs 4, 4, 4 against first decays after 8, 2, 8") and "2 of 3 seeds" in b.schedule
    )
    back = read_evidence(
        write_evidence(with_findings(evidence, found.convergence, found.identical), tmp_path / "e.npz")
    )
    assert [t.decay_choices for t in back.trials if t.row == "B"] == [(2, 5, 8)] * 3
    assert [t.decay_epochs for t in back.trials if t.row == "B"] == [(8,), (2,), (8,)]
    assert back.convergence["B"]["decay_chosen"] == b.chosen and findings(back).convergence["B"] == b


def test_the_evidence_file_is_written_small_and_read_back_checked(tmp_path):
    rows = {row: [trial(row, s, query_ranks(10 * i + s, 0.3 + 0.1 * i)) for s in SEEDS] for i, row in enumerate("AB")}
    evidence = sweep_evidence(rows, pairs=[("B", "A")], steps=[("B", "A")])
    found = findings(evidence)
    path = write_evidence(with_findings(evidence, found.convergence, found.identical), tmp_path / "e" / "page.npz")
    back = read_evidence(path)
    assert back.rows == ("A", "B") and back.baseline == "A" and back.metric == "rsum"
    assert back.values("B") == evidence.values("B") and set(back.ranks("A")) == set(SEEDS)
    assert np.array_equal(back.ranks("B")[1].t2i, rows["B"][1].ranks.t2i) and back.ranks("B")[1].t2i.dtype == np.int16
    assert back.trials[0].curve == CURVE and back.trials[0].decay_epochs == (8,)
    assert back.convergence["A"]["still_learning"] == "" and back.identical == ()
    assert back.pairs == (("B", "A"),) and back.steps == (("B", "A"),)
    assert findings(back).verdicts[0].to_dict() == found.verdicts[0].to_dict()  # the board judges it the same
    assert path.stat().st_size < 20_000  # 6 trials of 100 images x 5 captions
    assert back.ranks("B", prehead=True) == {} and back.values("B", prehead=True) == {}

    def tampered(name: str, meta=None, **arrays) -> str:
        with np.load(path) as data:
            content = {key: data[key] for key in data.files}
        if meta is not None:
            content["meta"] = np.array(json.dumps(meta(json.loads(str(content["meta"])))))
        content.update(arrays)
        target = tmp_path / f"{name}.npz"
        np.savez_compressed(target, **content)
        with pytest.raises(EvidenceError) as err:
            read_evidence(target)
        message = str(err.value)
        assert "\n" not in message and message.startswith(f"evidence {target}: ")
        return message

    assert "'format'" in tampered("version", lambda m: {**m, "version": 2})
    assert "one of the rows" in tampered("baseline", lambda m: {**m, "baseline": "Z"})
    assert "one of the pairs" in tampered("step", lambda m: {**m, "steps": [["A", "B"]]})
    assert "'trials[0].seed': got -1" in tampered("seed", lambda m: {**m, "trials": [{**m["trials"][0], "seed": -1}]})
    assert "a rank outside its fold of 100 images" in tampered("ranks", t0_t2i=np.full(CPI * N, N, dtype=np.int16))
    assert "do not fit 99 image" in tampered("short", t0_i2t=np.zeros(N - 1, dtype=np.int16))
    assert "nothing else" in tampered("extra", stray=np.zeros(3))
    (tmp_path / "junk.npz").write_bytes(b"not an archive")
    with pytest.raises(EvidenceError, match="not a NumPy archive"):
        read_evidence(tmp_path / "junk.npz")
    with pytest.raises(EvidenceError, match="no such file"):
        read_evidence(tmp_path / "missing.npz")


def test_the_reading_before_the_projection_head_is_kept_beside_the_trials_own(tmp_path):
    """A trial that also read its model before the projection head keeps that reading's metrics and ranks in
    the evidence file, read back checked; an archive whose trial names them without their arrays is refused."""
    rows = {row: [trial(row, s, query_ranks(10 * i + s, 0.3)) for s in SEEDS] for i, row in enumerate("AB")}
    before = {s: query_ranks(500 + s, 0.6) for s in SEEDS}
    rows["B"] = [
        replace(
            t,
            metrics={**t.metrics, **{f"prehead_test_{k}": v for k, v in rank_metrics(before[t.seed]).items()}},
            prehead_ranks=before[t.seed],
        )
        for t in rows["B"]
    ]
    evidence = sweep_evidence(rows)
    path = write_evidence(evidence, tmp_path / "page.npz")
    back = read_evidence(path)
    assert back.values("B", "rsum", prehead=True) == evidence.values("B", "rsum", prehead=True) != back.values("B")
    assert set(back.ranks("B", prehead=True)) == set(SEEDS) and back.ranks("A", prehead=True) == {}
    assert np.array_equal(back.ranks("B", prehead=True)[2].i2t, before[2].i2t)
    assert back.trials[3].ranks_of(prehead=True) is not None and back.trials[3].ranks_of() is not None
    with np.load(path) as data:
        content = {key: data[key] for key in data.files if key != "t3_prehead_t2i"}
    np.savez_compressed(tmp_path / "short.npz", **content)
    with pytest.raises(EvidenceError, match=r"trials\[3\]\.prehead_ranks': got \['t3_prehead_t2i'\]"):
        read_evidence(tmp_path / "short.npz")


def _store(folder, ranks_of, prehead_of=None):
    """A SQLite MLflow store with one finished sweep of rows A (baseline), B, D and F (D and F identical), three
    seeds each, every trial with its curves, test metrics and (``ranks_of(row, seed)``: bytes or ranks) its
    ``test_ranks.npz``, and where ``prehead_of(row, seed)`` gives ranks, its reading before the projection head
    (``prehead_test_*`` and ``prehead_test_ranks.npz``); returns its URI and the parent run's id."""
    from itrlab.tracking import SWEEP_TAG, MlflowTracker
    from itrlab.tracking.run_reader import TRIAL_ID_TAG

    uri = f"sqlite:///{folder / 'mlflow.db'}"
    parent = MlflowTracker("tiny_sweep", uri)
    parent_id = parent.start(run_name="sweep", tags={SWEEP_TAG: "tiny_sweep"}, params={})
    table = {"trial": [], "status": [], "cooperative.strategy": [], "seed": [], "test_rsum": []}
    for row in "ABDF":
        for seed in SEEDS:
            ranks = ranks_of(row, seed)
            child = MlflowTracker("tiny_sweep", uri)
            trial_id = f"{row}{seed}"
            child.start(
                run_name=trial_id,
                tags={TRIAL_ID_TAG: trial_id, SWEEP_TAG: "tiny_sweep"},
                params={
                    "seed": str(seed),
                    "train.lr_decay_epochs": "[8]",
                    "loss.name": "vsepp",
                    "loss.margin": "0.2",
                    "train.batch_size": "32",
                },
                parent_run_id=parent_id,
            )
            for epoch, value in CURVE:
                child.log_metrics({"rsum": value, "loss": 5.0 / epoch}, step=epoch)
            metrics = rank_metrics(ranks) if isinstance(ranks, QueryRanks) else {"rsum": 100.0}
            child.log_final_metrics({f"test_{key}": value for key, value in metrics.items()} | {"test_md": 0.3})
            upload = folder / "upload" / trial_id / RANKS_ARTIFACT
            upload.parent.mkdir(parents=True)
            if isinstance(ranks, QueryRanks):
                np.savez(
                    upload,
                    i2t=ranks.i2t.astype(np.int32),
                    t2i=ranks.t2i.astype(np.int32),
                    fold_sizes=ranks.fold_sizes,
                    captions_per_image=np.int64(CPI),
                    protocol=np.array("all"),
                )
            else:
                upload.write_bytes(ranks)
            child.log_file(upload)
            before = prehead_of(row, seed) if prehead_of else None
            if before is not None:
                child.log_final_metrics({f"prehead_test_{key}": value for key, value in rank_metrics(before).items()})
                saved = folder / "upload" / trial_id / PREHEAD_RANKS_ARTIFACT
                np.savez(
                    saved,
                    i2t=before.i2t.astype(np.int32),
                    t2i=before.t2i.astype(np.int32),
                    fold_sizes=before.fold_sizes,
                    captions_per_image=np.int64(CPI),
                    protocol=np.array("all"),
                )
                child.log_file(saved)
            child.end("FINISHED")
            for key, value in (
                ("trial", trial_id),
                ("status", "finished"),
                ("cooperative.strategy", row),
                ("seed", seed),
                ("test_rsum", metrics["rsum"]),
            ):
                table[key].append(value)
    summary = {
        "sweep": "tiny_sweep",
        "experiment": "dbl_synthetic_tiny",
        "objective": "max rsum",
        "seeds": list(SEEDS),
        "test_protocol": "all",
        "table_rows": ["cooperative.strategy"],
        "trial_counts": {"finished": 12},
        "trials": table,
        "report": {
            "title": "tiny_sweep: test results over seeds [0, 1, 2]",
            "header": ["cooperative.strategy", "rsum", "note"],
            "rows": [["A", "1", ""], ["B", "2", "best"], ["D", "3", ""], ["F", "3", ""], ["chance", "1-2", ""]],
            "row_kinds": ["baseline", "result", "result", "result", "chance"],
            "headline": "best row: B",
            "notes": ["Cells: mean", "The headline's interval: the paired one.", "Still learning: old rule."],
        },
        "comparisons": [{"row": "D", "reference": "B", "column": "test_rsum"}],
    }
    parent.log_dict(summary, "sweep/summary.json")
    parent.end("FINISHED")
    return uri, parent_id


def test_itrlab_report_writes_the_verdicts_and_the_evidence_beside_the_page(tmp_path, capsys):
    same = {s: query_ranks(300 + s, 0.5) for s in SEEDS}

    def ranks_of(row, seed):
        return same[seed] if row in "DF" else query_ranks(10 * "AB".index(row) + seed, 0.15 if row == "A" else 0.6)

    before = {s: query_ranks(700 + s, 0.9) for s in SEEDS}
    uri, parent = _store(tmp_path, ranks_of, lambda row, seed: before[seed] if row == "B" else None)
    out = tmp_path / "results"
    assert main(["report", parent, "--out", str(out), "--tracking-uri", uri]) == 0
    printed = capsys.readouterr().out
    (page,) = out.glob("*-tiny_sweep.md")
    text = page.read_text()
    assert f"evidence: {out / 'evidence' / page.with_suffix('.npz').name}" in printed
    results = text[text.index("## Results") : text.index("## Verdicts")]
    assert "**rsum against A (3 comparisons, on seeds + test images, Holm within the sweep): reproduced: B +" in text
    assert "| D = F | 3 |  |" in results and "| F |" not in results and "| B | 2 |  |" in results  # "best" dropped
    assert "The headline's interval" not in results and "Still learning: a row whose best validation rsum" in results
    verdicts = text[text.index("## Verdicts") : text.index("## Converged?")]
    assert "| B vs A | 3 |" in verdicts and "| D = F vs A | 3 |" in verdicts and "| D = F vs B | 3 |" in verdicts
    assert "D = F: identical to every digit" in verdicts and "| F vs A |" not in verdicts
    assert "| reproduced |" in verdicts
    evidence = read_evidence(out / "evidence" / page.with_suffix(".npz").name)
    assert evidence.identical == (("D", "F"),) and set(evidence.ranks("B")) == set(SEEDS)
    assert evidence.convergence["B"]["schedule"] == "" and evidence.trials[0].run_id
    assert evidence.values("B", "rsum", prehead=True) == pytest.approx(
        {s: rank_metrics(before[s])["rsum"] for s in SEEDS}
    )
    assert np.array_equal(evidence.ranks("B", prehead=True)[1].t2i, before[1].t2i)
    assert evidence.ranks("A", prehead=True) == {} and evidence.values("A", prehead=True) == {}

    def broken(row, seed):
        return b"not a zip" if (row, seed) == ("B", 1) else ranks_of(row, seed)

    uri, parent = _store(tmp_path / "broken", broken)
    refused = tmp_path / "refused"
    assert main(["report", parent, "--out", str(refused), "--tracking-uri", uri]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("itrlab: error: trial B1 (run ") and "test_ranks.npz: not a" in err[0]
    assert not list(refused.glob("*.md"))
