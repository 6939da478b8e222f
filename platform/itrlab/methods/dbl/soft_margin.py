"""DBL's soft adaptive margins ``gamma^SA`` (Diao et al., "Deep Boosting Learning", eq. 14-20).

A boosting loss asks the target branch to beat the anchor branch's distance by a margin. Each
distance has a *theoretical maximum* (TM): with similarities in ``[-1, 1]`` a relative
distance ``x = S^a(pos) - S^a(neg)`` can grow at most to ``d_x = 2`` and an absolute
similarity ``y`` lies in ``[-d_y, d_y]`` with ``d_y = 1``. Near that extreme a fixed margin
asks for the impossible, so the soft margin shrinks to 0 there, following a sigmoid whose
sharpness ``eps`` makes its slope at the extreme equal that of the TM (eq. 15-16):
``eps = 2 / margin``.

Both functions are written with ``tanh``, which equals the paper's form exactly
(``2m / (1 + e^{2z}) - m = -m tanh(z)``) and cannot overflow. The margin is a function of
the anchor's (detached) similarities only, so it carries no gradient in the boosting losses.
They assume similarities in ``[-1, 1]`` (cosine or tanh scores); beyond the bound the margin
turns negative (it tends to ``-margin``), as the formula does.
"""

from __future__ import annotations

import torch
from torch import Tensor

D_X = 2.0
"""Theoretical maximum of a relative distance ``S(pos) - S(neg)`` (eq. 14-18)."""

D_Y = 1.0
"""Bound of an absolute similarity, ``S in [-d_y, d_y]`` (eq. 19-20)."""


def gamma_sa(x: Tensor, margin: float, d: float) -> Tensor:
    """Soft margin that vanishes at the upper extreme ``d`` (eq. 14/17; ``gamma_1^SA`` of eq. 19).

    ::

        gamma^SA(x) = 2 m / (1 + exp((2 / m) (x - d))) - m  =  m * tanh((d - x) / m)

    with ``m = margin``. ``gamma^SA(d) = 0``, its slope at ``d`` is ``-1`` (that of the TM
    ``d - x``), and it tends to ``m`` far below ``d``. ``margin = 0`` gives 0 everywhere.

    Used with ``m = gamma``, ``d = D_X`` on the anchor's relative distance (RM, eq. 18) and
    with ``m = gamma_1``, ``d = D_Y`` on the anchor's positive similarity (AM, eq. 20).
    """
    if margin == 0:
        return torch.zeros_like(x)
    return margin * torch.tanh((d - x) / margin)


def gamma_sa_negative(y: Tensor, margin: float, d: float) -> Tensor:
    """Soft margin that vanishes at the lower extreme ``-d`` (``gamma_2^SA`` of eq. 19).

    ::

        gamma_2^SA(y) = 2 m / (1 + exp((-2 / m) (y + d))) - m  =  m * tanh((y + d) / m)

    with ``m = margin``. ``gamma_2^SA(-d) = 0``, its slope at ``-d`` is ``+1`` (that of the TM
    ``y + d``: a negative similarity can fall at most to ``-d``), and it tends to ``m`` far
    above ``-d``. ``margin = 0`` gives 0 everywhere.

    Used with ``m = gamma_2``, ``d = D_Y`` on the anchor's negative similarity (AM, eq. 20).
    """
    if margin == 0:
        return torch.zeros_like(y)
    return margin * torch.tanh((y + d) / margin)
