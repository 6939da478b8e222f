"""What a logged part of a loss can be compared against: its floor, its plateau, and whether it is a term.

The training loop logs an epoch's mean loss and each named part of it (``loss_<part>``). How far a part
went is read against its own first epoch (:mod:`itrlab.report.diagnostics`); a ratio to that first
value means something only where the part has a known floor (a cross-entropy or a hinge cannot go below
0; a contrastive loss with a margin inside its logarithm can go below zero, and then ``last / first``
says nothing). A method declares what it knows of the parts it logs (:attr:`MethodModule.part_bounds
<itrlab.methods.base.MethodModule.part_bounds>`), by the part's name as it logs it; an undeclared part
gets its first and last values and their difference, no ratio.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PartBound:
    """What is known of one logged part: ``floor``, no value below it (None: unknown, or none: the part can
    go below any value it showed); ``plateau``, in words, the value it sits at before it learns or what its
    values mean (``"ln K: uniform over the K clusters"``); ``statistic``, a figure logged beside the loss
    (an attention weight, a share of labelled pairs), no term of its total."""

    floor: float | None = None
    plateau: str = ""
    statistic: bool = False
