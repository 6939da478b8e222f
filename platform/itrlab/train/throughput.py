"""Measured training throughput on this machine, by the shapes that decide it: what a sweep's dry run
estimates its cost from.

``benchmarks/train.py`` records each measurement (its median pairs per second) in
``runs/bench/throughput.jsonl`` (or ``$ITRLAB_THROUGHPUT``), keyed by the device and the shape of the
training: method, region features, embedding size, text encoder, batch size and precision. A dry
run looks its trials' shapes up and says when none was measured here, never guessing.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from itrlab.config import ExperimentConfig

DEFAULT_FILE = Path("runs/bench/throughput.jsonl")


def throughput_file() -> Path:
    return Path(os.environ.get("ITRLAB_THROUGHPUT") or DEFAULT_FILE)


def training_shape(config: ExperimentConfig, regions: int, feature_dim: int) -> str:
    """``convse 36x2048 embed1024 bigru300 batch256 fp32``: what decides a training step's cost; a scheme
    that wraps the method adds its structure (``xattn ... fp32 oss x2``: two branches train), and the method
    its :meth:`~itrlab.methods.base.MethodModule.cost_note` (work in the step the rest does not show)."""
    from itrlab.methods.registry import METHODS, scheme_structure  # the method layer (torch): not for a record's path

    text = config.model.text
    encoder = {
        "bigru": f"bigru{text.word_dim}",
        "precomp": f"precomp{f'-mlp{text.mlp_hidden}' if text.mlp_hidden else ''}",
    }.get(text.encoder, f"{text.encoder}:{text.bert_path}")
    structure = scheme_structure(config)
    scheme = f" {structure}" if structure else ""
    note = METHODS[config.method.name].cost_note(config)  # work in the step the shape does not show
    return (
        f"{config.method.name} {regions}x{feature_dim} embed{config.model.embed_dim} {encoder} "
        f"batch{config.train.batch_size} {config.train.precision}{scheme}{f' {note}' if note else ''}"
    )


@dataclass(frozen=True)
class Throughput:
    device: str
    shape: str
    pairs_per_second: float
    measured: str  # the date

    def seconds(self, pairs: float) -> float:
        return pairs / self.pairs_per_second


def record(device: str, shape: str, pairs_per_second: float, path: Path | None = None) -> Path:
    path = path or throughput_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    entry = {
        "device": device,
        "shape": shape,
        "pairs_per_second": pairs_per_second,
        "measured": time.strftime("%Y-%m-%d"),
    }
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry) + "\n")
    return path


def lookup(device_kind: str, shape: str, path: Path | None = None) -> Throughput | None:
    """The latest measurement of ``shape`` on a device whose description starts with ``device_kind``
    (``cuda``, ``cpu``); None when none was recorded."""
    path = path or throughput_file()
    if not path.is_file():
        return None
    found = None
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue
        if entry.get("shape") == shape and str(entry.get("device", "")).startswith(device_kind):
            found = Throughput(entry["device"], shape, float(entry["pairs_per_second"]), entry.get("measured", "?"))
    return found
