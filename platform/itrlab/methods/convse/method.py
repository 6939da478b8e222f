"""MVN, ConVSE and ConVSE++ (Jain and Verma): a dual encoder with a projection head and an NCE loss.

The loss of each (:mod:`itrlab.methods.convse.losses`) and its head (``model.projection_hidden``,
two FC layers) are set by ``configs/methods/<name>.yaml``; any dual loss works with any of them.
"""

from __future__ import annotations

from typing import Literal

from itrlab.methods.base import MethodSettings
from itrlab.methods.dual import DualEncoderMethod
from itrlab.methods.registry import register_method


class ConvseSettings(MethodSettings):
    """MVN, ConVSE and ConVSE++ have no keys of their own (the head is ``model``, τ and α ``loss``)."""

    name: Literal["mvn", "convse", "convsepp"]


@register_method("mvn", "convse", "convsepp")
class ConvseMethod(DualEncoderMethod):
    settings = ConvseSettings
