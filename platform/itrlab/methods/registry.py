"""Methods by name (the names a config's ``method.name`` may take), and how a config builds one."""

from __future__ import annotations

from itrlab.config import ExperimentConfig
from itrlab.config.schema import CooperativeConfig
from itrlab.losses import CooperativeLoss, build_cooperative_loss
from itrlab.losses.boosting import build_dbl_strategy
from itrlab.methods.base import MethodModule
from itrlab.methods.cooperative import CooperativeMethod
from itrlab.methods.dual import DualEncoderMethod
from itrlab.methods.interaction import InteractionMethod

METHODS: dict[str, type[MethodModule]] = {
    "vse": DualEncoderMethod,
    "vsepp": DualEncoderMethod,
    "mvn": DualEncoderMethod,
    "convse": DualEncoderMethod,
    "convsepp": DualEncoderMethod,
    "xattn": InteractionMethod,
}


def cooperative_loss(cooperative: CooperativeConfig | None) -> CooperativeLoss | None:
    """The cooperative loss a config section asks for, or None (no section, or DBL's row A).

    A DBL ``strategy`` letter (Table IV) fixes the loss and its flags; ``gamma`` and ``alpha``
    written beside it set the margins. Otherwise ``loss`` names any cooperative loss.
    """
    if cooperative is None:
        return None
    if cooperative.strategy is not None:
        return build_dbl_strategy(cooperative.strategy, **cooperative.params())
    return build_cooperative_loss(cooperative.loss, **cooperative.params())


def build_method(config: ExperimentConfig, *, vocab_size: int, feature_dim: int) -> MethodModule:
    """The method of ``config``, wrapped in its cooperative scheme when it has one."""
    cls = METHODS[config.method.name]

    def make_branch() -> MethodModule:
        return cls.from_config(config, vocab_size=vocab_size, feature_dim=feature_dim)

    loss = cooperative_loss(config.cooperative)
    if loss is None:
        return make_branch()
    cooperative = config.cooperative
    return CooperativeMethod.build(
        make_branch, loss, cooperative.scenario,
        branches=cooperative.branches, weight=cooperative.weight,
        ema=(cooperative.ema.start, cooperative.ema.end), anchor_checkpoint=cooperative.anchor_checkpoint,
    )
