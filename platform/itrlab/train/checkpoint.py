"""Checkpoints: everything needed to continue a run exactly (weights, optimizer, step, best score, RNG).

Files are written to a temporary name and renamed, so a run killed mid-write never leaves a
truncated ``last.pt`` behind.
"""

from __future__ import annotations

import os
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

LAST = "last.pt"  # everything needed to continue the run
BEST = "best.pt"  # the method (all branches) at the best validation rsum
MODEL = "model.pt"  # the model alone at the best validation rsum (a cooperative scheme's target)


@dataclass
class TrainState:
    epoch: int = 0  # epochs completed
    step: int = 0  # optimizer steps taken
    best_rsum: float = float("-inf")
    best_epoch: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)  # one entry per epoch: loss, val metrics


def rng_state() -> dict[str, Any]:
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    return {"torch": torch.get_rng_state(), "cuda": cuda, "numpy": np.random.get_state(), "python": random.getstate()}


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore the generators; the CUDA ones only where the same number of GPUs is visible."""
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda")
    if cuda is not None and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def save_checkpoint(path: Path, *, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
                    state: TrainState, extra: dict[str, Any] | None = None) -> None:
    payload = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "state": asdict(state),
        "rng": rng_state(),
        "extra": extra or {},
    }
    tmp = path.with_suffix(path.suffix + ".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: Path) -> dict[str, Any]:
    payload = torch.load(path, map_location="cpu", weights_only=False)
    payload["state"] = TrainState(**payload["state"])
    return payload
