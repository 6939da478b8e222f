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
from .boosting import (
    DBL_STRATEGIES,
    AbsoluteMaxLoss,
    AbsoluteSumLoss,
    BoostingCombinationLoss,
    BoostingLoss,
    RelativeMaxLoss,
    RelativeSumLoss,
    build_dbl_strategy,
)
from .soft_margin import gamma_sa, gamma_sa_negative
from .distillation import (
    DinoLoss,
    DinoStarLoss,
    MutualLearningLoss,
    RelationalDistanceLoss,
    SoftDarkRankLoss,
)
from .projection import CMPMLoss, MaxPolynomialLoss
from .schedule import WarmupLoss
from .ascl import AsymmetrySensitiveLoss, AsymmetryTripletLoss  # noqa: F401  (registers ascl, ascl_triplet)
from .dcl import DCLInstanceLoss, DCLLoss, MemoryDCLLoss, PrototypeClusterLoss  # noqa: F401  (registers dcl_i, dcl, mdcl, pgc)

__all__ = [
    "CMPMLoss",
    "DinoLoss",
    "DinoStarLoss",
    "MaxPolynomialLoss",
    "MutualLearningLoss",
    "RelationalDistanceLoss",
    "SoftDarkRankLoss",
    "DBL_STRATEGIES",
    "AbsoluteMaxLoss",
    "AbsoluteSumLoss",
    "BoostingCombinationLoss",
    "BoostingLoss",
    "RelativeMaxLoss",
    "RelativeSumLoss",
    "build_dbl_strategy",
    "gamma_sa",
    "gamma_sa_negative",
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
]
