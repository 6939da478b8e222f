"""Exponential moving averages of modules: DBL's MSS anchor (eq. 22) and CODER's momentum encoder (§3.2).

``ema_update_(average, source, m)`` moves every parameter of ``average`` towards ``source``'s:
``θ_avg ← m·θ_avg + (1 − m)·θ_src``, and copies buffers (batch-norm statistics, counters) as they
are. :func:`momentum_copy` makes the average's starting point: a frozen deep copy.
"""

from __future__ import annotations

import copy

import torch
from torch import nn


def momentum_copy(module: nn.Module) -> nn.Module:
    """A deep copy of ``module`` that no optimizer updates (``requires_grad=False``)."""
    average = copy.deepcopy(module)
    average.requires_grad_(False)
    return average


@torch.no_grad()
def ema_update_(average: nn.Module, source: nn.Module, momentum: float) -> None:
    """``average ← momentum · average + (1 − momentum) · source``, parameter by parameter; buffers copied. The modules
    have one structure (one is a copy of the other)."""
    if not 0.0 <= momentum <= 1.0:
        raise ValueError(f"momentum must be in [0, 1], got {momentum}")
    params = dict(source.named_parameters())
    for name, param in average.named_parameters():
        param.mul_(momentum).add_(params[name].detach(), alpha=1 - momentum)
    buffers = dict(source.named_buffers())
    for name, buffer in average.named_buffers():
        buffer.copy_(buffers[name])
