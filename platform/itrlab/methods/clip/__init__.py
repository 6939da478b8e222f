"""CLIP (Radford et al., 2021): the dual encoder trained with the symmetric InfoNCE loss and a
learnable temperature, the contrastive baseline of image-text retrieval."""

from itrlab.methods.registry import Paper, register_paper
from itrlab.methods.clip.losses import LOGIT_SCALE, SymmetricInfoNCELoss
from itrlab.methods.clip.method import ClipMethod, ClipSettings

PAPER = register_paper(Paper(
    "CLIP", "Learning Transferable Visual Models From Natural Language Supervision (ICML 2021)",
    "docs/adding-a-method.md"))

__all__ = ["PAPER", "LOGIT_SCALE", "ClipMethod", "ClipSettings", "SymmetricInfoNCELoss"]
