"""CLIP (Radford et al., 2021): the dual encoder trained with the symmetric InfoNCE loss and a
learnable temperature, the contrastive baseline of image-text retrieval."""

from itrlab.methods.clip.losses import LOGIT_SCALE, SymmetricInfoNCELoss
from itrlab.methods.clip.method import ClipMethod, ClipSettings

__all__ = ["LOGIT_SCALE", "ClipMethod", "ClipSettings", "SymmetricInfoNCELoss"]
