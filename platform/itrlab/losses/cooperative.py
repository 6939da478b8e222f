"""Base class of the losses between two branches that see the same batch.

A cooperative loss compares the target branch's similarities with an anchor branch's:
DBL's boosting losses, and the distillation / mutual-learning baselines (DR, RKD, DML, DINO).
The anchor never receives gradient from it: :meth:`CooperativeLoss.forward` detaches the
anchor's similarities before :meth:`compare` sees them. Schemes where both branches learn
from each other (DML) call the loss twice with the roles swapped.
"""

from __future__ import annotations

from dataclasses import replace
from typing import ClassVar

from torch import nn

from .base import LossOutput, Similarities


def detached(sims: Similarities) -> Similarities:
    """The same similarities cut from the autograd graph."""
    return replace(
        sims,
        i2t=sims.i2t.detach(),
        i2i=None if sims.i2i is None else sims.i2i.detach(),
        t2t=None if sims.t2t is None else sims.t2t.detach(),
    )


class CooperativeLoss(nn.Module):
    """``forward(target, anchor) -> LossOutput``; subclasses implement :meth:`compare`.

    Both arguments hold the same batch (same ``image_ids``). Subclasses set ``name`` (the
    registry key) and ``needs_same_modality`` (True when they read ``i2i`` / ``t2t``).
    """

    name: ClassVar[str]
    needs_same_modality: ClassVar[bool] = False

    def forward(self, target: Similarities, anchor: Similarities) -> LossOutput:
        if not target.image_ids.equal(anchor.image_ids):
            raise ValueError("target and anchor similarities must come from the same batch (same image_ids)")
        if self.needs_same_modality and (target.i2i is None or anchor.i2i is None):
            raise ValueError(f"{self.name!r} needs same-modality similarities (i2i, t2t) of both branches")
        return self.compare(target, detached(anchor))

    def compare(self, target: Similarities, anchor: Similarities) -> LossOutput:
        raise NotImplementedError
