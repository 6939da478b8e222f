"""CLIP (Radford et al., 2021) as a method: a dual encoder whose loss temperature is learnt.

The encoders are the dual encoders' (:class:`~itrlab.methods.dual.DualEncoderMethod`); the method adds one parameter,
``logit_scale`` = log of the inverse temperature ``s``, initialised to ``log(1 / method.init_tau)`` (CLIP: τ = 0.07) and
kept at ``s <= method.max_scale`` (CLIP: 100): clamped where it is read, and clamped itself after every optimizer step,
as CLIP does, so that it never drifts above the cap where its gradient is zero. Each batch's similarities carry it as
the extra ``logit_scale`` for the ``clip`` loss (:mod:`itrlab.methods.clip.losses`). Evaluation ranks by the plain
cosines: a positive scale changes no ranking. With a loss that does not read ``logit_scale`` the parameter is frozen:
the method is then the plain dual encoder.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal

import torch
from torch import Tensor, nn

from itrlab.config import ExperimentConfig
from itrlab.data import Batch
from itrlab.errors import ConfigError
from itrlab.losses import Similarities
from itrlab.methods.base import MethodSettings
from itrlab.methods.clip.losses import LOGIT_SCALE
from itrlab.methods.context import BuildContext
from itrlab.methods.dual import DualEncoderMethod
from itrlab.methods.registry import register_method
from itrlab.models import DualEncoder
from itrlab.numbers import number


class ClipSettings(MethodSettings):
    """CLIP's keys in the ``method`` section (the paper's values as defaults)."""

    name: Literal["clip"] = "clip"
    # logit_scale starts at log(1/init_tau); the inverse temperature s = exp(logit_scale) stays <= max_scale
    init_tau: number(gt=0, meaning="the initial temperature τ of the logits") = 0.07
    max_scale: number(gt=0, meaning="the cap of the inverse temperature exp(logit_scale)") = 100.0


@register_method("clip")
class ClipMethod(DualEncoderMethod):
    name = "clip"
    settings = ClipSettings
    provides = DualEncoderMethod.provides | {LOGIT_SCALE}

    def __init__(
        self,
        model: DualEncoder,
        loss: nn.Module,
        max_len: int = 64,
        *,
        init_tau: float = 0.07,
        max_scale: float = 100.0,
    ):
        super().__init__(model, loss, max_len)
        self.max_scale = float(max_scale)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1.0 / init_tau)))
        if LOGIT_SCALE not in getattr(loss, "requires", ()):
            self.logit_scale.requires_grad_(False)  # nothing would train it (and DDP wants every trained one used)

    # ------------------------------------------------------------------ building

    @classmethod
    def validate_config(cls, config: ExperimentConfig) -> None:
        """The base check (the loss reads only what the method gives), and τ_0 within the cap."""
        super().validate_config(config)
        settings = cls.method_settings(config)
        if 1.0 / settings.init_tau > settings.max_scale:
            raise ConfigError(
                "method.init_tau",
                settings.init_tau,
                f"a temperature >= 1/method.max_scale = {1.0 / settings.max_scale:g}: a smaller "
                f"one starts above the cap on exp(logit_scale) and would not train",
            )

    @classmethod
    def from_config(cls, config: ExperimentConfig, context: BuildContext) -> ClipMethod:
        method = super().from_config(config, context)
        settings = cls.method_settings(config)
        method.max_scale = settings.max_scale
        with torch.no_grad():
            method.logit_scale.fill_(math.log(1.0 / settings.init_tau))
        return method

    # ------------------------------------------------------------------ training

    @property
    def max_logit_scale(self) -> float:
        return math.log(self.max_scale)

    def current_logit_scale(self) -> Tensor:
        """``logit_scale`` clamped to ``log(max_scale)`` (0-d, with its gradient below the cap)."""
        return self.logit_scale.clamp(max=self.max_logit_scale)

    def temperature(self) -> float:
        """The current temperature τ = 1 / exp(logit_scale), clamp included."""
        return math.exp(-float(self.current_logit_scale().detach()))

    def batch_similarities(self, batch: Batch, needs: Iterable[str] = ()) -> Similarities:
        """The dual encoder's similarities, plus the extra ``logit_scale`` (always: one scalar)."""
        return super().batch_similarities(batch, needs).with_extras(**{LOGIT_SCALE: self.current_logit_scale()})

    def after_step(self, step: int, total_steps: int) -> None:
        """CLIP's clamp of the parameter after the optimizer step: ``exp(logit_scale) <= max_scale``."""
        super().after_step(step, total_steps)
        with torch.no_grad():
            self.logit_scale.clamp_(max=self.max_logit_scale)

    def extra_repr(self) -> str:
        return f"max_scale={self.max_scale:g}"
