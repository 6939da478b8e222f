"""The settings of MVN's, ConVSE's and ConVSE++'s losses (eq. 6-14), declared without torch
(:mod:`itrlab.losses.registry`); the losses themselves are in :mod:`.losses`."""

from __future__ import annotations

from itrlab.losses.registry import LOSSES, LossSettings
from itrlab.losses.settings import Margin, Temperature

MODULE = "itrlab.methods.convse.losses"


class NceSettings(LossSettings):
    """MVN's multimodal NCE and ConVSE's l_CSN: the temperature τ."""

    tau: Temperature = 0.1


class ContrastiveMaxSettings(LossSettings):
    """ConVSE++'s l_CMN: the margin α and the temperature τ (eq. 12-14)."""

    margin: Margin = 0.2
    tau: Temperature = 0.1


LOSSES.declare("mvn", NceSettings, MODULE)
LOSSES.declare("convse", NceSettings, MODULE)
LOSSES.declare("convsepp", ContrastiveMaxSettings, MODULE)
