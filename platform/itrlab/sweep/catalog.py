"""``--list``: every preset with what it reproduces, and one line per profile with its trial count and the time it
would take here, the figure ``--dry-run`` prints (:mod:`itrlab.sweep.estimates`), marked measured or estimated.

A preset's title is its file's first comment line (``# CODER Table 2: components added ...``): the words before
the colon name what it reproduces when they begin with a registered paper's name (:data:`itrlab.methods.PAPERS`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from itrlab.config.loader import read_yaml
from itrlab.config.profiles import DEFAULT_PROFILE
from itrlab.config.sweep import load_sweep, resolve_sweep_path
from itrlab.sweep.estimates import Figure, cached, estimates_file, sweep_estimate


@dataclass(frozen=True)
class PresetEntry:
    """One line of ``--list``: a preset under one of its profiles."""

    preset: str
    profile: str
    reproduces: str
    varies: str
    trials: int
    estimate: str  # the dry run's G line for the sweep's own group (itrlab.sweep.estimates), and its kind


def title_of(path: Path, width: int = 72) -> tuple[str, str]:
    """(what the preset reproduces, what it varies) from the file's opening comment: its first sentence,
    split at the first colon when a paper's name comes before it (``-`` for a preset of no paper)."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    text = " ".join(lines)
    from itrlab.methods import PAPERS  # the method layer (torch): only when the title is not kept

    head, sep, rest = text.partition(":")
    reproduces, text = (head.strip(), rest.strip()) if sep and head.startswith(tuple(PAPERS)) else ("-", text)
    sentence = re.split(r"(?<=\.)\s+(?=[A-Z])", text, maxsplit=1)[0].rstrip(".")
    return reproduces or "-", sentence if len(sentence) <= width else sentence[: width - 1].rstrip() + "…"


NOT_KEPT = "not worked out yet: --dry-run (or --list --estimate)"


def estimate_cell(figure: Figure | None) -> str:
    """The figure --dry-run prints for the sweep's own group, marked measured or estimated (:data:`NOT_KEPT`
    where none is kept)."""
    if figure is None:
        return NOT_KEPT
    return figure.text() + (f" ({figure.kind()})" if figure.kind() else "")


def profiles_of(path: Path) -> list[str | None]:
    """A preset's profiles, the one a run without ``--profile`` takes first (the file's ``default_profile``, else
    ``budget``; ``[None]``: a file without profiles runs as written)."""
    data = read_yaml(path, "sweep")
    default = data.get("default_profile", DEFAULT_PROFILE)
    return sorted(data.get("profiles") or {}, key=lambda name: name != default) or [None]


def preset_entries(preset: str, path: Path, work: bool = False) -> list[PresetEntry]:
    """One line per profile of a preset, each with the estimate its dry run prints at the sweep's group: the
    one kept, or with ``work`` one worked out where none is (a step's FLOPs counted per model shape)."""
    reproduces, varies = cached(["title", str(path)], lambda: (list(title_of(path)), []))
    entries = []
    for profile in profiles_of(path):
        spec = load_sweep(path, profile)
        figures = sweep_estimate(spec, [], work=work) or []
        figure = next((f for f in figures if f.group == spec.group), None)
        entries.append(PresetEntry(preset, profile or "-", reproduces, varies, spec.trial_count, estimate_cell(figure)))
    return entries


def list_presets(presets: dict[str, str], work: bool = False) -> str:
    """The table ``--list`` prints: one line per preset file and profile (its short names beside its file's name);
    ``work``: estimates worked out where none is kept (``--list --estimate``)."""
    aliases: dict[str, list[str]] = {}
    for name, stem in presets.items():
        aliases.setdefault(stem, []).append(name)
    header = ("preset", "profile", "reproduces", "trials", "training time here (as --dry-run)", "varies")
    rows = [header]
    for stem, names in aliases.items():
        for i, e in enumerate(preset_entries(" / ".join(names), resolve_sweep_path(stem), work)):
            rows.append(
                (
                    e.preset if i == 0 else "",
                    e.profile,
                    e.reproduces if i == 0 else "",
                    str(e.trials),
                    e.estimate,
                    e.varies if i == 0 else "",
                )
            )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header) - 1)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1] for row in rows]
    return "\n".join(line.rstrip() for line in lines) + (
        f"\n\ntraining time here: what `--dry-run` prints for the profile at the sweep's group and concurrency "
        f"(evaluation not counted), with its device-hours (wall time x the CPUs or GPUs a trial holds): measured "
        f"where benchmarks/train.py, benchmarks/group.py or benchmarks/gpu.py recorded the step here, else estimated "
        f"from the FLOPs of one step on a nominal device (--dry-run says which). Kept per code version in "
        f"{estimates_file()}; --list shows the kept ones, --list --estimate works out the others (counting one "
        f"step per model shape: minutes on a first run).\n"
        f"run one: python jobs/sweep.py --preset NAME [--profile NAME] [--dry-run]"
    )
