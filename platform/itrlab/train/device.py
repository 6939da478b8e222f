"""Which torch device a run trains on (``train.device``).

``auto`` takes the first visible CUDA GPU, else the CPU. Inside Ray the visible GPUs are the ones
the trial or worker asked for (Ray sets ``CUDA_VISIBLE_DEVICES``): a sweep with
``--gpus-per-trial 1`` trains each trial on its own GPU and one without trains on CPUs, whatever
the node has. An explicit ``cuda`` on a machine without one is a config error, raised where the
run starts (a sweep's driver may have no GPU while its workers do).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import torch

from itrlab import threads
from itrlab.errors import ConfigError

if TYPE_CHECKING:
    from itrlab.assembly import Experiment


def resolve_device(spec: str) -> torch.device:
    """The device ``train.device`` names on this process."""
    if spec == "auto":
        return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(spec)
    if device.type != "cuda":
        return device
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if visible == 0:
        raise ConfigError(
            "train.device",
            spec,
            "no CUDA GPU is visible to this process; use 'auto' or 'cpu' "
            "(in a sweep, ask for GPUs with --gpus-per-trial)",
        )
    index = 0 if device.index is None else device.index
    if index >= visible:
        raise ConfigError("train.device", spec, f"this process sees {visible} CUDA GPU(s): cuda:0..cuda:{visible - 1}")
    return torch.device("cuda", index)


def place(experiment: Experiment, device: torch.device | None = None) -> Experiment:
    """``experiment`` with the device it trains on, ``device`` (a Ray Train worker's, the one Ray gave it) or else
    ``train.device`` on this process, and torch's CPU threads set for it (:func:`itrlab.threads.apply`). Where a
    run starts it is placed once: an experiment placed already is returned as it is, and carries its device to
    the run's trainer."""
    if experiment.device is not None:
        return experiment
    device = device or resolve_device(experiment.config.train.device)
    threads.apply(experiment.config.train.threads)
    return dataclasses.replace(experiment, device=device)


def device_label(device: torch.device) -> str:
    """``cpu (2 threads)`` or ``cuda:0 (NVIDIA H100 80GB HBM3)``: for logs and MLflow tags."""
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return f"{device} ({torch.get_num_threads()} threads)"


AUTOCAST_DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def resolve_precision(spec: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype ``train.precision`` names on ``device`` (None: fp32, no autocast).

    fp16 needs a CUDA GPU (autocast on the CPU supports it poorly, and its gradient scaler is a CUDA
    one); bf16 needs a CPU or a GPU that supports it. Either is a config error raised where the run
    starts, like an unusable ``train.device``.
    """
    if spec not in AUTOCAST_DTYPES:
        raise ConfigError("train.precision", spec, f"one of {', '.join(AUTOCAST_DTYPES)}")
    dtype = AUTOCAST_DTYPES[spec]
    if dtype is torch.float16 and device.type != "cuda":
        raise ConfigError(
            "train.precision",
            spec,
            f"fp16 needs a CUDA GPU, and this run trains on {device}; use bf16 (supported on CPUs) or fp32",
        )
    if dtype is torch.bfloat16 and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError(
            "train.precision", spec, f"{device_label(device)} does not support bfloat16; use fp16 or fp32"
        )
    return dtype
