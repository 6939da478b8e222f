"""The settings of CLIP's symmetric InfoNCE loss (none: its temperature is the method's learnable
``logit_scale``), declared without torch (:mod:`itrlab.losses.registry`); the loss is in :mod:`.losses`."""

from __future__ import annotations

from itrlab.losses.registry import LOSSES, LossSettings


class SymmetricInfoNCESettings(LossSettings):
    """No setting."""


LOSSES.declare("clip", SymmetricInfoNCESettings, "itrlab.methods.clip.losses")
