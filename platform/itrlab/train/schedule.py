"""Learning-rate schedule: linear warm-up, then step decay at given epochs.

The factor is a pure function of the global step, so a resumed run that restores the step
continues the schedule exactly where it stopped (the ConVSE code restarts it; we do not).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class StepDecaySchedule:
    steps_per_epoch: int
    decay_epochs: tuple[int, ...] = ()  # after epoch e (1-based) completes, multiply by `decay`
    decay: float = 0.1
    warmup_steps: int = 0

    def factor(self, step: int) -> float:
        """LR multiplier for optimizer step ``step`` (0-based)."""
        epochs_done = step // self.steps_per_epoch
        value = self.decay ** sum(1 for e in self.decay_epochs if epochs_done >= e)
        if self.warmup_steps:
            value *= min(1.0, (step + 1) / self.warmup_steps)
        return value

    def scheduler(self, optimizer: torch.optim.Optimizer, last_step: int = 0) -> torch.optim.lr_scheduler.LambdaLR:
        """A LambdaLR positioned at ``last_step`` (steps already taken)."""
        for group in optimizer.param_groups:
            group.setdefault("initial_lr", group["lr"])
        return torch.optim.lr_scheduler.LambdaLR(optimizer, self.factor, last_epoch=last_step - 1)
