"""The ``cooperative`` config section as a scheme around any method: how it wraps a method. The section is typed,
without torch, by :class:`~itrlab.methods.dbl.cooperative_settings.CooperativeSettings`; here the cooperative loss is
built once from those typed settings, when a run builds its method. The OAS anchor is trained first by the trainer
(``BuildContext.train_anchor``) unless ``anchor_checkpoint`` names one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from itrlab.config import ExperimentConfig
from itrlab.methods.dbl.cooperative_settings import SECTION, CooperativeSettings
from itrlab.methods.dbl.loss_settings import COOPERATIVE_LOSSES
from itrlab.methods.registry import Scheme, register_scheme

if TYPE_CHECKING:
    from itrlab.methods.base import MethodModule
    from itrlab.methods.context import BuildContext
    from itrlab.methods.dbl.cooperative_loss import CooperativeLoss


def cooperative_loss(cooperative: CooperativeSettings | None) -> CooperativeLoss | None:
    """The cooperative loss a config section asks for, built from its typed settings, or None (no section,
    or DBL's row A)."""
    typed = None if cooperative is None else cooperative.loss_settings()
    return None if typed is None else COOPERATIVE_LOSSES.build(*typed)


def build_cooperative(
    config: ExperimentConfig, make_branch: Callable[[], MethodModule], context: BuildContext
) -> MethodModule:
    """The branches of ``config``'s method in its cooperative scheme (a plain branch for DBL's row A).

    An OAS anchor loaded from a checkpoint keeps the weights it was trained to; without a checkpoint
    the trainer trains the plain method first (``context.train_anchor``).
    """
    from itrlab.methods.dbl.cooperative import CooperativeMethod  # torch: only when a run builds its method

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
        make_branch,
        loss,
        cooperative.scenario,
        branches=cooperative.branches,
        weight=cooperative.weight,
        ema=(cooperative.ema.start, cooperative.ema.end),
        anchor_checkpoint=checkpoint,
    )


COOPERATIVE_SCHEME = register_scheme(
    Scheme(
        SECTION,
        CooperativeSettings,
        build_cooperative,
        CooperativeSettings.describe,
        CooperativeSettings.fresh,
        CooperativeSettings.structure,
    )
)
