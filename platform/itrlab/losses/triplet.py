"""Hinge-based triplet ranking losses: VSE (sum of hinges) and VSE++ (max of hinges).

Equations refer to ConVSE (Jain and Verma), which restates VSE and VSE++ (Faghri et al.).
Duplicate-id rule: a pair with the same image id as the anchor is never a negative; it is
left out of the sums (VSE) and of the hardest-negative search (VSE++). An anchor with no
negative in the batch contributes 0.
"""

from __future__ import annotations

from torch import Tensor

from .base import RetrievalLoss, Similarities, hardest_negative_hinge, hinge, masked_sum, negative_mask, positive_scores
from .registry import register_loss


@register_loss
class SumOfHingesLoss(RetrievalLoss):
    """VSE: sum-of-hinges triplet ranking loss ``l_SH`` (ConVSE eq. 2).

    For the pair ``(I, C)``::

        l_SH = sum_{C'} [margin + s(I, C') - s(I, C)]_+ + sum_{I'} [margin + s(I', C) - s(I, C)]_+

    summed over all in-batch negatives ``C'`` / ``I'`` (entries with a different image id;
    same-id entries are excluded) and **summed** over the batch, as in the VSE++ reference
    code (``cost_s.sum() + cost_im.sum()``).

    Parts: ``i2t`` = image-anchor sum (caption retrieval), ``t2i`` = caption-anchor sum.
    """

    name = "vse"
    reduction = "sum"

    def __init__(self, margin: float):
        super().__init__()
        self.margin = margin

    def terms(self, sims: Similarities) -> tuple[Tensor, Tensor]:
        scores = sims.i2t
        negatives = negative_mask(sims.image_ids)
        positive = positive_scores(scores)
        # cost_caption[i, j]: image anchor i (row) against caption j.
        cost_caption = hinge(self.margin + scores - positive.unsqueeze(1))
        # cost_image[i, j]: caption anchor j (column) against image i.
        cost_image = hinge(self.margin + scores - positive.unsqueeze(0))
        return masked_sum(cost_caption, negatives, dim=1), masked_sum(cost_image, negatives, dim=0)


@register_loss
class MaxOfHingesLoss(RetrievalLoss):
    """VSE++: max-of-hinges triplet ranking loss ``l_MH`` (ConVSE eq. 5, with eq. 3-4).

    For the pair ``(I, C)``::

        l_MH = [margin + s(I, C*) - s(I, C)]_+ + [margin + s(I*, C) - s(I, C)]_+

    where ``C*`` / ``I*`` is the hardest in-batch negative (eq. 4 / eq. 3): the most similar
    caption / image with a different image id (same-id entries are never negatives; an
    anchor with no negative contributes 0). **Summed** over the batch, as in the VSE++
    reference code.

    Parts: ``i2t`` = image-anchor sum (caption retrieval), ``t2i`` = caption-anchor sum.
    """

    name = "vsepp"
    reduction = "sum"

    def __init__(self, margin: float):
        super().__init__()
        self.margin = margin

    def terms(self, sims: Similarities) -> tuple[Tensor, Tensor]:
        scores = sims.i2t
        negatives = negative_mask(sims.image_ids)
        positive = positive_scores(scores)
        return (
            hardest_negative_hinge(positive, scores, negatives, dim=1, margin=self.margin),
            hardest_negative_hinge(positive, scores, negatives, dim=0, margin=self.margin),
        )
