"""Deep Boosting Learning (Diao et al.): cooperative schemes around any method, and their losses.

``boosting`` (RS, RM, AS, AM and their combination; Table IV's strategies) with ``soft_margin``
(γ^SA, eq. 14-20); the baselines DBL compares against: ``distillation`` (DR, RKD, DML, DINO) and
``projection`` (CMPM, MPL); ``cooperative`` (the OAS, OSS and MSS scenarios, eq. 22), ``settings``
(the ``cooperative`` config section, typed) and ``scheme`` (its checks and how it wraps a method), with
``cooperative_loss`` (the registry of the losses between two branches).
"""

from itrlab.methods.registry import Paper, register_paper
from itrlab.methods.dbl.boosting import (DBL_STRATEGIES, AbsoluteMaxLoss, AbsoluteSumLoss, BoostingCombinationLoss,
                                         BoostingLoss, RelativeMaxLoss, RelativeSumLoss, build_dbl_strategy)
from itrlab.methods.dbl.cooperative import CooperativeMethod, ema_momentum
from itrlab.methods.dbl.cooperative_loss import COOPERATIVE_LOSSES, CooperativeLoss, detached, register_cooperative_loss
from itrlab.methods.dbl.distillation import (DinoLoss, DinoStarLoss, MutualLearningLoss, RelationalDistanceLoss,
                                             SoftDarkRankLoss)
from itrlab.methods.dbl.projection import CMPMLoss, MaxPolynomialLoss
from itrlab.methods.dbl.scheme import COOPERATIVE_SCHEME, cooperative_loss
from itrlab.methods.dbl.settings import CooperativeSettings, EmaSettings
from itrlab.methods.dbl.soft_margin import gamma_sa, gamma_sa_negative

PAPER = register_paper(Paper(
    "DBL", "Deep Boosting Learning: A Brand-new Cooperative Approach for Image-Text Matching",
    "docs/papers/dbl.md"))

__all__ = ["PAPER", "COOPERATIVE_LOSSES", "COOPERATIVE_SCHEME", "CooperativeSettings", "EmaSettings", "DBL_STRATEGIES", "AbsoluteMaxLoss", "AbsoluteSumLoss", "BoostingCombinationLoss",
           "BoostingLoss", "CMPMLoss", "CooperativeLoss", "CooperativeMethod", "DinoLoss", "DinoStarLoss",
           "MaxPolynomialLoss", "MutualLearningLoss", "RelationalDistanceLoss", "RelativeMaxLoss", "RelativeSumLoss",
           "SoftDarkRankLoss", "build_dbl_strategy", "cooperative_loss", "detached", "register_cooperative_loss", "ema_momentum", "gamma_sa",
           "gamma_sa_negative"]
