"""ConVSE and ConVSE++ (Jain and Verma), and MVN, their NCE baseline: method and losses (eq. 6-14).

Importing the package declares, without torch, the paper, its methods and its losses' settings
(``loss_settings``); the method and the losses are imported when first used (:mod:`itrlab.lazy`)."""

from itrlab.lazy import lazy_exports
from itrlab.methods.convse import loss_settings  # noqa: F401  (declares its losses' settings)
from itrlab.methods.registry import METHODS, Paper, register_paper

METHODS.declare("itrlab.methods.convse.method", "mvn", "convse", "convsepp")
PAPER = register_paper(
    Paper("ConVSE", "Contrastive Learning of Visual-Semantic Embeddings (Jain and Verma)", "docs/papers/convse.md")
)

_EXPORTS = {
    **dict.fromkeys(["ContrastiveMaxOfNegativesLoss", "ContrastiveSumOfNegativesLoss", "MultimodalNCELoss"], "losses"),
    **dict.fromkeys(["ConvseMethod", "ConvseSettings"], "method"),
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = ["PAPER", *_EXPORTS]
