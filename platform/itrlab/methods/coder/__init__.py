"""CODER (Wang et al.): DCL and M-DCL, momentum memory banks, the concept graph and PGC (eq. 1-8; the modules:
docs/architecture.md). Importing the package declares, without torch, the paper, its method and its losses' settings;
the method and the losses are imported when first used (:mod:`itrlab.lazy`)."""

from itrlab.lazy import lazy_exports
from itrlab.methods.coder import loss_settings  # noqa: F401  (declares its losses' settings)
from itrlab.methods.registry import METHODS, Paper, register_paper

METHODS.declare("itrlab.methods.coder.method", "coder")
PAPER = register_paper(
    Paper(
        "CODER",
        "CODER: Coupled Diversity-Sensitive Momentum Contrastive Learning for Image-Text Retrieval (ECCV 2022)",
        "docs/papers/coder.md",
    )
)

_EXPORTS = {
    **dict.fromkeys(["DCLInstanceLoss", "DCLLoss", "MemoryDCLLoss", "PrototypeClusterLoss"], "losses"),
    **dict.fromkeys(["CoderMethod", "CoderSettings"], "method"),
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = ["PAPER", *_EXPORTS]
