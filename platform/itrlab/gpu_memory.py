"""Free memory of a CUDA device, for the choices that depend on it: whether a training split fits on the
GPU (:func:`itrlab.data.resident.choose_data_path`) and how large an evaluation shard may be
(:func:`itrlab.models.interaction.shard_budget`)."""

from __future__ import annotations

import torch


def free_memory_bytes(device: torch.device) -> int | None:
    """Free memory of a CUDA device in bytes (``torch.cuda.mem_get_info``); None on a CPU."""
    if device.type != "cuda":
        return None
    free, _total = torch.cuda.mem_get_info(device)
    return int(free)
