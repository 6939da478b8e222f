"""Gathering tensors from every data-parallel worker (torch.distributed; no Ray here).

CODER's queues, like MoCo's, enqueue the momentum keys of the whole global batch: each worker gathers every worker's
keys before it enqueues, so that every queue holds the same entries in the same order. Without an initialised
process group (one worker) it is the identity.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


@torch.no_grad()
def gather_from_all(tensor: Tensor) -> Tensor:
    """The concatenation along dim 0, in rank order, of ``tensor`` (one shape and dtype on every worker) from every
    worker, without gradient."""
    if world_size() == 1:
        return tensor.detach()
    parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, tensor.detach().contiguous())
    return torch.cat(parts, dim=0)
