"""A task loss that changes with the epoch: a warm-up loss first, then the main loss.

VSE∞/GPO (Chen et al., CVPR 2021) train their first epoch with the sum of hinges (VSE) and then
switch to VSE++'s max of hinges (their ``--vse_mean_warmup``): from random initialisation the
hardest negative of a batch is close to arbitrary, and max-of-hinges models can sit on the plateau
loss = 2 · margin · B for many epochs (DBL's interaction baseline does on the synthetic data). The
trainer tells the loss which epoch starts (:meth:`set_epoch`, epochs counted from 1); both losses
stay pure functions of the batch similarities.
"""

from __future__ import annotations

from torch import nn

from .base import LossOutput, Similarities


class WarmupLoss(nn.Module):
    """``warmup`` during epochs ``1 .. epochs``, ``main`` afterwards."""

    def __init__(self, main: nn.Module, warmup: nn.Module, epochs: int):
        super().__init__()
        if epochs < 1:
            raise ValueError(f"warm-up epochs must be >= 1, got {epochs}")
        self.main, self.warmup, self.epochs = main, warmup, epochs
        self.epoch = 1

    @property
    def name(self) -> str:
        return getattr(self.main, "name", type(self.main).__name__)

    @property
    def requires(self) -> tuple[str, ...]:
        """What either loss reads (the method computes it for every epoch)."""
        return tuple(dict.fromkeys((*getattr(self.main, "requires", ()), *getattr(self.warmup, "requires", ()))))

    @property
    def active(self) -> nn.Module:
        return self.warmup if self.epoch <= self.epochs else self.main

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def forward(self, sims: Similarities) -> LossOutput:
        return self.active(sims)

    def extra_repr(self) -> str:
        return f"epochs={self.epochs}"
