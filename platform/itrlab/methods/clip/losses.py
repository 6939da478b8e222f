"""CLIP's loss: symmetric cross-entropy (InfoNCE) over the batch's scaled similarity matrix.

Radford et al., "Learning Transferable Visual Models From Natural Language Supervision" (ICML 2021),
Figure 3's pseudo-code: ``logits = exp(t) · I_e @ T_e.T``, ``loss = (CE(logits, labels, axis=0) +
CE(logits, labels, axis=1)) / 2`` with ``labels = arange(B)``. The learnable log inverse temperature
``t`` belongs to the method (:class:`~itrlab.methods.clip.ClipMethod`); it reaches the loss as an
extra of :class:`~itrlab.losses.Similarities`, so the loss stays a pure function of its inputs.
"""

from __future__ import annotations

import torch
from torch import Tensor

from itrlab.losses.base import (
    LossOutput,
    RetrievalLoss,
    Similarities,
    check_inputs,
    masked_logsumexp,
    negative_mask,
    positive_scores,
)
from itrlab.losses.registry import register_loss

LOGIT_SCALE = "logit_scale"  # the Similarities extra: 0-d, log of the inverse temperature s


@register_loss
class SymmetricInfoNCELoss(RetrievalLoss):
    """CLIP: symmetric InfoNCE over the logits ``s · S`` with a learnable inverse temperature ``s``.

    Inputs: ``sims.i2t`` (B, B) cosine similarities ``S`` and ``sims.extras["logit_scale"]``, a 0-d
    tensor ``t`` (it carries the gradient to the method's parameter); ``s = exp(t)`` (the method
    clamps ``t``, CLIP's ``s <= 100``). With ``K(i)`` the candidates of anchor ``i``, that is the
    pair's own partner ``i`` and every pair of another image id::

        l^I_i = -log( e^{s·S_ii} / sum_{j in K(i)} e^{s·S_ij} )     (image anchor, caption retrieval)
        l^C_i = -log( e^{s·S_ii} / sum_{j in K(i)} e^{s·S_ji} )     (caption anchor, image retrieval)
        L     = ( mean_i l^I_i + mean_i l^C_i ) / 2

    Duplicate image ids: a caption of the same image is never a negative. The numerator is the
    pair's own (diagonal) entry; the other same-id entries are left out of the denominator (neither
    positive nor negative), as in the ConVSE NCE losses. With distinct ids in the batch this is
    exactly CLIP's ``(CE(logits, arange) + CE(logits.T, arange)) / 2``.

    Reduction: **mean** over the batch in each direction (CLIP's), and the two directions averaged.
    Computed in at least float32 whatever the inputs' dtype (float64 stays float64).

    Parts: ``i2t`` = mean ``l^I`` (caption retrieval), ``t2i`` = mean ``l^C`` (image retrieval), so
    that ``loss = (i2t + t2i) / 2``; ``tau`` = the current temperature ``1 / s`` (logged per epoch
    as ``loss_tau``, the mean over its steps).
    """

    name = "clip"
    requires = (LOGIT_SCALE,)
    reduction = "mean"

    def __init__(self) -> None:
        super().__init__()

    @staticmethod
    def inverse_temperature(sims: Similarities) -> Tensor:
        """``s = exp(logit_scale)``, a 0-d tensor; ValueError unless the extra is one finite number."""
        logit_scale = sims.get(LOGIT_SCALE)
        if logit_scale.dim() != 0 or not logit_scale.is_floating_point():
            raise ValueError(
                f"{LOGIT_SCALE} must be a 0-d floating tensor, got shape {tuple(logit_scale.shape)} "
                f"of {logit_scale.dtype}"
            )
        return logit_scale.exp()

    def scaled_terms(self, sims: Similarities) -> tuple[Tensor, Tensor, Tensor]:
        """``(l^I, l^C, s)``: the per-anchor terms of both directions, each (B,), and the scale."""
        dtype = torch.promote_types(sims.i2t.dtype, torch.float32)
        scale = self.inverse_temperature(sims).to(dtype)
        logits = scale * sims.i2t.to(dtype)
        candidates = negative_mask(sims.image_ids)
        candidates.fill_diagonal_(True)  # the pair's own partner; other same-id entries stay out
        positive = positive_scores(logits)
        image_anchor = masked_logsumexp(logits, candidates, dim=1) - positive
        caption_anchor = masked_logsumexp(logits, candidates, dim=0) - positive
        return image_anchor, caption_anchor, scale

    def terms(self, sims: Similarities) -> tuple[Tensor, Tensor]:
        image_anchor, caption_anchor, _ = self.scaled_terms(sims)
        return image_anchor, caption_anchor

    def forward(self, sims: Similarities) -> LossOutput:
        check_inputs(self, sims)
        image_anchor, caption_anchor, scale = self.scaled_terms(sims)
        i2t, t2i = image_anchor.mean(), caption_anchor.mean()
        return LossOutput(
            loss=(i2t + t2i) / 2, parts={"i2t": i2t.detach(), "t2i": t2i.detach(), "tau": (1 / scale).detach()}
        )
