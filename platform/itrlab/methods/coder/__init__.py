"""CODER (Wang et al.): DCL and M-DCL, momentum memory banks, the concept graph and PGC (eq. 1-8).

``losses`` holds the pure loss functions; ``memory``, ``prototypes`` (with ``kmeans``), ``concepts``
and ``concept_vocab`` the method's stateful parts and data helpers; ``method`` puts them together.
"""

from itrlab.methods.registry import Paper, register_paper
from itrlab.methods.coder.losses import DCLInstanceLoss, DCLLoss, MemoryDCLLoss, PrototypeClusterLoss
from itrlab.methods.coder.method import CoderMethod, CoderSettings

PAPER = register_paper(Paper(
    "CODER", "CODER: Coupled Diversity-Sensitive Momentum Contrastive Learning for Image-Text Retrieval (ECCV 2022)",
    "docs/papers/coder.md"))

__all__ = ["PAPER", "CoderMethod", "CoderSettings", "DCLInstanceLoss", "DCLLoss", "MemoryDCLLoss", "PrototypeClusterLoss"]
