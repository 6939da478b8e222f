"""The settings of the losses this package defines, declared without torch, and the types of the settings
several losses share (a hinge margin, a temperature).

Each :class:`~itrlab.losses.registry.LossSettings` model is the one place a loss's settings are typed
(:mod:`itrlab.losses.registry`); a paper's package declares its own losses' settings the same way.
"""

from __future__ import annotations

from itrlab.losses.registry import LOSSES, LossSettings
from itrlab.numbers import number

Margin = number(ge=0, meaning="the hinge margin")
"""The type of a hinge margin setting (VSE's and VSE++'s α; DBL's γ of the task loss)."""

Temperature = number(gt=0, meaning="the temperature τ")
"""The type of a softmax temperature setting τ."""


class HingeSettings(LossSettings):
    """VSE's sum of hinges and VSE++'s max of hinges: the margin α."""

    margin: Margin = 0.2


class MaxOfHingesSettings(HingeSettings):
    """VSE++'s max of hinges: the margin α, and its plateau."""

    def collapse_value(self, batch_size: int) -> float:
        """``2 α B``: with every similarity equal, each of the ``B`` anchors of each direction has its hardest
        negative's hinge at exactly the margin, and the loss sums them over the batch."""
        return 2 * self.margin * batch_size


LOSSES.declare("vse", HingeSettings, "itrlab.losses.triplet")
LOSSES.declare("vsepp", MaxOfHingesSettings, "itrlab.losses.triplet")
