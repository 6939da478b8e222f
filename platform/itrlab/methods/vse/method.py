"""VSE and VSE++ (Faghri et al.; ConVSE paper eq. 2 and 5): the plain dual encoder with a hinge loss.

``vse`` sums the hinges over a batch's negatives, ``vsepp`` keeps the hardest one; the losses
(:mod:`itrlab.losses.triplet`) are shared with every paper that uses them as a baseline.
"""

from __future__ import annotations

from typing import Literal

from itrlab.methods.base import MethodSettings
from itrlab.methods.dual import DualEncoderMethod
from itrlab.methods.registry import register_method


class VseSettings(MethodSettings):
    """The plain dual encoders have no keys of their own (the encoder is ``model``, the loss ``loss``)."""

    name: Literal["vse", "vsepp"]


@register_method("vse", "vsepp")
class VseMethod(DualEncoderMethod):
    settings = VseSettings
