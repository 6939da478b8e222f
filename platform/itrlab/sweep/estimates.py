"""One estimate of a sweep's cost, the one ``--dry-run``, ``--list`` and the docs quote, kept per code version.

:func:`work_out` prices a sweep (:mod:`itrlab.sweep.cost`) as one :class:`Figure` per group size, whose
:meth:`Figure.text` both commands print; an estimate that cannot be made is a sentence saying why.
:func:`sweep_estimate` keeps each in ``estimates.json`` beside the throughput record, keyed by the digests of
itrlab's source and ``configs/``, the record, torch's version and the resolved sweep, with a fingerprint of the
data folders checked on every use: ``--list`` answers from it in about a second without importing torch.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from itrlab.config.loader import config_dir
from itrlab.config.sweep import SweepSpec
from itrlab.files import atomic_write_json

CACHE_NAME = "estimates.json"
CACHE_ENV = "ITRLAB_ESTIMATES"  # or this file
SOURCE_ROOT = Path(__file__).resolve().parents[1]  # platform/itrlab


@dataclass(frozen=True)
class Figure:
    """The cost of a sweep at one group size G: wall time at its concurrency, device-hours, and where the
    figures came from; or, with ``seconds`` None, why there is none (``reason``: one sentence)."""

    group: int
    seconds: float | None  # wall seconds of training, at the sweep's concurrency
    device_hours: float | None
    unit: str  # CPU or GPU
    source: str  # "measured on ...; estimated, not measured (...)"
    measured: bool
    estimated: bool
    reason: str = ""

    def text(self) -> str:
        """``about 25 min of wall time, 0.83 CPU-hours`` (``about 3.06 h`` from an hour on), or ``no estimate:
        <why>``: the words --dry-run and --list both print."""
        if self.seconds is None:
            return f"no estimate: {self.reason}"
        wall = (
            f"{max(1, round(self.seconds))} s"
            if self.seconds < 60
            else f"{round(self.seconds / 60)} min"
            if self.seconds < 3600
            else f"{self.seconds / 3600:.2f} h"
        )
        hours = f"{self.device_hours:.2f}" if self.device_hours >= 0.1 else f"{self.device_hours:.2g}"
        return f"about {wall} of wall time, {hours} {self.unit}-hours"

    def kind(self) -> str:
        """``measured``, ``estimated`` or ``part measured``: what --list marks a figure with."""
        if self.seconds is None:
            return ""
        return "part measured" if self.measured and self.estimated else "measured" if self.measured else "estimated"


def _reason(unknown: list[str]) -> str:
    return "; ".join(sorted(set(unknown))) + "."


def work_out(spec: SweepSpec, overrides: list[str]) -> tuple[list[Figure], list[str]]:
    """The figures of ``spec`` (with ``overrides``) at G = 1 and at its group, and the data folders they read."""
    from itrlab.sweep.dry_run import shared_stages, training_seconds, trial_configs

    points, configs = trial_configs(spec, overrides)
    stages = shared_stages(configs)
    workers, cpus, gpus = spec.workers
    unit, per_trial = ("GPU", gpus * workers) if gpus else ("CPU", cpus * workers)
    figures = []
    for size in [1] if spec.group == 1 else [1, spec.group]:
        cost = training_seconds(configs, stages, spec, size, points)
        if not cost.complete:
            figures.append(Figure(size, None, None, unit, "", False, False, _reason(cost.unknown)))
            continue
        from itrlab.sweep.cost import source_line

        hours = cost.seconds / 3600
        figures.append(
            Figure(
                size,
                cost.seconds / max(1, spec.concurrency),
                hours * per_trial,
                unit,
                source_line(cost),
                bool(cost.measured),
                bool(cost.estimated),
            )
        )
    roots = sorted({str(c.dataset.root) for c in [*configs, *stages]})
    return figures, roots


def estimates_file() -> Path:
    """``$ITRLAB_ESTIMATES``, else ``estimates.json`` beside the throughput record."""
    from itrlab.train.throughput import throughput_file  # no torch: a record's path

    return Path(os.environ.get(CACHE_ENV) or throughput_file().parent / CACHE_NAME)


_DIGESTS: dict[tuple, str] = {}
_LISTINGS: dict[tuple[Path, str], list[Path]] = {}


def _files(root: Path, pattern: str) -> list[Path]:
    """The files under ``root`` matching ``pattern``, listed once per process (a command's lifetime)."""
    if (root, pattern) not in _LISTINGS:
        _LISTINGS[root, pattern] = sorted(root.rglob(pattern))
    return _LISTINGS[root, pattern]


def _digest(files: list[Path], root: Path) -> str:
    """The digest of ``files`` (names relative to ``root`` and contents), read again only when one's size or
    time changed since this process last read it."""
    stats = tuple((str(path), path.stat().st_size, path.stat().st_mtime_ns) for path in files)
    if stats not in _DIGESTS:
        digest = hashlib.sha256()
        for path in files:
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
        _DIGESTS[stats] = digest.hexdigest()
    return _DIGESTS[stats]


def code_version() -> str:
    """What decides every estimate besides the sweep: itrlab's source, ``configs/``, the throughput record
    and torch's version (the FLOP formulas), as one digest."""
    from itrlab.train.throughput import throughput_file

    record, torch = throughput_file(), "no torch"
    with contextlib.suppress(metadata.PackageNotFoundError):
        torch = metadata.version("torch")
    configs = config_dir()
    parts = [
        _digest(_files(SOURCE_ROOT, "*.py"), SOURCE_ROOT),
        _digest(_files(configs, "*.yaml"), configs),
        torch,
        _digest([record], record.parent) if record.is_file() else "no record",
    ]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:20]


def data_fingerprint(roots: list[str]) -> dict[str, list]:
    """Each data folder's files (and its ``text/``'s) by name, size and time; ``[]`` for an absent folder."""
    out = {}
    for root in roots:
        entries = []
        for folder in (Path(root), Path(root) / "text"):
            with contextlib.suppress(OSError):
                for entry in sorted(os.scandir(folder), key=lambda e: e.name):
                    info = entry.stat()
                    entries.append([str(Path(folder.name) / entry.name), info.st_size, info.st_mtime_ns])
        out[root] = entries
    return out


def _read(cache: Path) -> dict[str, Any]:
    with contextlib.suppress(Exception):  # absent or damaged: worked out again
        data = json.loads(cache.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    return {}


def cached(parts: list[Any], compute: Callable[[], tuple[Any, list[str]]] | None) -> Any:
    """``compute()``'s value (JSON), kept under the code version and ``parts``; ``compute`` also returns the
    data folders the value depends on, whose fingerprint must still match for the kept value to stand.
    ``compute`` None only reads: None where nothing current is kept."""
    version = code_version()
    key = hashlib.sha256(json.dumps([version, *parts], sort_keys=True, default=str).encode()).hexdigest()[:24]
    cache = estimates_file()
    entry = _read(cache).get(key)
    if isinstance(entry, dict) and entry.get("data") == data_fingerprint(list(entry.get("data") or {})):
        return entry["value"]
    if compute is None:
        return None
    value, roots = compute()
    with contextlib.suppress(OSError):  # a read-only folder: worked out again next time
        cache.parent.mkdir(parents=True, exist_ok=True)
        kept = _read(cache)
        kept = {k: v for k, v in kept.items() if isinstance(v, dict) and v.get("version") == version}
        kept[key] = {"version": version, "value": value, "data": data_fingerprint(roots)}
        atomic_write_json(cache, kept, indent=None)
    return value


def sweep_estimate(spec: SweepSpec, overrides: list[str], work: bool = True) -> list[Figure] | None:
    """The figures of ``spec`` with ``overrides`` (:func:`work_out`), from the cache when nothing that decides
    them changed; with ``work`` False only from the cache (None when it keeps none: working one out counts
    a step's FLOPs, seconds to a minute a model)."""

    def compute() -> tuple[list[dict], list[str]]:
        figures, roots = work_out(spec, overrides)
        return [asdict(figure) for figure in figures], roots

    kept = cached(["estimate", spec.model_dump(mode="json"), list(overrides)], compute if work else None)
    return None if kept is None else [Figure(**figure) for figure in kept]


def cost_lines(spec: SweepSpec, overrides: list[str]) -> str:
    """The cost lines of a dry run: at G = 1 (one trial per process) and at the sweep's group, each with
    its wall time, its device-hours and where its figures came from, in the words of --list
    (:func:`sweep_estimate`: the same figures, from the same cache)."""
    from itrlab.train.throughput import throughput_file

    workers, cpus, gpus = spec.workers
    unit, per_trial = ("GPU", gpus * workers) if gpus else ("CPU", cpus * workers)
    lines = [
        f"cost: training only (evaluation not counted); each trial holds {per_trial:g} {unit}(s), "
        f"{spec.concurrency} trial(s) at a time:"
    ]
    figures = sweep_estimate(spec, overrides)
    for figure in figures:
        what = (
            "one trial per process"
            if figure.group == 1
            else f"group: {figure.group}, trials of one shape trained together"
        )
        source = f"; {figure.source}" if figure.source else ""
        lines.append(f"  G = {figure.group} ({what}): {figure.text()}{source}")
    if spec.group == 1:
        lines.append(
            "  (group: G in the sweep file, or --group G, trains G trials of one model shape together as "
            "one batched model; the dry run then estimates both)"
        )
    if any(figure.estimated for figure in figures):
        lines.append(
            f"  a measurement replaces an estimate: `python benchmarks/gpu.py` on a GPU, "
            f"`python benchmarks/train.py -c <experiment> <overrides>` on this kind of device; records in "
            f"{throughput_file()}"
        )
    return "\n".join(lines)
