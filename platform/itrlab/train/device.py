"""Which torch device a run trains on (``train.device``).

``auto`` takes the first visible CUDA GPU, else the CPU. Inside Ray the visible GPUs are the ones
the trial or worker asked for (Ray sets ``CUDA_VISIBLE_DEVICES``): a sweep with
``--gpus-per-trial 1`` trains each trial on its own GPU and one without trains on CPUs, whatever
the node has. An explicit ``cuda`` on a machine without one is a config error, raised where the
run starts (a sweep's driver may have no GPU while its workers do).
"""

from __future__ import annotations

import torch

from itrlab.errors import ConfigError


def resolve_device(spec: str) -> torch.device:
    """The device ``train.device`` names on this process."""
    if spec == "auto":
        return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    device = torch.device(spec)
    if device.type != "cuda":
        return device
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if visible == 0:
        raise ConfigError("train.device", spec, "no CUDA GPU is visible to this process; use 'auto' or 'cpu' "
                          "(in a sweep, ask for GPUs with --gpus-per-trial)")
    index = 0 if device.index is None else device.index
    if index >= visible:
        raise ConfigError("train.device", spec, f"this process sees {visible} CUDA GPU(s): cuda:0..cuda:{visible - 1}")
    return torch.device("cuda", index)


def describe(device: torch.device) -> str:
    """``cpu (2 threads)`` or ``cuda:0 (NVIDIA H100 80GB HBM3)``: for logs and MLflow tags."""
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return f"{device} ({torch.get_num_threads()} threads)"
