"""ConVSE and ConVSE++ (Jain and Verma), and MVN, their NCE baseline: method and losses (eq. 6-14)."""

from itrlab.methods.registry import Paper, register_paper
from itrlab.methods.convse.losses import ContrastiveMaxOfNegativesLoss, ContrastiveSumOfNegativesLoss, MultimodalNCELoss
from itrlab.methods.convse.method import ConvseMethod, ConvseSettings

PAPER = register_paper(Paper(
    "ConVSE", "Contrastive Learning of Visual-Semantic Embeddings (Jain and Verma)",
    "docs/papers/convse.md"))

__all__ = ["PAPER", "ContrastiveMaxOfNegativesLoss", "ContrastiveSumOfNegativesLoss", "ConvseMethod", "ConvseSettings",
           "MultimodalNCELoss"]
