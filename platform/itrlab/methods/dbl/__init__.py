"""Deep Boosting Learning (Diao et al.): cooperative schemes around any method, and their losses (the modules:
docs/architecture.md). Importing the package declares, without torch, the paper, the scheme and its losses' settings;
the losses and the scheme's method are imported when first used (:mod:`itrlab.lazy`)."""

from itrlab.lazy import lazy_exports
from itrlab.methods.dbl.cooperative_settings import CooperativeSettings, EmaSettings
from itrlab.methods.dbl.loss_settings import COOPERATIVE_LOSSES
from itrlab.methods.dbl.scheme import COOPERATIVE_SCHEME, cooperative_loss
from itrlab.methods.dbl.strategies import DBL_STRATEGIES
from itrlab.methods.registry import Paper, register_paper

PAPER = register_paper(
    Paper(
        "DBL", "Deep Boosting Learning: A Brand-new Cooperative Approach for Image-Text Matching", "docs/papers/dbl.md"
    )
)

_EXPORTS = {
    **dict.fromkeys(
        [
            "AbsoluteMaxLoss",
            "AbsoluteSumLoss",
            "BoostingCombinationLoss",
            "BoostingLoss",
            "RelativeMaxLoss",
            "RelativeSumLoss",
            "build_dbl_strategy",
        ],
        "boosting",
    ),
    **dict.fromkeys(["CooperativeMethod", "ema_momentum"], "cooperative"),
    **dict.fromkeys(["CooperativeLoss", "detached", "register_cooperative_loss"], "cooperative_loss"),
    **dict.fromkeys(
        ["DinoLoss", "DinoStarLoss", "MutualLearningLoss", "RelationalDistanceLoss", "SoftDarkRankLoss"], "distillation"
    ),
    **dict.fromkeys(["CMPMLoss", "MaxPolynomialLoss"], "projection"),
    **dict.fromkeys(["gamma_sa", "gamma_sa_negative"], "soft_margin"),
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = [
    "PAPER",
    "COOPERATIVE_LOSSES",
    "COOPERATIVE_SCHEME",
    "CooperativeSettings",
    "EmaSettings",
    "DBL_STRATEGIES",
    "cooperative_loss",
    *_EXPORTS,
]
