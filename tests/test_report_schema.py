"""``itrlab report`` reads ``sweep/summary.json`` only as far as it can check it.

Every tampered variant of the probe's classes (not JSON, empty, a list, non-UTF-8, NaN and Infinity, names
used in paths, rows as a string, missing keys, columns of unequal length, deep nesting, huge files and
descriptions, wrong types and ranges) is logged as a parent run's summary in a real MLflow store, and
``itrlab report`` answers each with one line on stderr and exit status 2, writing no page; the same
command on the untampered summary writes its page. A sweep still running, one that ended before its
report, a sweep's trial and ``--out ''`` get lines that say so.
"""

from __future__ import annotations

import copy
import json

import pytest

from itrlab.cli import main
from itrlab.report.summary_schema import MAX_BYTES, MAX_DEPTH

VALID = {
    "sweep": "dbl_tiny",
    "description": "DBL's strategies",
    "experiment": "dbl_synthetic_tiny",
    "objective": "max rsum",
    "seeds": [0, 1],
    "dataset": "synthetic_tiny",
    "test_protocol": "all",
    "grid": {"cooperative.strategy": ["A", "F"]},
    "table_rows": ["cooperative.strategy"],
    "trial_counts": {"finished": 3, "error": 1},
    "invocation_seconds": 95.2,
    "ranking": "ranked by rsum",
    "runs_table": "#/experiments/1?viewId=abc",
    "plots": ["sweep/plots/pivot_test_rsum.png"],
    "trials": {
        "rank": [1, 2],
        "trial": ["t1", "t2"],
        "status": ["finished", "error"],
        "cooperative.strategy": ["A", "F"],
        "rsum": [60.0, None],
        "reason": ["", "loss became nan"],
    },
    "data_shape": {
        "train_images": 200,
        "val_images": 50,
        "test_images": 50,
        "captions_per_image": 5,
        "regions": 6,
        "feature_dim": 32,
        "synthetic": True,
    },
    "report": {
        "title": "dbl_tiny: test results over seeds [0, 1]",
        "header": ["cooperative.strategy", "rsum", "rsum vs A", "note"],
        "rows": [["A", "84.4 ± 3.1", "baseline", ""], ["F", "68.8 (1 seed)", "-15.6 (1 seed)", "1 of 2 seeds"]],
        "row_kinds": ["baseline", "result"],
        "headline": "no row differs from A at 95% (1-2 seeds)",
        "notes": ["Cells: mean ± 95% Student-t interval"],
        "provenance": ["experiment dbl_synthetic_tiny"],
    },
    "headline": "no row differs from A at 95% (1-2 seeds)",
    "convergence": {
        "A": {"seeds": 2, "epochs": 4, "best_epoch": 3, "since": 3, "rise": -1.0, "spread": 2.0, "still_learning": ""}
    },
    "comparisons": [{"row": "F", "reference": "A", "column": "test_rsum", "difference": -15.6, "ci95": None}],
}


def changed(path: str, value) -> bytes:
    """The valid summary with the key at ``path`` (dotted; ``-`` removes it) set to ``value``, as JSON."""
    data = copy.deepcopy(VALID)
    *parents, last = path.split(".")
    node = data
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if value == "-":
        del node[last]
    elif isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return json.dumps(data, allow_nan=True).encode()


def nested(depth: int) -> bytes:
    return changed("description", None).replace(b'"description": null', b'"extra": ' + b"[" * depth + b"]" * depth)


TAMPERED = {
    # the file
    "not JSON": (b'{"sweep": "dbl_tiny",', "not JSON"),
    "empty": (b"", "the file is empty"),
    "blank": (b"  \n\t", "the file is empty"),
    "a list": (b"[1, 2, 3]", "holds a JSON list, not an object"),
    "a string": (b'"summary"', "holds a JSON str, not an object"),
    "non-UTF-8": (b'{"sweep": "dbl_\xff\xfetiny"}', "not UTF-8 text (byte 0xff at offset 15"),
    "NaN": (changed("invocation_seconds", float("nan")), "NaN is no JSON number"),
    "Infinity": (changed("trials.rsum", [float("inf"), 1.0]), "Infinity is no JSON number"),
    "-Infinity": (changed("convergence.A.rise", float("-inf")), "-Infinity is no JSON number"),
    "100,000-deep nesting": (nested(100_000), "nested too deeply to read"),
    "nesting past the limit": (nested(MAX_DEPTH + 3), f"nested more than {MAX_DEPTH} deep"),
    "huge file": (changed("extra", "x" * (MAX_BYTES + 10)), f"bytes; a summary is at most {MAX_BYTES:,} bytes"),
    "huge description": (changed("description", "d" * 60_000), "'description': got 'dddd"),
    # names used in paths
    "sweep holding ../": (changed("sweep", "../../escape"), "'sweep': got '../../escape'; the sweep's name"),
    "sweep holding /": (changed("sweep", "a/b"), "no path"),
    "sweep starting with a dot": (changed("sweep", ".hidden"), "'sweep': got '.hidden'"),
    "a plot outside sweep/plots": (changed("plots", ["sweep/plots/../../etc/passwd.png"]), "'plots[0]'"),
    # types, keys, ranges, sizes
    "sweep a number": (changed("sweep", 5), "'sweep': got 5"),
    "sweep missing": (changed("sweep", "-"), "'sweep': got None"),
    "trials missing": (changed("trials", "-"), "'trials': got None; a mapping"),
    "trials a list": (changed("trials", [1, 2]), "'trials': got [1, 2]; a mapping"),
    "rows as a string": (changed("report.rows", "A | 84.4"), "'report.rows': got 'A | 84.4'; a list"),
    "a row short of the header": (changed("report.rows.1", ["F", "68.8"]), "'report.rows[1]': got '2 cells'"),
    "columns of unequal length": (
        changed("trials.status", ["finished"]),
        "'trials.status': got '1 rows'; columns of one length",
    ),
    "a cell that is a mapping": (changed("trials.rsum", [{"x": 1}, None]), "'trials.rsum[0]'"),
    "a negative trial count": (changed("trial_counts.finished", -3), "'trial_counts.finished': got -3"),
    "a count as a string": (changed("trial_counts.error", "1"), "'trial_counts.error': got '1'"),
    "seeds not a list": (changed("seeds", "0,1"), "'seeds': got '0,1'"),
    "a negative seed": (changed("seeds", [0, -1]), "'seeds[1]': got -1"),
    "negative seconds": (changed("invocation_seconds", -5), "'invocation_seconds': got -5"),
    "headline a number": (changed("report.headline", 3), "'report.headline': got 3"),
    "an unknown row kind": (changed("report.row_kinds", ["baseline", "script"]), "'report.row_kinds'"),
    "a shape of strings": (changed("data_shape.test_images", "50"), "'data_shape.test_images': got '50'"),
    "an epoch below zero": (changed("convergence.A.epochs", -1), "'convergence.A.epochs': got -1"),
    "a link with a backtick": (changed("runs_table", "#/x`<script>`"), "'runs_table'"),
    "a key holding a newline": (changed("trial_counts", {"fin\nished": -1}), "'trial_counts.fin␊ished': got -1"),
}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A SQLite MLflow store with one finished sweep parent run per summary (the valid one and each variant),
    one running parent run and one killed one (neither wrote a summary), and a trial of the valid one."""
    from itrlab.tracking import SWEEP_TAG, MlflowTracker

    folder = tmp_path_factory.mktemp("summaries")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    tracker = MlflowTracker("dbl_tiny", uri)
    runs = {}
    for name, payload in {"valid": json.dumps(VALID).encode(), **{k: v[0] for k, v in TAMPERED.items()}}.items():
        runs[name] = tracker.start(run_name=name, tags={SWEEP_TAG: "dbl_tiny"}, params={})
        source = folder / "upload" / name.replace(" ", "_").replace("/", "_") / "summary.json"
        source.parent.mkdir(parents=True)
        source.write_bytes(payload)
        tracker.log_file(source, "sweep")
        tracker.end("FINISHED")
        source.unlink()
    runs["running"] = tracker.start(run_name="running", tags={SWEEP_TAG: "dbl_tiny"}, params={})
    runs["killed"] = MlflowTracker("dbl_tiny", uri).start(run_name="killed", tags={SWEEP_TAG: "dbl_tiny"}, params={})
    tracker.end_run(runs["killed"], "KILLED")
    runs["trial"] = MlflowTracker("dbl_tiny", uri).start(
        run_name="trial", tags={SWEEP_TAG: "dbl_tiny"}, params={}, parent_run_id=runs["valid"]
    )
    tracker.end_run(runs["trial"], "FINISHED")
    return folder, uri, runs


def report(store, name: str, out: str, capsys) -> tuple[int, list[str]]:
    folder, uri, runs = store
    status = main(["report", runs[name], "--out", out, "--tracking-uri", uri])
    return status, capsys.readouterr().err.strip().splitlines()


def test_the_untampered_summary_writes_its_page(store, capsys):
    folder = store[0]
    status, err = report(store, "valid", str(folder / "valid"), capsys)
    assert status == 0 and err == []
    (page,) = (folder / "valid").glob("*-dbl_tiny.md")
    assert "| A | 84.4 ± 3.1 | baseline |  |" in page.read_text()


@pytest.mark.parametrize("name", list(TAMPERED))
def test_a_tampered_summary_is_one_line_and_exit_2_and_no_page(store, name, capsys):
    out = store[0] / "pages" / name.replace(" ", "_").replace("/", "_")
    status, err = report(store, name, str(out), capsys)
    assert status == 2 and len(err) == 1, err
    assert err[0].startswith(f"itrlab: error: run {store[2][name]}: sweep/summary.json: ") and len(err[0]) < 500, err
    assert TAMPERED[name][1] in err[0], err
    assert not out.exists() or not any(out.rglob("*"))  # nothing written


def test_a_running_or_unfinished_sweep_and_an_empty_out_are_named(store, capsys):
    folder, _, runs = store
    status, err = report(store, "running", str(folder / "running"), capsys)
    assert status == 2 and err == [
        f"itrlab: error: run {runs['running']} is the parent run of sweep 'dbl_tiny', still "
        f"running: its results (sweep/summary.json) are written when it ends; report it "
        f"then"
    ]
    status, err = report(store, "killed", str(folder / "killed"), capsys)
    assert status == 2 and len(err) == 1 and "ended KILLED before it wrote its results" in err[0]
    status, err = report(store, "trial", str(folder / "trial"), capsys)
    assert status == 2 and err == [
        f"itrlab: error: run {runs['trial']} is not a sweep's parent run: it is a trial of "
        f"sweep 'dbl_tiny'; give its parent run {runs['valid']}"
    ]
    status, err = report(store, "valid", "", capsys)
    assert status == 2 and err == [
        "itrlab: error: --out: got an empty path; give the folder of the page (default: docs/results)"
    ]
    status, err = report(store, "valid", "  ", capsys)
    assert status == 2 and "--out: got an empty path" in err[0]


def test_every_mutation_of_the_valid_summary_is_refused_in_one_line_or_rendered():
    """3,000 seeded mutations (1 to 3 keys anywhere set to another type or value, or removed): the check
    refuses each with a SummaryError of one line, or the page renders it; nothing else is raised."""
    import random

    from itrlab.report.diagnostics import diagnostics
    from itrlab.report.results_page import render
    from itrlab.report.summary_schema import SummaryError, check_summary

    values = [
        None,
        0,
        -1,
        1.5,
        True,
        "",
        "x",
        "../x",
        [],
        {},
        [1],
        {"a": 1},
        ["a"],
        [["a"]],
        "a\nb",
        10**12,
        [None],
        {"": []},
    ]

    def paths(node, path=()):
        children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for key, child in children:
            yield (*path, key)
            yield from paths(child, (*path, key))

    keys = list(paths(VALID))
    run = {"run_id": "abc", "experiment": "e", "status": "FINISHED", "start_time": 0, "end_time": 1000, "tags": {}}
    runs = {
        trial: {"history": {"loss": [(1, 2.0), (2, 1.0)], "loss_i2t": [(1, 1.0), (2, 0.5)]}} for trial in ("t1", "t2")
    }
    rng, refused, rendered = random.Random(0), 0, 0
    for _ in range(3000):
        data = copy.deepcopy(VALID)
        for _ in range(rng.randint(1, 3)):
            *parents, last = rng.choice(keys)
            node = data
            for key in parents:
                node = (
                    node[key]
                    if isinstance(node, dict)
                    and key in node
                    or isinstance(node, list)
                    and isinstance(key, int)
                    and key < len(node)
                    else None
                )
                if node is None:
                    break
            if isinstance(node, dict) and rng.random() < 0.2:
                node.pop(last, None)
            elif isinstance(node, dict) or isinstance(node, list) and isinstance(last, int) and last < len(node):
                node[last] = copy.deepcopy(rng.choice(values))
        try:
            summary = check_summary(data, "summary.json")
        except SummaryError as err:
            assert "\n" not in str(err)
            refused += 1
            continue
        render(summary, run, {}, diagnostics(summary, runs))
        rendered += 1
    assert refused > 1000 and rendered > 300  # both sides exercised
