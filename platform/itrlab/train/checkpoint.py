"""Checkpoints: everything needed to continue a run exactly (weights, optimizer, step, best score, RNG).

Files are written to a temporary name and renamed, so a run killed mid-write never leaves a
truncated ``last.pt`` behind. They hold tensors, numbers, strings, lists and dicts only (the RNG
states too), and are read weights-only: loading a checkpoint never runs code from it, and a file
that is not an itrlab checkpoint is refused with a message naming it.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from itrlab.errors import StorageError, UserInputError, disk_full, no_space
from itrlab.files import atomic_write_bytes, load_tensors

LAST = "last.pt"  # everything needed to continue the run
BEST = "best.pt"  # the method (all branches) at the best validation rsum
MODEL = "model.pt"  # the model alone at the best validation rsum (a cooperative scheme's target)


@dataclass
class TrainState:
    epoch: int = 0  # epochs completed
    step: int = 0  # optimizer steps taken
    best_rsum: float = float("-inf")
    best_epoch: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)  # one entry per epoch: its logged metrics
    # with train.lr_decay_choices: the epoch after which this state's schedule decays (itrlab.train.decay_choice)
    decay_after: int | None = None


def rng_state() -> dict[str, Any]:
    """Every generator's state as tensors and plain values (safe to load weights-only)."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    name, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": cuda,
        "numpy": {
            "name": name,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "python": {"version": version, "internal": list(internal), "gauss_next": gauss_next},
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore the generators; the CUDA ones only where the same number of GPUs is visible."""
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda")
    if cuda is not None and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)
    numpy = state["numpy"]
    if isinstance(numpy, dict):
        np.random.set_state(
            (
                numpy["name"],
                numpy["keys"].numpy().astype(np.uint32),
                numpy["pos"],
                numpy["has_gauss"],
                numpy["cached_gaussian"],
            )
        )
    else:  # a checkpoint of itrlab before safe loading: the tuple numpy itself returns
        np.random.set_state(numpy)
    python = state["python"]
    if isinstance(python, dict):
        random.setstate((python["version"], tuple(python["internal"]), python["gauss_next"]))
    else:
        random.setstate(python)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def plain(value: Any) -> Any:
    """``value`` with numpy scalars and arrays turned into Python numbers and tensors (loadable weights-only)."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    return value


def compact(value: Any) -> Any:
    """``value`` with every tensor that views a larger storage copied out: ``torch.save`` writes a view's
    whole storage, and a grouped run's weights are rows of the group's stacked tensors
    (:mod:`itrlab.train.grouped`)."""
    if isinstance(value, dict):
        return {k: compact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(compact(v) for v in value)
    if isinstance(value, torch.Tensor) and value.untyped_storage().nbytes() > value.numel() * value.element_size():
        return value.clone()
    return value


def save_checkpoint(
    path: Path,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    state: TrainState,
    extra: dict[str, Any] | None = None,
) -> None:
    payload = {
        "model": compact(model.state_dict()),
        "optimizer": compact(optimizer.state_dict()) if optimizer is not None else None,
        "state": plain(asdict(state)),
        "rng": rng_state(),
        "extra": plain(extra or {}),
    }
    try:
        atomic_write_bytes(path, lambda f: torch.save(payload, f))
    except OSError as err:  # a full or read-only disk: the previous file is intact (atomic rename)
        why = no_space(Path(path).parent) if disk_full(err) else err.strerror or str(err)
        raise StorageError(f"cannot write the checkpoint {path}: {why}; the previous one is kept") from None


def copy_checkpoint(source: Path, target: Path, **state: Any) -> None:
    """Write the checkpoint ``source`` to ``target`` as it is (its weights, optimizer and generators' states), but
    for the fields of its :class:`TrainState` given in ``state``."""
    payload = load_checkpoint(source)
    payload["state"] = plain(asdict(replace(payload["state"], **state)))
    try:
        atomic_write_bytes(target, lambda f: torch.save(payload, f))
    except OSError as err:
        why = no_space(Path(target).parent) if disk_full(err) else err.strerror or str(err)
        raise StorageError(f"cannot write the checkpoint {target}: {why}") from None


def load_checkpoint(path: Path) -> dict[str, Any]:
    """A checkpoint written by :func:`save_checkpoint`, loaded weights-only (UserInputError if it is not one)."""
    payload = load_tensors(path, "checkpoint")
    if not isinstance(payload, dict) or not {"model", "state", "rng"} <= set(payload):
        raise UserInputError(f"checkpoint {path} is not an itrlab checkpoint (it has no model, state and rng entries)")
    payload["state"] = TrainState(**payload["state"])
    return payload
