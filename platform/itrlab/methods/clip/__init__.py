"""CLIP (Radford et al., 2021): the dual encoder trained with the symmetric InfoNCE loss and a
learnable temperature, the contrastive baseline of image-text retrieval.

Importing the package declares, without torch, the paper, its method and its loss's settings; the
method and the loss are imported when first used (:mod:`itrlab.lazy`)."""

from itrlab.lazy import lazy_exports
from itrlab.methods.clip import loss_settings  # noqa: F401  (declares its loss's settings)
from itrlab.methods.registry import METHODS, Paper, register_paper

METHODS.declare("itrlab.methods.clip.method", "clip")
PAPER = register_paper(
    Paper(
        "CLIP",
        "Learning Transferable Visual Models From Natural Language Supervision (ICML 2021)",
        "docs/adding-a-method.md",
    )
)

_EXPORTS = {
    **dict.fromkeys(["LOGIT_SCALE", "SymmetricInfoNCELoss"], "losses"),
    **dict.fromkeys(["ClipMethod", "ClipSettings"], "method"),
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = ["PAPER", *_EXPORTS]
