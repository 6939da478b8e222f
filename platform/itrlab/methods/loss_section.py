"""The ``loss`` section typed by its loss's declared settings, without torch: a known loss, settings it
takes and accepts (:mod:`itrlab.losses.registry`), typed once and kept with the section, from which a
run builds its loss (``itrlab.methods.base.build_task_loss``) and a config check knows what it reads."""

from __future__ import annotations

from pydantic import PrivateAttr, ValidationError, model_validator

from itrlab.config.loader import config_error_from_settings, did_you_mean, refused
from itrlab.config.schema import LossConfig
from itrlab.errors import ConfigError, SettingError
from itrlab.losses.registry import LOSSES, LossSettings


class TypedLoss(LossConfig):
    """The ``loss`` section typed by its loss's declared settings: a known ``name`` (and warm-up loss), and
    settings it takes and accepts (a refusal names ``loss.<setting>``). The settings as given are kept as
    written (what a run logs); :meth:`settings` holds them typed, defaults filled in."""

    _typed: tuple[LossSettings, LossSettings | None] | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _typed_settings(self) -> TypedLoss:
        try:
            self._typed = typed_loss(self)
        except ConfigError as err:
            raise refused(err) from None
        return self

    def settings(self) -> LossSettings:
        """The task loss's typed settings."""
        return self._typed[0]

    def warmup_settings(self) -> LossSettings | None:
        """The warm-up loss's typed settings: those of the main loss's settings that it takes (None: no warm-up)."""
        return self._typed[1]


def typed_loss(section: LossConfig) -> tuple[LossSettings, LossSettings | None]:
    """The task loss's typed settings and, with warm-up epochs, the warm-up loss's (those of the main
    loss's settings it takes: ``margin`` for ``vse``); a ConfigError on ``loss.<key>`` for an unknown loss,
    a setting it does not take or a value it refuses."""
    warmup = section.warmup_loss if section.warmup_epochs else None
    for field, name in (("loss.name", section.name), ("loss.warmup_loss", warmup)):
        if name is not None and name not in LOSSES:
            raise ConfigError(field, name, f"known losses: {', '.join(sorted(LOSSES))}", did_you_mean(name, LOSSES))
    params = section.params()
    try:
        main = LOSSES.typed(section.name, params)
        if warmup is None:
            return main, None
        taken = LOSSES.param_names(warmup)
        return main, LOSSES.typed(warmup, {key: value for key, value in params.items() if key in taken})
    except (ValidationError, SettingError) as err:
        allowed = ("name", "warmup_epochs", "warmup_loss", *LOSSES.param_names(section.name))
        raise config_error_from_settings(err, "loss", f"loss '{section.name}'", allowed) from None


def loss_settings(section: LossConfig) -> tuple[LossSettings, LossSettings | None]:
    """The typed settings of a ``loss`` section (and of its warm-up loss): those it was typed with, or, for
    a section made without the declared schema (a test's), typed now."""
    return (section.settings(), section.warmup_settings()) if isinstance(section, TypedLoss) else typed_loss(section)
