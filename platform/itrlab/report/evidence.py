"""A sweep's evidence: what its verdicts are computed from, collected from MLflow once and kept in one file
that later tools (the claims board) read without MLflow.

``itrlab report`` collects it (:func:`collect_evidence`: the checked ``sweep/summary.json``, each trial's run
and its ``test_ranks.npz``), judges it (:mod:`itrlab.report.findings`) and writes it beside the page as
``evidence/<page stem>.npz`` (:func:`write_evidence`); :func:`read_evidence` reads it back, checked.

**Format** :data:`FORMAT`, version :data:`VERSION`: one compressed NumPy archive (``np.savez_compressed``,
read with ``allow_pickle=False``):

* ``meta``: a 0-d unicode array holding one JSON object: ``format``, ``version``; ``sweep``, ``profile``
  (null: the default), ``run_id`` (the sweep's parent run), ``experiment``, ``test_protocol``; ``metric``
  (what the rows are compared by, ``rsum``) and ``mode`` (``max`` or ``min``); ``rows`` (the table's row
  labels in order), ``baseline`` (one of them, or null) and ``pairs`` (``[[row, reference], ...]``, the
  sweep's ``table.compare``); ``paper`` (its published table, or null); ``trials``, one object per trial:
  ``trial``, ``run_id``, ``row``, ``seed`` (null: none), ``status``, ``metrics`` (``test_*`` -> number or
  null), ``curve`` (``[[epoch, validation rsum], ...]``), ``best_epoch``, ``decay_epochs``
  (``train.lr_decay_epochs``), ``collapse`` (why its training failed to leave its plateau or collapsed,
  ``""``: it did not; :mod:`itrlab.report.verdict`) and ``ranks`` (null, or ``{"captions_per_image": c,
  "protocol": p}``); and what the report derived: ``convergence`` (row -> :meth:`Convergence.to_dict
  <itrlab.report.convergence.Convergence.to_dict>`) and ``identical`` (groups of identical rows);
* for the ``k``-th trial with ranks: ``t<k>_i2t`` and ``t<k>_t2i`` (int16 where every rank fits, else
  int32) and ``t<k>_fold_sizes`` (int64): its test ranks (:mod:`itrlab.report.bootstrap`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from itrlab.config.sweep import row_label
from itrlab.errors import UserInputError
from itrlab.eval.names import METRIC_NAMES
from itrlab.files import atomic_write_bytes
from itrlab.report.bootstrap import check_ranks
from itrlab.report.convergence import decay_epochs
from itrlab.report.diagnostics import TOTAL, row_keys, warmup_epochs
from itrlab.report.summary_schema import NAME, FileCheck, depth, parse_json
from itrlab.report.verdict import at_collapse_plateau, collapse_plateau, collapsed, on_plateau

FORMAT, VERSION = "itrlab.evidence", 1
RANKS_ARTIFACT = "test_ranks.npz"  # a trial's per-query test ranks, at its run's artifact root
TEST_METRICS = tuple(f"test_{name}" for name in METRIC_NAMES.values())
MAX_BYTES = 256 * 2**20
MAX_TRIALS = 100_000


class EvidenceError(UserInputError):
    """An evidence file (or a trial's ranks) that fails its check: one line, exit status 2."""


@dataclass(frozen=True, eq=False)
class QueryRanks:
    """A trial's per-query test ranks (``test_ranks.npz``: :mod:`itrlab.report.bootstrap` says what each holds)."""

    i2t: np.ndarray
    t2i: np.ndarray
    fold_sizes: np.ndarray
    captions_per_image: int
    protocol: str


def load_test_ranks(path: Path, where: str) -> QueryRanks:
    """A trial's ``test_ranks.npz`` (``where`` names it in messages), checked; an EvidenceError else."""
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: data[key] for key in ("i2t", "t2i", "fold_sizes", "captions_per_image", "protocol")}
    except (OSError, ValueError, KeyError, EOFError) as err:
        raise EvidenceError(
            f"{where}: not a test-ranks archive ({err}); a trial writes i2t, t2i, fold_sizes, captions_per_image "
            f"and protocol there"
        ) from None
    ranks = QueryRanks(
        arrays["i2t"], arrays["t2i"], arrays["fold_sizes"], int(arrays["captions_per_image"]), str(arrays["protocol"])
    )
    _check_ranks(ranks, where)
    return ranks


def _check_ranks(ranks: QueryRanks, where: str) -> None:
    for name in ("i2t", "t2i", "fold_sizes"):
        if not np.issubdtype(getattr(ranks, name).dtype, np.integer):
            raise EvidenceError(f"{where}: {name} holds {getattr(ranks, name).dtype}; ranks are integers")
    try:
        folds, cpi = check_ranks(ranks)
    except ValueError as err:
        raise EvidenceError(f"{where}: {err}") from None
    sizes = np.repeat(folds, folds)  # per image: its fold's size
    if np.any(ranks.i2t < 0) or np.any(ranks.t2i < 0) or np.any(ranks.i2t > cpi * (sizes - 1)):
        raise EvidenceError(f"{where}: i2t ranks outside 0 to {cpi} x (fold size - 1), or a negative t2i rank")
    if np.any(ranks.t2i.reshape(-1, cpi) > (sizes - 1)[:, None]):
        raise EvidenceError(f"{where}: t2i ranks past their fold's images")


@dataclass(frozen=True)
class TrialEvidence:
    """One trial of the sweep (see the module doc's ``trials``)."""

    trial: str
    run_id: str
    row: str
    seed: int | None
    status: str
    metrics: dict[str, float | None]
    curve: tuple[tuple[int, float], ...] = ()
    best_epoch: int | None = None
    decay_epochs: tuple[int, ...] = ()
    collapse: str = ""
    ranks: QueryRanks | None = None

    @property
    def finished(self) -> bool:
        return self.status == "finished"


@dataclass(frozen=True)
class Evidence:
    """A sweep's evidence (see the module doc)."""

    sweep: str
    profile: str | None
    run_id: str
    experiment: str
    test_protocol: str
    metric: str
    mode: str
    rows: tuple[str, ...]
    baseline: str | None
    pairs: tuple[tuple[str, str], ...]
    paper: str | None
    trials: tuple[TrialEvidence, ...]
    convergence: dict[str, dict[str, Any]] = field(default_factory=dict)
    identical: tuple[tuple[str, ...], ...] = ()

    def finished(self, row: str) -> list[TrialEvidence]:
        """The finished trials of ``row`` that have a seed."""
        return [t for t in self.trials if t.row == row and t.finished and t.seed is not None]

    def values(self, row: str, metric: str | None = None) -> dict[int, float]:
        """Seed -> the test value of ``metric`` (default: the sweep's, ``test_<metric>``) of ``row``'s finished
        trials that have one."""
        column = f"test_{metric or self.metric}"
        found = {t.seed: t.metrics.get(column) for t in self.finished(row)}
        return {seed: float(value) for seed, value in found.items() if _finite(value)}

    def ranks(self, row: str) -> dict[int, QueryRanks]:
        """Seed -> the test ranks of ``row``'s finished trials that logged them."""
        return {t.seed: t.ranks for t in self.finished(row) if t.ranks is not None}

    def missing_ranks(self) -> list[str]:
        """The finished trials without test ranks."""
        return [t.trial for t in self.trials if t.finished and t.ranks is None]


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _int(value) -> int | None:
    return int(value) if _finite(value) and float(value).is_integer() else None


def collect_evidence(
    summary: Mapping[str, Any],
    run: Mapping[str, Any],
    runs: Mapping[str, Mapping[str, Any]],
    ranks: Mapping[str, QueryRanks],
    profile: str | None = None,
) -> Evidence:
    """The evidence of a sweep from its checked ``summary`` (:func:`itrlab.report.summary_schema.read_summary`),
    its parent ``run``'s record, its trials' ``runs`` (:meth:`~itrlab.tracking.MlflowTracker.trial_runs`: trial
    id -> metrics, params, history) and the ``ranks`` they logged (trial id -> :class:`QueryRanks`)."""
    trials_table, keys = summary.get("trials") or {}, row_keys(summary)
    report = summary.get("report") or {}
    kinds = report.get("row_kinds") or ["result"] * len(report.get("rows", []))
    rows = [cells[0] for cells, kind in zip(report.get("rows", []), kinds) if kind in ("result", "baseline")]
    baseline = next((cells[0] for cells, kind in zip(report.get("rows", []), kinds) if kind == "baseline"), None)
    mode, _, metric = str(summary.get("objective", "max rsum")).partition(" ")
    columns = {pair.get("column") for pair in summary.get("comparisons") or []} - {None}
    metric = next(iter(columns)).removeprefix("test_") if len(columns) == 1 else metric
    if f"test_{metric}" not in TEST_METRICS:
        metric, mode = "rsum", "max"  # an objective with no test counterpart (the loss): rows compare by rsum
    found = []
    for i, trial in enumerate(trials_table.get("trial", [])):
        label = row_label([trials_table[key][i] for key in keys]) if all(k in trials_table for k in keys) else trial
        if label not in rows:
            rows.append(label)
        trial_run = runs.get(trial) or {}
        params, history = trial_run.get("params") or {}, trial_run.get("history") or {}
        metrics = {key: trials_table[key][i] for key in TEST_METRICS if key in trials_table}
        metrics.update({key: value for key, value in (trial_run.get("metrics") or {}).items() if key in TEST_METRICS})
        seed = trials_table.get("seed", [None] * (i + 1))[i]
        status = trials_table["status"][i]
        loss = sorted(history.get(TOTAL) or [])
        failures = [
            on_plateau(history, warmup_epochs({"params": params})),
            at_collapse_plateau(float(loss[-1][1]) if loss else None, collapse_plateau(params)),
            collapsed(metrics.get("test_md")),
        ]
        found.append(
            TrialEvidence(
                trial,
                str(trial_run.get("run_id", "")),
                label,
                _int(seed),
                status,
                {key: float(value) if _finite(value) else None for key, value in metrics.items()},
                tuple((int(e), float(v)) for e, v in history.get("rsum") or [] if _finite(v)),
                _int(
                    (trial_run.get("metrics") or {}).get(
                        "best_epoch", trials_table.get("best_epoch", [None] * (i + 1))[i]
                    )
                ),
                decay_epochs(params),
                next((why for why in failures if why), "") if status == "finished" else "",
                ranks.get(trial),
            )
        )
    pairs = tuple((str(p["row"]), str(p["reference"])) for p in summary.get("comparisons") or [] if "row" in p)
    return Evidence(
        str(summary["sweep"]),
        profile,
        str(run.get("run_id", "")),
        str(summary.get("experiment", "")),
        str(summary.get("test_protocol") or ""),
        metric,
        mode if mode in ("max", "min") else "max",
        tuple(rows),
        baseline,
        pairs,
        summary.get("table_paper"),
        tuple(found),
    )


def _meta(evidence: Evidence) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    arrays: dict[str, np.ndarray] = {}
    trials = []
    for k, t in enumerate(evidence.trials):
        ranks = None
        if t.ranks is not None:
            r = t.ranks
            fits = max(int(np.max(r.i2t, initial=0)), int(np.max(r.t2i, initial=0))) < 2**15
            dtype = np.int16 if fits else np.int32
            arrays[f"t{k}_i2t"], arrays[f"t{k}_t2i"] = r.i2t.astype(dtype), r.t2i.astype(dtype)
            arrays[f"t{k}_fold_sizes"] = np.asarray(r.fold_sizes, dtype=np.int64)
            ranks = {"captions_per_image": int(r.captions_per_image), "protocol": str(r.protocol)}
        trials.append(
            {
                "trial": t.trial,
                "run_id": t.run_id,
                "row": t.row,
                "seed": t.seed,
                "status": t.status,
                "metrics": t.metrics,
                "curve": [list(point) for point in t.curve],
                "best_epoch": t.best_epoch,
                "decay_epochs": list(t.decay_epochs),
                "collapse": t.collapse,
                "ranks": ranks,
            }
        )
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "sweep": evidence.sweep,
        "profile": evidence.profile,
        "run_id": evidence.run_id,
        "experiment": evidence.experiment,
        "test_protocol": evidence.test_protocol,
        "metric": evidence.metric,
        "mode": evidence.mode,
        "rows": list(evidence.rows),
        "baseline": evidence.baseline,
        "pairs": [list(pair) for pair in evidence.pairs],
        "paper": evidence.paper,
        "trials": trials,
        "convergence": evidence.convergence,
        "identical": [list(group) for group in evidence.identical],
    }
    return meta, arrays


def write_evidence(evidence: Evidence, path: Path) -> Path:
    """``evidence`` written to ``path`` (the module doc's format), atomically; its folder made."""
    meta, arrays = _meta(evidence)
    text = json.dumps(meta, allow_nan=False, separators=(",", ":"))
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, lambda f: np.savez_compressed(f, meta=np.array(text), **arrays))
    return path


def read_evidence(path: str | Path) -> Evidence:
    """The evidence file at ``path``, checked against the module doc's format; an EvidenceError (one line, exit
    status 2) for a file that is not one, of another version, or whose fields or ranks do not fit together."""
    path = Path(path)
    where = f"evidence {path}"
    check = FileCheck(where, EvidenceError)
    if not path.is_file():
        raise EvidenceError(f"{where}: no such file; `itrlab report RUN_ID` writes it beside the results page")
    if path.stat().st_size > MAX_BYTES:
        raise EvidenceError(f"{where}: {path.stat().st_size:,} bytes; an evidence file is at most {MAX_BYTES:,}")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
    except (OSError, ValueError, EOFError) as err:
        raise EvidenceError(f"{where}: not a NumPy archive without objects ({err})") from None
    text = arrays.pop("meta", None)
    if text is None or text.shape != () or text.dtype.kind != "U":
        raise EvidenceError(f"{where}: no 'meta' text; an evidence file holds its fields as JSON in 'meta'")
    meta = check.mapping(parse_json(str(text).encode("utf-8"), check), "meta", 100)
    if depth(meta) > 6:
        raise EvidenceError(f"{where}: 'meta' nests more than 6 deep")
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise check.fail("format", [meta.get("format"), meta.get("version")], f"{FORMAT!r} version {VERSION}")
    return _evidence(check, meta, arrays)


def _evidence(check: FileCheck, meta: dict, arrays: dict[str, np.ndarray]) -> Evidence:
    check.string(meta, "sweep", 128, required=True, pattern=NAME, meaning="the sweep's name")
    check.string(meta, "profile", 128, pattern=NAME, meaning="a profile's name")
    for key in ("run_id", "experiment", "test_protocol", "paper"):
        check.string(meta, key)
    if meta.get("metric") not in METRIC_NAMES.values() or meta.get("mode") not in ("max", "min"):
        raise check.fail("metric", [meta.get("metric"), meta.get("mode")], "a recall table's metric and max or min")
    rows = check.texts(meta.get("rows"), "rows")
    if meta.get("baseline") is not None and meta["baseline"] not in rows:
        raise check.fail("baseline", meta["baseline"], "one of the rows, or null")
    pairs = check.listing(meta.get("pairs"), "pairs")
    for i, pair in enumerate(pairs):
        if not isinstance(pair, list) or len(pair) != 2 or any(p not in rows for p in pair):
            raise check.fail(f"pairs[{i}]", pair, "[row, reference], both among the rows")
    identical = check.listing(meta.get("identical", []), "identical")
    for i, group in enumerate(identical):
        if not isinstance(group, list) or len(group) < 2 or any(r not in rows for r in group):
            raise check.fail(f"identical[{i}]", group, "two rows or more among the rows")
    convergence = check.mapping(meta.get("convergence", {}), "convergence")
    for row, found in convergence.items():
        if row not in rows or not isinstance(found, dict):
            raise check.fail(f"convergence.{row}", found, "a row's convergence (a mapping)")
    trials, used = [], set()
    for k, raw in enumerate(check.listing(meta.get("trials"), "trials", MAX_TRIALS)):
        trial, names = _trial(check, raw, k, rows, arrays)
        trials.append(trial)
        used |= names
    extra = sorted(set(arrays) - used)
    if extra:
        raise check.fail("arrays", extra[:5], "the ranks of the trials 'meta' lists, nothing else")
    return Evidence(
        meta["sweep"],
        meta.get("profile"),
        meta.get("run_id") or "",
        meta.get("experiment") or "",
        meta.get("test_protocol") or "",
        meta["metric"],
        meta["mode"],
        tuple(rows),
        meta.get("baseline"),
        tuple(tuple(pair) for pair in pairs),
        meta.get("paper"),
        tuple(trials),
        convergence,
        tuple(tuple(group) for group in identical),
    )


def _trial(check: FileCheck, raw: Any, k: int, rows: list[str], arrays: dict) -> tuple[TrialEvidence, set[str]]:
    where = f"trials[{k}]"
    raw = check.mapping(raw, where, 20)
    for key in ("trial", "row", "status"):
        check.string(raw, key, required=True, inside=where)
    check.string(raw, "run_id", inside=where)
    check.string(raw, "collapse", inside=where)
    if raw["row"] not in rows:
        raise check.fail(f"{where}.row", raw["row"], "one of the rows")
    for key in ("seed", "best_epoch"):
        if raw.get(key) is not None:
            check.count(raw[key], f"{where}.{key}")
    metrics = check.mapping(raw.get("metrics", {}), f"{where}.metrics", 100)
    for key, value in metrics.items():
        check.number(value, f"{where}.metrics.{key}")
    curve = check.listing(raw.get("curve", []), f"{where}.curve")
    for i, point in enumerate(curve):
        if not isinstance(point, list) or len(point) != 2:
            raise check.fail(f"{where}.curve[{i}]", point, "[epoch, validation rsum]")
        check.count(point[0], f"{where}.curve[{i}][0]")
        check.number(point[1], f"{where}.curve[{i}][1]", nullable=False)
    decays = check.listing(raw.get("decay_epochs", []), f"{where}.decay_epochs", 100)
    for i, epoch in enumerate(decays):
        check.count(epoch, f"{where}.decay_epochs[{i}]")
    ranks, names = None, set()
    if raw.get("ranks") is not None:
        info = check.mapping(raw["ranks"], f"{where}.ranks", 4)
        cpi = check.count(info.get("captions_per_image"), f"{where}.ranks.captions_per_image", 1000)
        check.string(info, "protocol", 100, required=True, inside=f"{where}.ranks")
        names = {f"t{k}_i2t", f"t{k}_t2i", f"t{k}_fold_sizes"}
        missing = sorted(names - set(arrays))
        if missing:
            raise check.fail(f"{where}.ranks", missing, "the trial's arrays in the archive")
        ranks = QueryRanks(arrays[f"t{k}_i2t"], arrays[f"t{k}_t2i"], arrays[f"t{k}_fold_sizes"], cpi, info["protocol"])
        _check_ranks(ranks, f"{check.where}: {where}.ranks")
    trial = TrialEvidence(
        raw["trial"],
        raw.get("run_id") or "",
        raw["row"],
        raw.get("seed"),
        raw["status"],
        {key: None if value is None else float(value) for key, value in metrics.items()},
        tuple((int(e), float(v)) for e, v in curve),
        raw.get("best_epoch"),
        tuple(decays),
        raw.get("collapse") or "",
        ranks,
    )
    return trial, names


def with_findings(evidence: Evidence, convergence: Mapping[str, Any], identical) -> Evidence:
    """``evidence`` with what the report derived from it: per row its convergence, the groups of identical rows."""
    return replace(
        evidence,
        convergence={row: found.to_dict() for row, found in convergence.items()},
        identical=tuple(tuple(group) for group in identical),
    )
