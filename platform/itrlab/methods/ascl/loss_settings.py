"""The settings of AsCL's loss (eq. 5-7) and its "w triplet" variant, declared without torch
(:mod:`itrlab.losses.registry`); the losses themselves are in :mod:`.losses`."""

from __future__ import annotations

from itrlab.losses.registry import LOSSES, LossSettings
from itrlab.losses.settings import Margin, Temperature
from itrlab.numbers import Flag

MODULE = "itrlab.methods.ascl.losses"


class AsymmetrySettings(LossSettings):
    """AsCL's InfoNCE (eq. 5-7): τ (paper: 0.05 COCO, 0.01 F30K); ``use_positives`` False is "w/o Pos"
    (``L_I`` only), ``use_negatives`` False "w/o Neg" (no generated negatives)."""

    tau: Temperature = 0.05
    use_positives: Flag = True
    use_negatives: Flag = True


class AsymmetryTripletSettings(LossSettings):
    """AsCL "w triplet": VSE++'s margin over the same candidate sets."""

    margin: Margin = 0.2
    use_positives: Flag = True
    use_negatives: Flag = True


LOSSES.declare("ascl", AsymmetrySettings, MODULE)
LOSSES.declare("ascl_triplet", AsymmetryTripletSettings, MODULE)
