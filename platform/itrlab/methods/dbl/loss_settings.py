"""The settings of DBL's losses, declared without torch (:mod:`itrlab.losses.registry`): the boosting losses (eq. 7-10,
17-20; defaults the paper's, :mod:`.boosting`), the baselines DBL compares against (the distillation and mutual-learning
losses, :mod:`.distillation`; CMPM and MPL as task losses, :mod:`.projection`), and :data:`COOPERATIVE_LOSSES`, the
registry of the losses between two branches."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

from annotated_types import Interval, MinLen
from pydantic import model_validator

from itrlab.errors import SettingError
from itrlab.losses.registry import LOSSES, LossRegistry, LossSettings
from itrlab.losses.settings import Margin, Temperature
from itrlab.numbers import Flag, number

COOPERATIVE_LOSSES = LossRegistry("cooperative loss")
"""The losses between two branches (the ``cooperative.loss`` names)."""

BOOSTING, DISTILLATION, PROJECTION = (
    f"itrlab.methods.dbl.{name}" for name in ("boosting", "distillation", "projection")
)

# --------------------------------------------------------------------------- boosting (eq. 7-10, 17-20)

Gamma = number(ge=0, meaning="the boosting margin γ")
Alpha = number(ge=0, le=1, meaning="the split α of γ between positive and negative pairs")
Hardest = Literal["difference", "violation"]


def check_hardest_needs_soft(hardest: str, soft: bool) -> None:
    """``hardest`` chooses between two readings of the soft margin only: without ``soft`` it changes nothing."""
    if hardest != "difference" and not soft:
        raise SettingError(
            "hardest",
            hardest,
            "the hardest-negative rule differs only with soft margins "
            "(soft: true); with a fixed γ both readings pick the same negative",
        )


class RelativeSumSettings(LossSettings):
    """RS (eq. 7): the margin γ; ``soft``: γ^SA per triplet (an itrlab extension)."""

    gamma: Gamma = 0.2
    soft: Flag = False


class HardestRule(LossSettings):
    """The Max forms' ``hardest``, the hardest-negative rule of the soft margins (a base listed before the Sum
    form's settings, so that ``hardest`` follows their fields and checks their ``soft``)."""

    hardest: Hardest = "difference"

    @model_validator(mode="after")
    def _hardest_needs_soft(self):
        check_hardest_needs_soft(self.hardest, self.soft)
        return self


class RelativeMaxSettings(HardestRule, RelativeSumSettings):
    """RM (eq. 8, 18): RS's, and ``hardest``, the hardest-negative rule of the soft margins."""


class AbsoluteSumSettings(LossSettings):
    """AS (eq. 9): γ, its split α (``gamma_1 = alpha gamma`` for the positive, the rest for the negative) and
    ``soft``."""

    gamma: Gamma = 0.2
    alpha: Alpha = 0.5
    soft: Flag = False


class AbsoluteMaxSettings(HardestRule, AbsoluteSumSettings):
    """AM (eq. 10, 20): AS's, and ``hardest`` as RM's."""


class BoostingCombinationSettings(LossSettings):
    """Table IV's H and I: the average of a relative and an absolute loss, with the settings of both."""

    relative: Literal["rs", "rm"] = "rm"
    absolute: Literal["as", "am"] = "am"
    gamma: Gamma = 0.2
    alpha: Alpha = 0.5
    soft: Flag = False
    hardest: Hardest = "difference"

    @model_validator(mode="after")
    def _hardest_of_max_forms(self):
        if self.hardest != "difference" and self.relative == "rs" and self.absolute == "as":
            raise SettingError(
                "hardest",
                self.hardest,
                "the hardest-negative rule applies to the Max forms (rm, am); RS and AS sum over every negative",
            )
        check_hardest_needs_soft(self.hardest, self.soft)
        return self


# --------------------------------------------------------------------------- the baselines DBL compares against

MAX_LIST_LEN = 7  # DarkRank's soft transfer sums over list_len! permutations (7! = 5040)
RkdRelations = Literal["i2t", "all"]


class DarkRankSettings(LossSettings):
    """DR: DarkRank's scale α and power β of its score function, and the candidates per list."""

    alpha: number(gt=0, meaning="DarkRank's scale α") = 3.0
    beta: number(gt=0, meaning="DarkRank's power β") = 3.0
    list_len: Annotated[int, Interval(ge=2, le=MAX_LIST_LEN)] = 4


class RelationalDistanceSettings(LossSettings):
    """RKD: which relations are distilled (``i2t``: image-caption; ``all``: also image-image and caption-caption)."""

    relations: RkdRelations = "i2t"


class MutualLearningSettings(LossSettings):
    """DML: the temperature τ of both branches' softmax."""

    tau: Temperature = 0.1


class DinoSettings(LossSettings):
    """DINO (and DINO*): the student's and the teacher's temperatures, and the teacher's centring."""

    tau_s: number(gt=0, meaning="the student's temperature") = 0.1
    tau_t: number(gt=0, meaning="the teacher's temperature") = 0.04
    center: Flag = True


Coefficients = Annotated[Sequence[number()], MinLen(1)]
"""The type of a polynomial's coefficients (lowest power first): a non-empty list of finite numbers."""


class CmpmSettings(LossSettings):
    """CMPM: the softmax temperature and the ``epsilon`` that keeps ``log(q + eps)`` finite."""

    tau: Temperature = 0.1
    eps: number(gt=0, meaning="the smoothing of log q") = 1e-8


class MaxPolynomialSettings(LossSettings):
    """MPL: the informative-negative margin and the two polynomials (the released code's defaults)."""

    margin: Margin = 0.2
    pos_coeffs: Coefficients = (0.5, -0.7, 0.2)
    neg_coeffs: Coefficients = (0.03, -0.4, 0.9)


for _name, _settings, _module in [
    ("rs", RelativeSumSettings, BOOSTING),
    ("rm", RelativeMaxSettings, BOOSTING),
    ("as", AbsoluteSumSettings, BOOSTING),
    ("am", AbsoluteMaxSettings, BOOSTING),
    ("dbl", BoostingCombinationSettings, BOOSTING),
    ("dr", DarkRankSettings, DISTILLATION),
    ("rkd", RelationalDistanceSettings, DISTILLATION),
    ("dml", MutualLearningSettings, DISTILLATION),
    ("dino", DinoSettings, DISTILLATION),
    ("dino_star", DinoSettings, DISTILLATION),
]:
    COOPERATIVE_LOSSES.declare(_name, _settings, _module)
LOSSES.declare("cmpm", CmpmSettings, PROJECTION)
LOSSES.declare("mpl", MaxPolynomialSettings, PROJECTION)
