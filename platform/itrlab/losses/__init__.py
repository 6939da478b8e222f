"""Retrieval losses: pure functions of batch similarity matrices (see DESIGN.md, "Contracts").

Each loss is an ``nn.Module`` whose ``forward(sims: Similarities) -> LossOutput``; look one up
by name with :func:`build_loss`.
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
from .cooperative import CooperativeLoss, detached
from .contrastive import (
    ContrastiveMaxOfNegativesLoss,
    ContrastiveSumOfNegativesLoss,
    MultimodalNCELoss,
)
from .registry import (
    COOPERATIVE_LOSSES,
    LOSSES,
    LossRegistry,
    build_cooperative_loss,
    build_loss,
    cooperative_loss_param_names,
    loss_param_names,
    register_cooperative_loss,
    register_loss,
)
from .triplet import MaxOfHingesLoss, SumOfHingesLoss

__all__ = [
    "COOPERATIVE_LOSSES",
    "LOSSES",
    "LossRegistry",
    "build_cooperative_loss",
    "cooperative_loss_param_names",
    "register_cooperative_loss",
    "register_loss",
    "ContrastiveMaxOfNegativesLoss",
    "CooperativeLoss",
    "detached",
    "ContrastiveSumOfNegativesLoss",
    "LossOutput",
    "MaxOfHingesLoss",
    "MultimodalNCELoss",
    "RetrievalLoss",
    "Similarities",
    "SumOfHingesLoss",
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
]
