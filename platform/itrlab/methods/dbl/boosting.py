"""DBL boosting losses: Relative Sum/Max (RS, RM) and Absolute Sum/Max (AS, AM).

Diao et al., "Deep Boosting Learning: A Brand-new Cooperative Approach for Image-Text
Matching" (``dbl.txt``). A target branch ``t`` is trained with ``L_raw + L_boo`` (1:1, Sec.
III-C); ``L_boo`` compares its similarities ``St`` with those of an anchor branch ``a``
(``Sa``, detached by :class:`CooperativeLoss`: the anchor never gets gradient from here).

Notation: pair ``n`` is (image ``n``, caption ``n``); ``St[i, j]`` is the target similarity of
image ``i`` and caption ``j``, so ``St[n, n]`` is the positive. ``j`` ranges over the
**negatives** of pair ``n``: pairs with a different image id (a second caption of the same
image is never a negative; like the positive's other same-id entries it is simply left
out). ``i2t`` terms have image anchor ``n`` and negative captions ``St[n, j]``; ``t2i`` terms
have caption anchor ``n`` and negative images ``St[j, n]``. An anchor without any negative in
the batch contributes 0 (no triplet exists). ``[x]_+ = max(x, 0)``.

Reduction: every loss is **summed** over the batch, ``L_boo = sum_n l'(i_n, c_n)`` (eq. 6),
like the task loss it is added to at 1:1: ``L_raw`` (eq. 3) and VSE++ (``vsepp``) are sums
in itrlab and in the authors' code. A mean would scale ``L_boo`` by ``1/B`` against
``L_raw`` and change the paper's balance.

Table IV's strategies (models A-I) are :data:`~itrlab.methods.dbl.strategies.DBL_STRATEGIES`; the
settings of these losses are declared in :mod:`~itrlab.methods.dbl.loss_settings`.

Defaults are the paper's: ``gamma = 0.2``, ``alpha = 0.5`` (``gamma_1 = alpha gamma``,
``gamma_2 = gamma - alpha gamma``).
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import Tensor

from itrlab.losses.base import LossOutput, Similarities, hinge, masked_sum, negative_mask
from itrlab.methods.dbl.cooperative_loss import COOPERATIVE_LOSSES, CooperativeLoss, register_cooperative_loss
from itrlab.methods.dbl.soft_margin import D_X, D_Y, gamma_sa, gamma_sa_negative
from itrlab.methods.dbl.strategies import DBL_STRATEGIES, strategy_settings  # noqa: F401  (re-exported)

# --------------------------------------------------------------------------- helpers


def _pick(values: Tensor, keys: Tensor, mask: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    """``values`` at the argmax of ``keys`` over the ``mask`` entries along ``dim``.

    Returns ``(picked, has_negative)``; where no entry is allowed, ``picked`` is an arbitrary
    finite entry and ``has_negative`` is False (callers zero those anchors). Gradient flows
    only to the picked entry of ``values``.
    """
    index = keys.detach().masked_fill(~mask, -math.inf).argmax(dim=dim, keepdim=True)
    return values.gather(dim, index).squeeze(dim), mask.any(dim=dim)


class BoostingLoss(CooperativeLoss):
    """Base of the DBL boosting losses: reads ``i2t`` of both branches, **sums** over the batch.

    Subclasses implement :meth:`compare` and return :meth:`output`. Parts: ``i2t`` (image
    anchors, caption retrieval) and ``t2i`` (caption anchors, image retrieval), plus
    ``positive`` / ``negative`` for the absolute losses.
    """

    reduction: ClassVar[str] = "sum"

    def output(self, i2t: Tensor, t2i: Tensor, **extra: Tensor) -> LossOutput:
        i2t_loss, t2i_loss = i2t.sum(), t2i.sum()
        parts = {"i2t": i2t_loss.detach(), "t2i": t2i_loss.detach()}
        parts.update({key: value.detach() for key, value in extra.items()})
        return LossOutput(loss=i2t_loss + t2i_loss, parts=parts)

    def extra_repr(self) -> str:
        keys = ("gamma", "alpha", "soft", "hardest")
        return ", ".join(f"{k}={getattr(self, k)!r}" for k in keys if hasattr(self, k))


def _relative_arguments(target: Similarities, anchor: Similarities, gamma: float, soft: bool):
    """Hinge arguments of eq. 7/8/18 for every (anchor, candidate) entry, both directions.

    ``row[n, j] = m + (Sa[n,n] - Sa[n,j]) - (St[n,n] - St[n,j])`` (image anchor ``n``) and
    ``col[j, n] = m + (Sa[n,n] - Sa[j,n]) - (St[n,n] - St[j,n])`` (caption anchor ``n``),
    with ``m = gamma`` or ``gamma^SA(x)`` of the anchor's relative distance ``x`` (the
    parenthesised anchor term). Only the entries of negatives are used.
    """
    s_t, s_a = target.i2t, anchor.i2t
    pos_t, pos_a = s_t.diagonal(), s_a.diagonal()
    x_row = pos_a.unsqueeze(1) - s_a
    x_col = pos_a.unsqueeze(0) - s_a
    m_row = gamma_sa(x_row, gamma, D_X) if soft else gamma
    m_col = gamma_sa(x_col, gamma, D_X) if soft else gamma
    row = m_row + x_row - (pos_t.unsqueeze(1) - s_t)
    col = m_col + x_col - (pos_t.unsqueeze(0) - s_t)
    return row, col


def _absolute_arguments(target: Similarities, anchor: Similarities, gamma_1: float, gamma_2: float, soft: bool):
    """Hinge arguments of eq. 9/10/20: ``(positive (B,), negative (B, B))``.

    ``positive[n] = m1 + Sa[n,n] - St[n,n]`` and ``negative[i, j] = m2 + St[i,j] - Sa[i,j]``
    (one matrix serves both directions: row ``n`` holds image anchor ``n``'s negative
    captions, column ``n`` caption anchor ``n``'s negative images), with ``m1 = gamma_1`` or
    ``gamma_1^SA(Sa[n,n])`` and ``m2 = gamma_2`` or ``gamma_2^SA(Sa[i,j])``.
    """
    s_t, s_a = target.i2t, anchor.i2t
    pos_t, pos_a = s_t.diagonal(), s_a.diagonal()
    m_1 = gamma_sa(pos_a, gamma_1, D_Y) if soft else gamma_1
    m_2 = gamma_sa_negative(s_a, gamma_2, D_Y) if soft else gamma_2
    return m_1 + pos_a - pos_t, m_2 + s_t - s_a


# --------------------------------------------------------------------------- relative


@register_cooperative_loss
class RelativeSumLoss(BoostingLoss):
    """RS: Relative Sum boosting loss (DBL eq. 7), summed over the batch (eq. 6).

    For pair ``n``, over its negatives ``j``::

        i2t_n = sum_j [gamma + (Sa[n,n] - Sa[n,j]) - (St[n,n] - St[n,j])]_+
        t2i_n = sum_j [gamma + (Sa[n,n] - Sa[j,n]) - (St[n,n] - St[j,n])]_+

    The target must beat the anchor's relative distance of every triplet by ``gamma``.
    ``soft=True`` replaces ``gamma`` by ``gamma^SA(Sa[n,n] - Sa[n,j])`` per triplet, as eq. 18
    does for RM: an itrlab extension, the paper evaluates soft margins only for RM and AM.
    """

    name = "rs"

    def __init__(self, gamma: float, soft: bool):
        super().__init__()
        self.gamma, self.soft = gamma, soft

    def compare(self, target: Similarities, anchor: Similarities) -> LossOutput:
        negatives = negative_mask(target.image_ids)
        row, col = _relative_arguments(target, anchor, self.gamma, self.soft)
        return self.output(masked_sum(hinge(row), negatives, dim=1), masked_sum(hinge(col), negatives, dim=0))


@register_cooperative_loss
class RelativeMaxLoss(BoostingLoss):
    """RM: Relative Max boosting loss (DBL eq. 8; soft form eq. 18), summed over the batch.

    For pair ``n``::

        i2t_n = [gamma + (Sa[n,n] - Sa[n,c]) - (St[n,n] - St[n,c])]_+,   c = argmax_j (St[n,j] - Sa[n,j])
        t2i_n = [gamma + (Sa[n,n] - Sa[i,n]) - (St[n,n] - St[i,n])]_+,   i = argmax_j (St[j,n] - Sa[j,n])

    with ``j`` over the negatives of ``n``. The hardest negatives ``(c, i)`` (the paper's
    ``c-check, i-check``) are those where the target's similarity most exceeds the anchor's,
    not the target's own most similar negatives. With a fixed ``gamma`` this is exactly the
    largest of RS's hinges, so ``RM <= RS``. (Exact ties in ``St - Sa`` go to ``torch.argmax``'s
    choice; they change nothing with a fixed margin.)

    ``soft=True`` (eq. 17-18): ``gamma`` becomes ``gamma^SA(x)``, ``x = Sa[n,n] - Sa[n,c]``
    (resp. ``Sa[n,n] - Sa[i,n]``), the anchor's relative distance, with ``d_x = 2``.

    ``hardest`` only matters with ``soft=True``, where the soft margin makes the two readings
    differ. ``"difference"`` (default) keeps eq. 8's ``argmax (St - Sa)``, as the text of eq.
    18 reuses eq. 8's hardest negatives; ``"violation"`` takes the negative with the largest
    soft hinge argument (the reading of the soft margins left commented out in the authors'
    code, which build the margin per entry and then take the max of the cost matrix).
    """

    name = "rm"

    def __init__(self, gamma: float, soft: bool, hardest: str):
        super().__init__()
        self.gamma, self.soft, self.hardest = gamma, soft, hardest

    def compare(self, target: Similarities, anchor: Similarities) -> LossOutput:
        negatives = negative_mask(target.image_ids)
        row, col = _relative_arguments(target, anchor, self.gamma, self.soft)
        difference = target.i2t - anchor.i2t
        row_keys, col_keys = (difference, difference) if self.hardest == "difference" else (row, col)
        row_picked, row_has = _pick(row, row_keys, negatives, dim=1)
        col_picked, col_has = _pick(col, col_keys, negatives, dim=0)
        zero = torch.zeros_like(row_picked)
        i2t = torch.where(row_has, hinge(row_picked), zero)
        t2i = torch.where(col_has, hinge(col_picked), zero)
        return self.output(i2t, t2i)


# --------------------------------------------------------------------------- absolute


class _AbsoluteLoss(BoostingLoss):
    def __init__(self, gamma: float, alpha: float, soft: bool):
        super().__init__()
        self.gamma, self.alpha, self.soft = gamma, alpha, soft

    @property
    def gamma_1(self) -> float:
        """Margin of the positive pairs, ``alpha * gamma`` (eq. 9)."""
        return self.alpha * self.gamma

    @property
    def gamma_2(self) -> float:
        """Margin of the negative pairs, ``gamma - alpha * gamma`` (eq. 9)."""
        return self.gamma - self.alpha * self.gamma


@register_cooperative_loss
class AbsoluteSumLoss(_AbsoluteLoss):
    """AS: Absolute Sum boosting loss (DBL eq. 9), summed over the batch (eq. 6).

    For pair ``n``, over its ``N_n`` negatives ``j``::

        i2t_n = sum_j ([gamma_1 + Sa[n,n] - St[n,n]]_+ + [gamma_2 + St[n,j] - Sa[n,j]]_+)
        t2i_n = sum_j ([gamma_1 + Sa[n,n] - St[n,n]]_+ + [gamma_2 + St[j,n] - Sa[j,n]]_+)

    ``gamma_1 = alpha gamma``, ``gamma_2 = gamma - alpha gamma``. As eq. 9's parentheses say,
    the positive hinge sits inside the sum: it counts once per triplet (``N_n`` times per
    direction). That reading is also the one under which the paper's ``RS <= AS`` holds
    term by term (eq. 11); counting it once would break it.

    ``soft=True``: ``gamma_1^SA(Sa[n,n])`` and ``gamma_2^SA(Sa[n,j])`` (``d_y = 1``) per
    triplet, as eq. 20 does for AM: an itrlab extension, not evaluated in the paper.

    Parts besides ``i2t`` / ``t2i``: ``positive`` (all positive hinges) and ``negative``.
    """

    name = "as"

    def compare(self, target: Similarities, anchor: Similarities) -> LossOutput:
        negatives = negative_mask(target.image_ids)
        positive_arg, negative_arg = _absolute_arguments(target, anchor, self.gamma_1, self.gamma_2, self.soft)
        positive = hinge(positive_arg)
        negative = hinge(negative_arg)
        dtype = positive.dtype
        pos_i2t = negatives.sum(dim=1).to(dtype) * positive
        pos_t2i = negatives.sum(dim=0).to(dtype) * positive
        neg_i2t = masked_sum(negative, negatives, dim=1)
        neg_t2i = masked_sum(negative, negatives, dim=0)
        return self.output(
            pos_i2t + neg_i2t, pos_t2i + neg_t2i, positive=(pos_i2t + pos_t2i).sum(), negative=(neg_i2t + neg_t2i).sum()
        )


@register_cooperative_loss
class AbsoluteMaxLoss(_AbsoluteLoss):
    """AM: Absolute Max boosting loss (DBL eq. 10; soft form eq. 19-20), summed over the batch.

    For pair ``n``, with the hardest negatives ``c``, ``i`` of eq. 8 (the ones where the
    target's similarity most exceeds the anchor's, ``argmax_j (St - Sa)``)::

        i2t_n = [gamma_1 + Sa[n,n] - St[n,n]]_+ + [gamma_2 + St[n,c] - Sa[n,c]]_+
        t2i_n = [gamma_1 + Sa[n,n] - St[n,n]]_+ + [gamma_2 + St[i,n] - Sa[i,n]]_+

    The positive hinge counts once per direction (twice per pair), as in eq. 10 and the
    authors' code. ``RM <= AM`` (eq. 13). (The extraction of eq. 10 lost the check accents;
    the text says its hardest negatives are those of eq. 8.)

    ``soft=True`` (eq. 19-20): ``gamma_1^SA(Sa[n,n])`` on the anchor's positive similarity
    and ``gamma_2^SA(Sa[n,c])`` (resp. ``Sa[i,n]``) on the anchor's negative one, ``d_y = 1``.
    ``hardest`` as in :class:`RelativeMaxLoss` (``"violation"``: the negative whose soft
    hinge argument ``gamma_2^SA(Sa) + St - Sa`` is largest).

    Parts besides ``i2t`` / ``t2i``: ``positive`` (all positive hinges) and ``negative``.
    """

    name = "am"

    def __init__(self, gamma: float, alpha: float, soft: bool, hardest: str):
        super().__init__(gamma, alpha, soft)
        self.hardest = hardest

    def compare(self, target: Similarities, anchor: Similarities) -> LossOutput:
        negatives = negative_mask(target.image_ids)
        positive_arg, negative_arg = _absolute_arguments(target, anchor, self.gamma_1, self.gamma_2, self.soft)
        keys = target.i2t - anchor.i2t if self.hardest == "difference" else negative_arg
        neg_row, row_has = _pick(negative_arg, keys, negatives, dim=1)
        neg_col, col_has = _pick(negative_arg, keys, negatives, dim=0)
        positive = hinge(positive_arg)
        zero = torch.zeros_like(positive)
        pos_i2t, pos_t2i = torch.where(row_has, positive, zero), torch.where(col_has, positive, zero)
        neg_i2t, neg_t2i = torch.where(row_has, hinge(neg_row), zero), torch.where(col_has, hinge(neg_col), zero)
        return self.output(
            pos_i2t + neg_i2t, pos_t2i + neg_t2i, positive=(pos_i2t + pos_t2i).sum(), negative=(neg_i2t + neg_t2i).sum()
        )


# --------------------------------------------------------------------------- combinations


@register_cooperative_loss
class BoostingCombinationLoss(BoostingLoss):
    """The average of a relative and an absolute boosting loss (Table IV models H and I).

    ``L = (L_relative + L_absolute) / 2`` ("Both model #H and model #I average two boosting
    loss"): H is ``relative="rs", absolute="as"``, I is ``relative="rm", absolute="am"``
    (the default). Both parts are batch sums, so the average is too. ``gamma``, ``soft``
    (and ``hardest`` for a Max form) go to both losses, ``alpha`` to the absolute one.

    Parts: ``i2t`` / ``t2i`` (the average of the two losses' parts, adding up to the loss),
    ``relative`` and ``absolute`` (each whole loss, before averaging).
    """

    name = "dbl"

    def __init__(self, relative: str, absolute: str, gamma: float, alpha: float, soft: bool, hardest: str):
        super().__init__()
        self.relative, self.absolute = relative, absolute
        self.gamma, self.alpha, self.soft, self.hardest = gamma, alpha, soft, hardest
        self.relative_loss: BoostingLoss = (
            RelativeMaxLoss(gamma, soft, hardest) if relative == "rm" else RelativeSumLoss(gamma, soft)
        )
        self.absolute_loss: BoostingLoss = (
            AbsoluteMaxLoss(gamma, alpha, soft, hardest) if absolute == "am" else AbsoluteSumLoss(gamma, alpha, soft)
        )

    def compare(self, target: Similarities, anchor: Similarities) -> LossOutput:
        rel = self.relative_loss.compare(target, anchor)
        absolute = self.absolute_loss.compare(target, anchor)
        parts = {
            "i2t": (rel.parts["i2t"] + absolute.parts["i2t"]) / 2,
            "t2i": (rel.parts["t2i"] + absolute.parts["t2i"]) / 2,
            "relative": rel.loss.detach(),
            "absolute": absolute.loss.detach(),
        }
        return LossOutput(loss=(rel.loss + absolute.loss) / 2, parts=parts)

    def extra_repr(self) -> str:
        return f"relative={self.relative!r}, absolute={self.absolute!r}, " + super().extra_repr()


# --------------------------------------------------------------------------- Table IV


def build_dbl_strategy(strategy: str, **params) -> BoostingLoss | None:
    """The boosting loss of Table IV model ``strategy`` ("A".."I") with ``params``; ``None`` for "A".

    Raises as :func:`~itrlab.methods.dbl.strategies.strategy_settings` does.
    """
    typed = strategy_settings(strategy, params)
    return None if typed is None else COOPERATIVE_LOSSES.build(*typed)
