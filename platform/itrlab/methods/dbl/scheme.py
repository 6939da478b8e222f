"""The ``cooperative`` config section as a scheme around any method: its settings, checks and build.

A DBL ``strategy`` letter (Table IV) fixes the cooperative loss and its flags; the settings the row
uses (``gamma``, ``alpha`` for the absolute rows, ``hardest`` for the soft ones) may sit beside it.
Otherwise ``loss`` names any cooperative loss (DBL's boosting losses, or the distillation and
mutual-learning baselines) with its settings. The OAS anchor is trained first by the trainer
(``BuildContext.train_anchor``) unless ``anchor_checkpoint`` names one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from itrlab.config import ExperimentConfig
from itrlab.config.loader import config_error_from_settings, did_you_mean
from itrlab.errors import ConfigError, SettingError
from itrlab.methods.base import MethodModule
from itrlab.methods.context import BuildContext
from itrlab.methods.dbl.boosting import DBL_STRATEGIES, build_dbl_strategy
from itrlab.methods.dbl.cooperative import CooperativeMethod
from itrlab.methods.dbl.cooperative_loss import COOPERATIVE_LOSSES, CooperativeLoss
from itrlab.methods.dbl.settings import CooperativeSettings
from itrlab.methods.registry import Scheme, register_scheme

SECTION = "cooperative"
FIXED_KEYS = tuple(CooperativeSettings.model_fields)


def cooperative_loss(cooperative: CooperativeSettings | None) -> CooperativeLoss | None:
    """The cooperative loss a config section asks for, or None (no section, or DBL's row A)."""
    if cooperative is None:
        return None
    if cooperative.strategy is not None:
        return build_dbl_strategy(cooperative.strategy, **cooperative.params())
    return COOPERATIVE_LOSSES.build(cooperative.loss, **cooperative.params())


def check_cooperative(config: ExperimentConfig) -> CooperativeSettings:
    """One of loss/strategy, a known loss, and settings its strategy or loss uses and accepts; the section
    with the settings in effect (the loss's defaults of those not given), so that a run logs them all."""
    cooperative: CooperativeSettings = config.cooperative
    if cooperative.strategy is not None:
        if cooperative.loss is not None:
            raise ConfigError("cooperative.loss", cooperative.loss, "give either cooperative.loss or cooperative.strategy, not both")
        owner = f"strategy {cooperative.strategy}"
        allowed = DBL_STRATEGIES[cooperative.strategy].settings
    elif cooperative.loss is None:
        raise ConfigError("cooperative.loss", None, f"name a cooperative loss ({', '.join(sorted(COOPERATIVE_LOSSES))}) "
                          f"or a DBL strategy ({', '.join(DBL_STRATEGIES)})")
    elif cooperative.loss not in COOPERATIVE_LOSSES:
        raise ConfigError("cooperative.loss", cooperative.loss, f"known cooperative losses: {', '.join(sorted(COOPERATIVE_LOSSES))}",
                          did_you_mean(cooperative.loss, COOPERATIVE_LOSSES))
    else:
        owner = f"cooperative loss '{cooperative.loss}'"
        allowed = COOPERATIVE_LOSSES.param_names(cooperative.loss)
    try:
        loss = cooperative_loss(cooperative)
    except (ValidationError, SettingError) as err:
        raise config_error_from_settings(err, SECTION, owner, (*FIXED_KEYS, *allowed)) from None
    defaults = {key: getattr(loss, key) for key in allowed if key not in cooperative.params() and hasattr(loss, key)}
    if not defaults:
        return cooperative
    return CooperativeSettings.model_validate({**cooperative.model_dump(exclude_unset=True), **defaults})


def build_cooperative(config: ExperimentConfig, make_branch: Callable[[], MethodModule],
                      context: BuildContext) -> MethodModule:
    """The branches of ``config``'s method in its cooperative scheme (a plain branch for DBL's row A).

    An OAS anchor loaded from a checkpoint keeps the weights it was trained to; without a checkpoint
    the trainer trains the plain method first (``context.train_anchor``).
    """
    loss = cooperative_loss(config.cooperative)
    if loss is None:
        return make_branch()
    cooperative = config.cooperative
    checkpoint = cooperative.anchor_checkpoint
    if cooperative.scenario == "oas" and checkpoint is None:
        if context.train_anchor is None:
            raise ValueError("the oas scenario needs cooperative.anchor_checkpoint, or a trainer to train the anchor")
        checkpoint = Path(context.train_anchor(config.model_copy(update={SECTION: None})))
    return CooperativeMethod.build(
        make_branch, loss, cooperative.scenario,
        branches=cooperative.branches, weight=cooperative.weight,
        ema=(cooperative.ema.start, cooperative.ema.end), anchor_checkpoint=checkpoint,
    )


COOPERATIVE_SCHEME = register_scheme(Scheme(SECTION, CooperativeSettings, check_cooperative, build_cooperative,
                                            CooperativeSettings.describe, CooperativeSettings.fresh,
                                            CooperativeSettings.structure))
