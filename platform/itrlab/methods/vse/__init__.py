"""VSE and VSE++: the plain dual encoders every ITR paper compares against."""

from itrlab.methods.registry import Paper, register_paper
from itrlab.methods.vse.method import VseMethod, VseSettings

PAPER = register_paper(Paper(
    "VSE++", "VSE++: Improving Visual-Semantic Embeddings with Hard Negatives (BMVC 2018)",
    "docs/papers/vse.md"))

__all__ = ["PAPER", "VseMethod", "VseSettings"]
