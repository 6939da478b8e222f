"""Contrastive (NCE-based) losses: MVN's multimodal NCE, ConVSE (l_CSN) and ConVSE++ (l_CMN).

Equations refer to ConVSE (Jain and Verma). Duplicate-id rule: a pair with the same image id
as the anchor is never a negative. In the NCE losses the numerator's positive is the pair's
own (diagonal) element; other same-id entries are left out of the denominator (they are
neither positives nor negatives). In l_CMN they are excluded from the hardest-negative search
and an anchor with no negative contributes 0.
"""

from __future__ import annotations

from torch import Tensor

from itrlab.losses.base import (
    RetrievalLoss,
    Similarities,
    hardest_negative_hinge,
    nce_term,
    negative_mask,
    positive_scores,
)
from itrlab.losses.registry import register_loss


@register_loss
class MultimodalNCELoss(RetrievalLoss):
    """MVN: multimodal NCE with cross- and same-modality negatives (ConVSE Sec. III-B).

    The direct cross-modal adaptation of SimCLR (Alayrac et al.'s MVN): with ``N`` pairs in a
    batch, each image ``I_i`` has the positive ``C_i`` and the ``2(N-1)`` negatives ``C_k``
    and ``I_k`` (``k`` of another image id; same-modality similarities from ``sims.i2i``)::

        l^I_i = -log( e^{s(I_i,C_i)/tau} /
                      (e^{s(I_i,C_i)/tau} + sum_k e^{s(I_i,C_k)/tau} + sum_k e^{s(I_i,I_k)/tau}) )

    and symmetrically each caption ``C_j`` has the positive ``I_j`` and the negatives ``I_k``
    and ``C_k`` (from ``sims.t2t``). Same-id entries, and the ``i2i`` / ``t2t`` diagonal
    (self-similarity), are not in the denominator. Loss: **mean** over the batch of
    ``l^I_i + l^C_i``.

    Parts: ``i2t`` = mean image-anchor term, ``t2i`` = mean caption-anchor term.
    """

    name = "mvn"
    requires = ("i2i", "t2t")
    reduction = "mean"

    def __init__(self, tau: float):
        super().__init__()
        self.tau = tau

    def terms(self, sims: Similarities) -> tuple[Tensor, Tensor]:
        scores = sims.i2t
        negatives = negative_mask(sims.image_ids)  # symmetric; its diagonal is False
        positive = positive_scores(scores)
        image_anchor = nce_term(positive, [(scores, negatives), (sims.i2i, negatives)], self.tau)
        caption_anchor = nce_term(positive, [(scores.T, negatives), (sims.t2t, negatives)], self.tau)
        return image_anchor, caption_anchor


@register_loss
class ContrastiveSumOfNegativesLoss(RetrievalLoss):
    """ConVSE: contrastive sum-of-negatives loss ``l_CSN`` (ConVSE eq. 6-8).

    For the pair ``(I, C)``, ``l_CSN = l^I_CSN + l^C_CSN`` (eq. 6) with::

        l^I_CSN = -log( e^{s(I,C)/tau} / sum_k e^{s(I,C_k)/tau} )      (eq. 7)
        l^C_CSN = -log( e^{s(I,C)/tau} / sum_k e^{s(I_k,C)/tau} )      (eq. 8)

    where the sums run over the positive itself and the cross-modal negatives (other image
    ids); other same-id entries are left out. **Mean** over the batch (Algorithm 1's 1/N).

    Parts: ``i2t`` = mean of eq. 7 (caption retrieval), ``t2i`` = mean of eq. 8.
    """

    name = "convse"
    reduction = "mean"

    def __init__(self, tau: float):
        super().__init__()
        self.tau = tau

    def terms(self, sims: Similarities) -> tuple[Tensor, Tensor]:
        scores = sims.i2t
        negatives = negative_mask(sims.image_ids)
        positive = positive_scores(scores)
        image_anchor = nce_term(positive, [(scores, negatives)], self.tau)
        caption_anchor = nce_term(positive, [(scores.T, negatives)], self.tau)
        return image_anchor, caption_anchor


@register_loss
class ContrastiveMaxOfNegativesLoss(RetrievalLoss):
    """ConVSE++: contrastive max-of-negatives loss with margin ``l_CMN`` (ConVSE eq. 12-14).

    For the pair ``(I, C)``, ``l_CMN = l^I_CMN + l^C_CMN`` (eq. 12) with::

        l^I_CMN = [ -log( e^{s(I,C)/tau} / e^{(s(I,C*)+margin)/tau} ) ]_+      (eq. 13)
        l^C_CMN = [ -log( e^{s(I,C)/tau} / e^{(s(I*,C)+margin)/tau} ) ]_+      (eq. 14)

    with ``C*`` / ``I*`` the hardest in-batch negatives of eq. 4 / eq. 3 (other image ids
    only; an anchor with no negative contributes 0). Since ``-log(e^a / e^b) = b - a`` and
    ``tau > 0``, each term equals ``[margin + s(hardest) - s(I,C)]_+ / tau``, which is how
    it is computed (no overflow for small ``tau``). **Mean** over the batch (Algorithm 1).

    Parts: ``i2t`` = mean of eq. 13 (caption retrieval), ``t2i`` = mean of eq. 14.
    """

    name = "convsepp"
    reduction = "mean"

    def __init__(self, margin: float, tau: float):
        super().__init__()
        self.margin, self.tau = margin, tau

    def terms(self, sims: Similarities) -> tuple[Tensor, Tensor]:
        scores = sims.i2t
        negatives = negative_mask(sims.image_ids)
        positive = positive_scores(scores)
        image_anchor = hardest_negative_hinge(positive, scores, negatives, dim=1, margin=self.margin)
        caption_anchor = hardest_negative_hinge(positive, scores, negatives, dim=0, margin=self.margin)
        return image_anchor / self.tau, caption_anchor / self.tau
