"""The ``cooperative`` config section as a scheme around any method: its checks and its build.

A DBL ``strategy`` letter (Table IV) fixes the cooperative loss and its flags; ``gamma`` and
``alpha`` written beside it set the margins. Otherwise ``loss`` names any cooperative loss (DBL's
boosting losses, or the distillation and mutual-learning baselines). The OAS anchor is trained
first by the trainer (``BuildContext.train_anchor``) unless ``anchor_checkpoint`` names one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from itrlab.config import ExperimentConfig
from itrlab.config.loader import config_error_from_value_error, did_you_mean
from itrlab.config.schema import CooperativeConfig
from itrlab.errors import ConfigError
from itrlab.losses import COOPERATIVE_LOSSES, build_cooperative_loss
from itrlab.methods.base import MethodModule
from itrlab.methods.context import BuildContext
from itrlab.methods.dbl.boosting import DBL_STRATEGIES, build_dbl_strategy
from itrlab.methods.dbl.cooperative import CooperativeMethod
from itrlab.methods.dbl.cooperative_loss import CooperativeLoss
from itrlab.methods.registry import Scheme, register_scheme

FIXED_KEYS = ("scenario", "loss", "strategy", "branches", "weight", "anchor_checkpoint", "ema")


def cooperative_loss(cooperative: CooperativeConfig | None) -> CooperativeLoss | None:
    """The cooperative loss a config section asks for, or None (no section, or DBL's row A)."""
    if cooperative is None:
        return None
    if cooperative.strategy is not None:
        return build_dbl_strategy(cooperative.strategy, **cooperative.params())
    return build_cooperative_loss(cooperative.loss, **cooperative.params())


def _check_keys(owner: str, params: dict[str, Any], allowed: tuple[str, ...]) -> None:
    for key, value in params.items():
        if key not in allowed:
            raise ConfigError(f"cooperative.{key}", value,
                              f"unknown key for cooperative {owner}; allowed: {', '.join((*FIXED_KEYS, *allowed))}",
                              did_you_mean(key, allowed))


def check_cooperative(config: ExperimentConfig) -> None:
    """One of loss/strategy, a known name, parameters its loss accepts, the scenario's needs."""
    cooperative = config.cooperative
    if cooperative.strategy is not None:
        if cooperative.loss is not None:
            raise ConfigError("cooperative.loss", cooperative.loss, "give either cooperative.loss or cooperative.strategy, not both")
        if cooperative.strategy not in DBL_STRATEGIES:
            raise ConfigError("cooperative.strategy", cooperative.strategy,
                              f"DBL Table IV strategies: {', '.join(DBL_STRATEGIES)}")
        _check_keys(f"strategy {cooperative.strategy}", cooperative.params(), ("gamma", "alpha"))
        owner = ("cooperative.strategy", cooperative.strategy)
    elif cooperative.loss is None:
        raise ConfigError("cooperative.loss", None, f"name a cooperative loss ({', '.join(sorted(COOPERATIVE_LOSSES))}) "
                          f"or a DBL strategy ({', '.join(DBL_STRATEGIES)})")
    elif cooperative.loss not in COOPERATIVE_LOSSES:
        raise ConfigError("cooperative.loss", cooperative.loss, f"known cooperative losses: {', '.join(sorted(COOPERATIVE_LOSSES))}",
                          did_you_mean(cooperative.loss, COOPERATIVE_LOSSES))
    else:
        _check_keys(cooperative.loss, cooperative.params(), COOPERATIVE_LOSSES.param_names(cooperative.loss))
        owner = ("cooperative.loss", cooperative.loss)
    try:
        cooperative_loss(cooperative)
    except (ValueError, TypeError) as err:
        raise config_error_from_value_error("cooperative", cooperative.params(), err, *owner) from None
    if cooperative.scenario in ("oas", "mss") and cooperative.branches != 2:
        raise ConfigError("cooperative.branches", cooperative.branches,
                          f"the {cooperative.scenario} scenario has exactly 2 branches; cohorts of more need oss")
    checkpoint = cooperative.anchor_checkpoint
    if checkpoint is not None and (cooperative.scenario != "oas" or not checkpoint.is_file()):
        allowed = "must be an existing checkpoint file (model.pt or best.pt of a plain run)" if cooperative.scenario == "oas" \
            else "only the oas scenario takes an anchor checkpoint"
        raise ConfigError("cooperative.anchor_checkpoint", str(checkpoint), allowed)


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
        checkpoint = Path(context.train_anchor(config.model_copy(update={"cooperative": None})))
    return CooperativeMethod.build(
        make_branch, loss, cooperative.scenario,
        branches=cooperative.branches, weight=cooperative.weight,
        ema=(cooperative.ema.start, cooperative.ema.end), anchor_checkpoint=checkpoint,
    )


COOPERATIVE_SCHEME = register_scheme(Scheme("cooperative", check_cooperative, build_cooperative))
