"""``--list``: every preset with what it reproduces (paper, table or figure), its trial count, its
profiles and the time it would take here, as ``--dry-run`` works it out (from the throughput
``jobs/bench_train.py`` measured on this machine, else estimated from the FLOPs of one step on a nominal
device, marked "(est.)": :mod:`itrlab.sweep.cost`).

A preset's title is its file's first comment line (``# CODER Table 2: components added ...``): the
words before the colon name what it reproduces when they begin with a registered paper's name
(:data:`itrlab.methods.PAPERS`, declared by each paper's package), the rest what it varies.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from itrlab.config.loader import read_yaml
from itrlab.config.sweep import load_sweep, resolve_sweep_path
from itrlab.methods import PAPERS
from itrlab.sweep.plan import shared_stages, training_seconds, trial_configs


@dataclass(frozen=True)
class PresetEntry:
    preset: str
    reproduces: str
    varies: str
    trials: int
    profiles: str
    time_here: str
    device_hours: str  # the training's CPU- or GPU-hours (the same measured or estimated figures)


def title_of(path: Path, width: int = 72) -> tuple[str, str]:
    """(what the preset reproduces, what it varies) from the file's opening comment: its first sentence,
    split at the first colon when a paper's name comes before it (``-`` for a preset of no paper)."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    text = " ".join(lines)
    head, sep, rest = text.partition(":")
    reproduces, text = (head.strip(), rest.strip()) if sep and head.startswith(tuple(PAPERS)) else ("-", text)
    sentence = re.split(r"(?<=\.)\s+(?=[A-Z])", text, maxsplit=1)[0].rstrip(".")
    return reproduces or "-", sentence if len(sentence) <= width else sentence[:width - 1].rstrip() + "…"


def time_here(seconds: float | None, estimated: bool = False) -> str:
    """``12 min``, ``3.4 h``; ``~12 min (est.)`` when estimated from counted FLOPs (itrlab.sweep.cost)."""
    if seconds is None:
        return "unknown"
    text = f"{max(1, round(seconds / 60))} min" if seconds < 3600 else f"{seconds / 3600:.1f} h"
    return f"~{text} (est.)" if estimated else text


def preset_entry(preset: str, path: Path) -> PresetEntry:
    """One preset's line, under its default profile (the budget miniature) and its own resources."""
    spec = load_sweep(path)
    _, configs = trial_configs(spec, [])
    cost = training_seconds(configs, shared_stages(configs), spec)
    wall = cost.seconds / max(1, spec.concurrency) if cost.complete else None
    profiles = ", ".join(read_yaml(path, "sweep").get("profiles") or {}) or "-"
    reproduces, varies = title_of(path)
    workers, cpus, gpus = spec.workers
    unit, devices = ("GPU", gpus * workers) if gpus else ("CPU", cpus * workers)
    hours = f"{cost.seconds * devices / 3600:.2g} {unit}-h" if cost.complete else "unknown"
    return PresetEntry(preset, reproduces, varies, spec.trial_count, profiles, time_here(wall, bool(cost.estimated)),
                       hours)


def list_presets(presets: dict[str, str]) -> str:
    """The table ``--list`` prints: one line per preset file (its short names beside its file's name)."""
    aliases: dict[str, list[str]] = {}
    for name, stem in presets.items():
        aliases.setdefault(stem, []).append(name)
    entries = [preset_entry(" / ".join(names), resolve_sweep_path(stem)) for stem, names in aliases.items()]
    header = ("preset", "reproduces", "trials", "profiles", "time here", "device-hours", "varies")
    rows = [header, *((e.preset, e.reproduces, str(e.trials), e.profiles, e.time_here, e.device_hours, e.varies)
                      for e in entries)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1] for row in rows]
    return "\n".join(line.rstrip() for line in lines) + (
        "\n\ntime here: training time of the default profile on this machine at the preset's concurrency (evaluation "
        "not counted), and its device-hours (wall time x the CPUs or GPUs a trial holds), from the throughput "
        "measured here (jobs/bench_train.py, jobs/bench_group.py, jobs/bench_gpu.py), or '~... (est.)': estimated, "
        "not measured, from the FLOPs of one step on a nominal device (--dry-run says how).\nrun one: python "
        "jobs/sweep.py --preset NAME [--profile paper] [--dry-run]")
