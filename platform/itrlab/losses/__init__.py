"""Retrieval losses two or more papers share: pure functions of batch similarity matrices.

Each loss is an ``nn.Module`` whose ``forward(sims: Similarities) -> LossOutput`` (see
``docs/architecture.md``, "Contracts"); look one up by name with :func:`build_loss`. A paper's own
losses live in its package (``itrlab.methods.<paper>.losses``) and register themselves in the same
registries when :mod:`itrlab.methods` is imported.
"""

from .base import (
    LossOutput,
    RetrievalLoss,
    Similarities,
    hardest_negative,
    hardest_negative_hinge,
    hinge,
    masked_logsumexp,
    masked_sum,
    nce_term,
    negative_mask,
    positive_mask,
    positive_scores,
)
from .registry import LOSSES, LossRegistry, build_loss, loss_param_names, register_loss, registered_loss_classes
from .schedule import WarmupLoss
from .triplet import MaxOfHingesLoss, SumOfHingesLoss

__all__ = [
    "LOSSES",
    "LossOutput",
    "LossRegistry",
    "MaxOfHingesLoss",
    "RetrievalLoss",
    "Similarities",
    "SumOfHingesLoss",
    "WarmupLoss",
    "build_loss",
    "hardest_negative",
    "hardest_negative_hinge",
    "hinge",
    "loss_param_names",
    "masked_logsumexp",
    "masked_sum",
    "nce_term",
    "negative_mask",
    "positive_mask",
    "positive_scores",
    "register_loss",
    "registered_loss_classes",
]
