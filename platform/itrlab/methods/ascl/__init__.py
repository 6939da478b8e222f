"""AsCL (Gong et al.): the asymmetry-sensitive contrastive loss, its sample generators and fusion scorer.

``losses`` holds the loss (eq. 5-7) and its "w triplet" variant; ``text_augment`` the generators of
type-I negatives and type-II/III positives; ``fusion`` and ``model`` the scorer (eq. 1-4);
``method`` puts them together.
"""

from itrlab.methods.registry import Paper, register_paper
from itrlab.methods.ascl.losses import AsymmetrySensitiveLoss, AsymmetryTripletLoss
from itrlab.methods.ascl.method import AsclMethod, AsclSettings

PAPER = register_paper(Paper(
    "AsCL",
    "AsCL: An Asymmetry-sensitive Contrastive Learning Method for Image-Text Retrieval with Cross-Modal Fusion",
    "docs/papers/ascl.md"))

__all__ = ["PAPER", "AsclMethod", "AsclSettings", "AsymmetrySensitiveLoss", "AsymmetryTripletLoss"]
