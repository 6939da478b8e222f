"""ConVSE and ConVSE++ (Jain and Verma), and MVN, their NCE baseline: method and losses (eq. 6-14)."""

from itrlab.methods.convse.losses import ContrastiveMaxOfNegativesLoss, ContrastiveSumOfNegativesLoss, MultimodalNCELoss
from itrlab.methods.convse.method import ConvseMethod, ConvseSettings

__all__ = ["ContrastiveMaxOfNegativesLoss", "ContrastiveSumOfNegativesLoss", "ConvseMethod", "ConvseSettings",
           "MultimodalNCELoss"]
