"""VSE and VSE++: the plain dual encoders every ITR paper compares against.

Importing the package declares, without torch, the paper and its methods (their losses are the shared
``vse`` and ``vsepp``); the method is imported when first used (:mod:`itrlab.lazy`)."""

from itrlab.lazy import lazy_exports
from itrlab.methods.registry import METHODS, Paper, register_paper

METHODS.declare("itrlab.methods.vse.method", "vse", "vsepp")
PAPER = register_paper(
    Paper("VSE++", "VSE++: Improving Visual-Semantic Embeddings with Hard Negatives (BMVC 2018)", "docs/papers/vse.md")
)

_EXPORTS = dict.fromkeys(["VseMethod", "VseSettings"], "method")
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = ["PAPER", *_EXPORTS]
