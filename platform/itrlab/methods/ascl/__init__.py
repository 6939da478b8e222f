"""AsCL (Gong et al.): the asymmetry-sensitive contrastive loss, its sample generators and fusion scorer (the modules:
docs/architecture.md). Importing the package declares, without torch, the paper, its method and its losses' settings;
the method and the losses are imported when first used (:mod:`itrlab.lazy`)."""

from itrlab.lazy import lazy_exports
from itrlab.methods.ascl import loss_settings  # noqa: F401  (declares its losses' settings)
from itrlab.methods.registry import METHODS, Paper, register_paper

METHODS.declare("itrlab.methods.ascl.method", "ascl")
PAPER = register_paper(
    Paper(
        "AsCL",
        "AsCL: An Asymmetry-sensitive Contrastive Learning Method for Image-Text Retrieval with Cross-Modal Fusion",
        "docs/papers/ascl.md",
    )
)

_EXPORTS = {
    **dict.fromkeys(["AsymmetrySensitiveLoss", "AsymmetryTripletLoss"], "losses"),
    **dict.fromkeys(["AsclMethod", "AsclSettings"], "method"),
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = ["PAPER", *_EXPORTS]
