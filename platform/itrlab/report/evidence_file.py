"""The evidence file: :class:`~itrlab.report.evidence.Evidence` written beside a results page
(``evidence/<page stem>.npz``) and read back, checked, by tools that have no MLflow (the claims board).

**Format** :data:`FORMAT`, version :data:`VERSION`: one compressed NumPy archive (``np.savez_compressed``,
read with ``allow_pickle=False``):

* ``meta``: a 0-d unicode array holding one JSON object: ``format``, ``version``; ``sweep``, ``profile`` (null: the
  default), ``command_overrides`` (what the sweep's command line added to its preset and profile; null: not
  readable at its run; absent in files written before it: none), ``run_id`` (the sweep's parent run),
  ``experiment``, ``test_protocol``; ``metric`` (what the rows are compared by, ``rsum``) and ``mode`` (``max`` or
  ``min``); ``rows`` (the table's row labels in order), ``baseline`` (one of them, or null), ``pairs`` (``[[row,
  reference], ...]``, the sweep's ``table.compare`` and ``table.steps``) and ``steps`` (those of ``table.steps``;
  absent: none); ``paper`` (its published table, or null); ``trials``, one object per trial: ``trial``, ``run_id``,
  ``row``, ``seed`` (null: none), ``status``, ``metrics`` (``test_*`` -> number or null), ``curve`` (``[[epoch,
  validation rsum], ...]``), ``best_epoch``, ``decay_epochs`` (``train.lr_decay_epochs``, or the one decay it chose
  on validation), ``decay_choices`` (what it chose among, ``train.lr_decay_choices``; absent or ``[]``: a fixed
  schedule), ``collapse`` (why its training failed to leave its plateau or collapsed, ``""``: it did not;
  :mod:`itrlab.report.verdict`) and ``ranks`` (null, or ``{"captions_per_image": c, "protocol": p}``) and, for a
  trial that also read its model before the projection head, ``prehead_ranks`` (the same; absent or null: none);
  and what the report derived: ``convergence`` (row -> :meth:`Convergence.to_dict
  <itrlab.report.convergence.Convergence.to_dict>`) and ``identical`` (groups of identical rows);
* for the ``k``-th trial with ranks: ``t<k>_i2t`` and ``t<k>_t2i`` (int16 where every rank fits, else
  int32) and ``t<k>_fold_sizes`` (int64): its test ranks (:mod:`itrlab.report.bootstrap`); with
  ``prehead_ranks``, ``t<k>_prehead_i2t``, ``t<k>_prehead_t2i`` and ``t<k>_prehead_fold_sizes`` alike.

:func:`read_evidence` checks every field's type and range, that the rows, pairs and trials agree, that every
trial's ranks fit its folds and that the archive holds nothing else; a file that fails is one line
(:class:`~itrlab.report.evidence.EvidenceError`, exit status 2).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from itrlab.eval.names import METRIC_NAMES
from itrlab.eval.rank_file import QueryRanks
from itrlab.files import atomic_write_bytes
from itrlab.report.evidence import Evidence, EvidenceError, TrialEvidence, query_ranks
from itrlab.report.summary_schema import NAME, FileCheck, depth, parse_json

FORMAT, VERSION = "itrlab.evidence", 1
MAX_BYTES = 256 * 2**20
MAX_TRIALS = 100_000


def _ranks(ranks: QueryRanks | None, stem: str, arrays: dict[str, np.ndarray]) -> dict[str, Any] | None:
    """``ranks`` as the arrays ``<stem>_i2t``, ``<stem>_t2i``, ``<stem>_fold_sizes`` put in ``arrays``, and the
    trial's field that describes them (None: no ranks)."""
    if ranks is None:
        return None
    fits = max(int(np.max(ranks.i2t, initial=0)), int(np.max(ranks.t2i, initial=0))) < 2**15
    dtype = np.int16 if fits else np.int32
    arrays[f"{stem}_i2t"], arrays[f"{stem}_t2i"] = ranks.i2t.astype(dtype), ranks.t2i.astype(dtype)
    arrays[f"{stem}_fold_sizes"] = np.asarray(ranks.fold_sizes, dtype=np.int64)
    return {"captions_per_image": int(ranks.captions_per_image), "protocol": str(ranks.protocol)}


def _meta(evidence: Evidence) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    arrays: dict[str, np.ndarray] = {}
    trials = []
    for k, t in enumerate(evidence.trials):
        ranks = _ranks(t.ranks, f"t{k}", arrays)
        prehead = _ranks(t.prehead_ranks, f"t{k}_prehead", arrays)
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
                "decay_choices": list(t.decay_choices),
                "collapse": t.collapse,
                "ranks": ranks,
                **({"prehead_ranks": prehead} if prehead is not None else {}),
            }
        )
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "sweep": evidence.sweep,
        "profile": evidence.profile,
        "command_overrides": None if evidence.command_overrides is None else list(evidence.command_overrides),
        "run_id": evidence.run_id,
        "experiment": evidence.experiment,
        "test_protocol": evidence.test_protocol,
        "metric": evidence.metric,
        "mode": evidence.mode,
        "rows": list(evidence.rows),
        "baseline": evidence.baseline,
        "pairs": [list(pair) for pair in evidence.pairs],
        "steps": [list(pair) for pair in evidence.steps],
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
    steps = check.listing(meta.get("steps", []), "steps")
    for i, pair in enumerate(steps):
        if pair not in pairs:
            raise check.fail(f"steps[{i}]", pair, "one of the pairs")
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
        trial, names = _read_trial(check, raw, k, rows, arrays)
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
        tuple(tuple(pair) for pair in steps),
        _read_command_overrides(check, meta),
    )


def _read_command_overrides(check: FileCheck, meta: dict) -> tuple[str, ...] | None:
    """``command_overrides``: a list of override texts, null (not readable at its run), or absent (a file written
    before the field: the sweep as declared)."""
    if "command_overrides" not in meta:
        return ()
    if meta["command_overrides"] is None:
        return None
    return tuple(check.texts(meta["command_overrides"], "command_overrides"))


def _read_trial(check: FileCheck, raw: Any, k: int, rows: list[str], arrays: dict) -> tuple[TrialEvidence, set[str]]:
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
        check.numeric(value, f"{where}.metrics.{key}")
    curve = check.listing(raw.get("curve", []), f"{where}.curve")
    for i, point in enumerate(curve):
        if not isinstance(point, list) or len(point) != 2:
            raise check.fail(f"{where}.curve[{i}]", point, "[epoch, validation rsum]")
        check.count(point[0], f"{where}.curve[{i}][0]")
        check.numeric(point[1], f"{where}.curve[{i}][1]", nullable=False)
    decays = check.listing(raw.get("decay_epochs", []), f"{where}.decay_epochs", 100)
    for i, epoch in enumerate(decays):
        check.count(epoch, f"{where}.decay_epochs[{i}]")
    choices = check.listing(raw.get("decay_choices", []), f"{where}.decay_choices", 100)
    for i, epoch in enumerate(choices):
        check.count(epoch, f"{where}.decay_choices[{i}]")
    ranks, names = _read_ranks(check, raw.get("ranks"), f"{where}.ranks", f"t{k}", arrays)
    prehead, prehead_names = _read_ranks(
        check, raw.get("prehead_ranks"), f"{where}.prehead_ranks", f"t{k}_prehead", arrays
    )
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
        prehead,
        tuple(choices),
    )
    return trial, names | prehead_names


def _read_ranks(check: FileCheck, info: Any, where: str, stem: str, arrays: dict) -> tuple[QueryRanks | None, set[str]]:
    """A trial's ranks described by ``info`` (None: none) from the arrays ``<stem>_*``, checked; the names of
    the arrays they took."""
    if info is None:
        return None, set()
    info = check.mapping(info, where, 4)
    cpi = check.count(info.get("captions_per_image"), f"{where}.captions_per_image", 1000)
    check.string(info, "protocol", 100, required=True, inside=where)
    names = {f"{stem}_i2t", f"{stem}_t2i", f"{stem}_fold_sizes"}
    missing = sorted(names - set(arrays))
    if missing:
        raise check.fail(where, missing, "the trial's arrays in the archive")
    ranks = query_ranks(
        info["protocol"],
        cpi,
        arrays[f"{stem}_fold_sizes"],
        arrays[f"{stem}_i2t"],
        arrays[f"{stem}_t2i"],
        f"{check.where}: {where}",
    )
    return ranks, names
