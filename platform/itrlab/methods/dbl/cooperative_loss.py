"""Base class of the losses between two branches that see the same batch, and their registry.

A cooperative loss compares the target branch's similarities with an anchor branch's:
DBL's boosting losses, and the distillation / mutual-learning baselines (DR, RKD, DML, DINO).
They register in :data:`COOPERATIVE_LOSSES` (the ``cooperative.loss`` names), a
:class:`~itrlab.losses.LossRegistry` of this package: their settings, declared in
:mod:`.loss_settings`, are the section's settings, typed the way every loss's are.
The anchor never receives gradient from it: :meth:`CooperativeLoss.forward` detaches the
anchor's similarities before :meth:`compare` sees them. Schemes where both branches learn
from each other (DML) call the loss twice with the roles swapped.
"""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from itrlab.losses.base import LossOutput, Similarities, check_inputs
from itrlab.methods.dbl.loss_settings import COOPERATIVE_LOSSES

register_cooperative_loss = COOPERATIVE_LOSSES.register


def detached(sims: Similarities) -> Similarities:
    """The same similarities cut from the autograd graph (every field, extras included)."""
    return sims.detached()


class CooperativeLoss(nn.Module):
    """``forward(target, anchor) -> LossOutput``; subclasses implement :meth:`compare`.

    Both arguments hold the same batch (same ``image_ids``). Subclasses set ``name`` (the
    registry key), ``requires`` (inputs read from both branches beyond ``i2t``: ``i2i``, ``t2t``
    or extras) and ``mutual``: True when every branch of a scheme learns from every other (DML),
    False when a branch learns only from the branches before it (boosting, distillation).
    """

    name: ClassVar[str]
    requires: tuple[str, ...] = ()
    mutual: ClassVar[bool] = False

    def forward(self, target: Similarities, anchor: Similarities) -> LossOutput:
        # the same tensor (branches of one step) needs no comparison, which vmap could not batch (grouped training)
        if target.image_ids is not anchor.image_ids and not target.image_ids.equal(anchor.image_ids):
            raise ValueError("target and anchor similarities must come from the same batch (same image_ids)")
        check_inputs(self, target)
        check_inputs(self, anchor)
        return self.compare(target, detached(anchor))

    def compare(self, target: Similarities, anchor: Similarities) -> LossOutput:
        raise NotImplementedError
