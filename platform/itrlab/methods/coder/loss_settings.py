"""The settings of CODER's losses (DCL, DCL-I, M-DCL, PGC; C eq. 4-7), declared without torch
(:mod:`itrlab.losses.registry`), and their types, which the method's own settings share; the losses
themselves are in :mod:`.losses`."""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from itrlab.errors import SettingError
from itrlab.losses.registry import LOSSES, LossSettings
from itrlab.numbers import Flag, number

MODULE = "itrlab.methods.coder.losses"

Diversity = Literal["std", "ent", "none"]
MdclPositive = Literal["momentum", "online"]
# the three readings of the DCL equation (docs/papers/coder.md#three-readings-of-the-dcl-equation)
Reading = Literal["printed", "infonce", "multi_similarity"]
Mu = number(gt=0, meaning="the DCL temperature μ")
Gamma = number(meaning="the DCL score offset γ")
Eps = number(gt=0, meaning="the diversity parameter ε")
Alpha = number(gt=0, meaning="the multi-similarity positive's scale α")
MS_ALPHA = 2.0  # α of Wang et al.'s multi-similarity loss (CVPR 2019)


class DclInstanceSettings(LossSettings):
    """DCL-I (C eq. 4): μ > 0 (paper 0.1), the score offset γ (paper 0.3), the ``reading`` of the equation
    (``printed``: C eq. 4-5 as printed; ``infonce``: the positive inside the log; ``multi_similarity``: the
    multi-similarity loss's positive term, scaled by ``alpha``, α > 0, 2). ``alpha`` changes nothing in the
    other readings, so a value other than 2 there is refused."""

    mu: Mu = 0.1
    gamma: Gamma = 0.3
    reading: Reading = "printed"
    alpha: Alpha = MS_ALPHA

    @model_validator(mode="after")
    def _alpha_needs_multi_similarity(self):
        if self.alpha != MS_ALPHA and self.reading != "multi_similarity":
            raise SettingError(
                "alpha",
                self.alpha,
                f"α scales the multi-similarity positive term: it changes nothing with reading "
                f"{self.reading!r} (give reading: multi_similarity, or leave alpha at {MS_ALPHA})",
            )
        return self


class DclSettings(DclInstanceSettings):
    """DCL (C eq. 5): DCL-I's, with ε > 0 of the diversity (paper 0.1), the diversity ``div`` (``std``: C eq. 3;
    ``ent``: S eq. 8; ``none``: DCL-I) and ``memory_div`` (Table 3 "MB": the batch diversity averaged with
    the memory diversity)."""

    eps: Eps = 0.1
    div: Diversity = "std"
    memory_div: Flag = False


class MemoryDclSettings(DclSettings):
    """M-DCL (C eq. 6): DCL's, the memory diversity on by default (the text after eq. 6), and ``positive``:
    the momentum encoder's positive (MoCo/ALBEF's reading) or the online one."""

    memory_div: Flag = True
    positive: MdclPositive = "momentum"


class PrototypeClusterSettings(LossSettings):
    """PGC (C eq. 7): no setting."""


LOSSES.declare("dcl", DclSettings, MODULE)
LOSSES.declare("dcl_i", DclInstanceSettings, MODULE)
LOSSES.declare("mdcl", MemoryDclSettings, MODULE)
LOSSES.declare("pgc", PrototypeClusterSettings, MODULE)
