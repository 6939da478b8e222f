"""Single-branch metric-learning baselines of DBL's Table III: CMPM and MPL.

Diao et al., "Deep Boosting Learning" (``dbl.txt``), Sec. IV-B "Comparison with Deep Metric
Learning" compares DBL (MSS) with single-branch task losses: VSE0 [15], VSE++ [17], SAM [20],
CMPM [62] and MPL [18]. VSE0 is the sum-of-hinges loss, registered as ``"vse"``
(:class:`~itrlab.losses.triplet.SumOfHingesLoss`), and VSE++ is ``"vsepp"``; this module adds
CMPM (``"cmpm"``) and MPL (``"mpl"``).

Both are :class:`~itrlab.losses.base.RetrievalLoss` es: per-anchor terms of the ``i2t``
(image anchor, row of ``i2t``) and ``t2i`` (caption anchor, column) directions, reduced by the
**mean** over the batch, directions added.
"""

from __future__ import annotations

import torch
from torch import Tensor

from itrlab.losses.base import (
    RetrievalLoss,
    Similarities,
    hardest_negative,
    hinge,
    negative_mask,
    positive_mask,
    positive_scores,
)
from itrlab.losses.registry import register_loss


@register_loss
class CMPMLoss(RetrievalLoss):
    """CMPM: cross-modal projection matching (Zhang & Lu, ECCV 2018 [62]).

    CMPM treats each pair of the batch as a class. Image ``i``'s "projections" on the
    batch's captions become a distribution ``p``, compared with the true matching
    distribution ``q`` by ``KL(p || q)``::

        p_{i,j} = exp(S[i, j] / tau) / sum_k exp(S[i, k] / tau)
        q_{i,j} = y_{i,j} / sum_k y_{i,k},   y_{i,j} = 1 iff ids i, j match
        L_i = sum_j p_{i,j} log( p_{i,j} / (q_{i,j} + eps) )
        L_i2t = mean_i L_i;   L_t2i the same over columns;   L_cmpm = L_i2t + L_t2i

    Image ids: ``y`` is 1 for **every** same-id pair, so a second caption of the same image
    shares the matching mass (``q`` is uniform over the image's captions in the batch; for a
    caption, over the batch entries of its image). The loss is minimal (about ``-eps`` times
    the number of positives, i.e. ~0) when ``p = q``.

    Choice: CMPM projects an unnormalised image feature on the normalised text feature
    (``x_i^T z_j / ||z_j||``), so its logits carry the feature norm as a scale. Similarity
    scores (cosine for unit embeddings) carry none, so a temperature ``tau`` replaces it,
    default 0.1 like itrlab's contrastive losses; ``eps = 1e-8`` as in CMPM. Reduction: mean
    over the batch, directions added (as in CMPM).

    Parts: ``i2t`` = mean image-anchor term, ``t2i`` = mean caption-anchor term.

    Args:
        tau: softmax temperature (> 0).
        eps: the ``epsilon`` that keeps ``log(q + eps)`` finite (> 0).
    """

    name = "cmpm"
    reduction = "mean"

    def __init__(self, tau: float, eps: float):
        super().__init__()
        self.tau, self.eps = tau, eps

    def matching_terms(self, scores: Tensor, matches: Tensor) -> Tensor:
        """(Q,) ``KL(p || q)`` per query row of ``scores`` against the ``matches`` rows."""
        log_p = torch.log_softmax(scores / self.tau, dim=1)
        q = matches / matches.sum(dim=1, keepdim=True)
        return (log_p.exp() * (log_p - torch.log(q + self.eps))).sum(dim=1)

    def terms(self, sims: Similarities) -> tuple[Tensor, Tensor]:
        matches = positive_mask(sims.image_ids).to(sims.i2t.dtype)  # symmetric; diagonal set
        return self.matching_terms(sims.i2t, matches), self.matching_terms(sims.i2t.T, matches)

    def extra_repr(self) -> str:
        return f"tau={self.tau}, eps={self.eps}"


# --------------------------------------------------------------------------- MPL

# The reference code leaves out a pair whose positive similarity is already (numerically) 1.
SATURATED_POSITIVE = 1 - 1e-5


def polynomial(coeffs: tuple[float, ...], x: Tensor) -> Tensor:
    """``sum_k coeffs[k] x^k`` (lowest order first), by Horner's rule."""
    value = torch.full_like(x, coeffs[-1])
    for c in reversed(coeffs[:-1]):
        value = value * x + c
    return value


@register_loss
class MaxPolynomialLoss(RetrievalLoss):
    """MPL: maximum polynomial loss (Wei et al., "Universal Weighting Metric Learning for
    Cross-Modal Matching", CVPR 2020 [18]).

    DBL cites [18] for the "polynomial loss" and groups it with "hard negative mining [17],
    [18]". "MPL" is read as [18]'s *maximum* polynomial loss (the hardest informative
    negative), the form of the authors' released ``polyloss.py`` (J. Wei, 2020), rather than
    the variant that sums over all informative negatives. In the universal weighting
    framework the loss of a pair is a polynomial of its similarity, one for the positive and
    one for the hardest *informative* negative. For image anchor ``i`` with positive
    ``s_p = S[i, i]`` and hardest negative ``s_n = max_{k: id_k != id_i} S[i, k]``::

        l_i2t(i) = [sum_q b_q s_p^q]_+ + [sum_p a_p s_n^p]_+    if s_n + margin > s_p
                                                                   and s_p < 1 - 1e-5
        l_i2t(i) = 0                                             otherwise

    and symmetrically for caption anchor ``j`` (column ``j``, hardest image). A negative is
    informative when ``s_n > s_p - margin``; an anchor without one (or without any negative)
    contributes 0, positive term included. Loss: ``(sum_i l_i2t + sum_j l_t2i) / B``, i.e.
    the **mean** over the batch of each direction, added.

    Defaults are the released code's: ``b = (0.5, -0.7, 0.2)`` (``0.2 s^2 - 0.7 s + 0.5``,
    zero at ``s = 1``), ``a = (0.03, -0.4, 0.9)`` (``0.9 s^2 - 0.4 s + 0.03``), and
    ``margin = 0.2`` (the SCAN margin the code is run with). Image ids: same-id entries are
    never negatives; the positive is the pair's own (diagonal) entry.

    Parts: ``i2t`` = mean image-anchor term, ``t2i`` = mean caption-anchor term.

    Args:
        margin: informative-negative margin (>= 0).
        pos_coeffs: ``b_0, b_1, ...`` of the positive polynomial, lowest order first.
        neg_coeffs: ``a_0, a_1, ...`` of the negative polynomial, lowest order first.
    """

    name = "mpl"
    reduction = "mean"

    def __init__(self, margin: float, pos_coeffs: tuple[float, ...], neg_coeffs: tuple[float, ...]):
        super().__init__()
        self.margin, self.pos_coeffs, self.neg_coeffs = margin, tuple(pos_coeffs), tuple(neg_coeffs)

    def anchor_terms(self, positive: Tensor, scores: Tensor, negatives: Tensor) -> Tensor:
        """(B,) MPL term of each anchor row of ``scores`` (negatives where ``negatives``)."""
        hardest, has_negative = hardest_negative(scores, negatives, dim=1)
        informative = has_negative & (hardest + self.margin > positive) & (positive < SATURATED_POSITIVE)
        hardest = torch.where(has_negative, hardest, positive)  # finite stand-in; masked out below
        cost = hinge(polynomial(self.pos_coeffs, positive)) + hinge(polynomial(self.neg_coeffs, hardest))
        return torch.where(informative, cost, torch.zeros_like(cost))

    def terms(self, sims: Similarities) -> tuple[Tensor, Tensor]:
        scores = sims.i2t
        negatives = negative_mask(sims.image_ids)  # symmetric
        positive = positive_scores(scores)
        return self.anchor_terms(positive, scores, negatives), self.anchor_terms(positive, scores.T, negatives)

    def extra_repr(self) -> str:
        return f"margin={self.margin}, pos_coeffs={self.pos_coeffs}, neg_coeffs={self.neg_coeffs}"
