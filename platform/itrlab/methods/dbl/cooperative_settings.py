"""The ``cooperative`` config section: a scheme of branches around any method (DBL §III-C; the scenarios:
:mod:`.cooperative`).

``scenario`` is ``oas``, ``oss`` or ``mss``; ``strategy`` names a model of DBL's Table IV (``A``-``I``, ``A`` = no
boosting), or ``loss`` any cooperative loss. That loss's settings sit beside them, typed by its declared settings
(:mod:`.loss_settings`) without torch: a setting it does not use is refused, and the defaults are filled in so that a
run logs the settings in effect. The target trains on ``task + weight * cooperative``.

Three γ meet in a DBL config, each with its own key: ``cooperative.gamma`` is the boosting margin γ of eq. 7-10 (split
by ``cooperative.alpha`` into γ₁ = αγ and γ₂ = γ − αγ for the absolute losses); ``loss.margin`` is the task loss's
margin (the γ of VSE++'s L_raw, eq. 3); CODER's DCL has a ``loss.gamma`` of its own (its score offset).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, PrivateAttr, ValidationError, ValidationInfo, field_validator, model_validator

from itrlab.config.loader import config_error_from_settings, did_you_mean, refused
from itrlab.config.schema import Section
from itrlab.errors import ConfigError, SettingError
from itrlab.losses.registry import LossSettings
from itrlab.methods.dbl.loss_settings import COOPERATIVE_LOSSES
from itrlab.methods.dbl.strategies import DBL_STRATEGIES, strategy_settings
from itrlab.numbers import number

SECTION = "cooperative"

Scenario = Literal["oas", "oss", "mss"]
StrategyLetter = Literal[tuple(DBL_STRATEGIES)]  # type: ignore[valid-type]


class EmaSettings(Section):
    """MSS: the anchor is an EMA of the target; its momentum follows a cosine from ``start`` to ``end`` (eq. 22)."""

    start: number(ge=0, le=1, meaning="the EMA momentum at the first step") = 0.99995
    end: number(ge=0, le=1, meaning="the EMA momentum at the last step") = 1.0


class CooperativeSettings(Section):
    """The ``cooperative`` section (module docstring). Keys beyond the fixed ones are the settings of
    its strategy's or loss's, typed by them when the section is (:meth:`loss_settings`)."""

    model_config = ConfigDict(extra="allow", validate_assignment=True, allow_inf_nan=False)
    _loss: tuple[str, LossSettings] | None = PrivateAttr(None)

    scenario: Scenario = "oss"
    loss: str | None = None
    strategy: StrategyLetter | None = None
    branches: int = Field(2, ge=2)
    weight: number(ge=0, meaning="the weight of the cooperative loss beside the task loss") = 1.0
    anchor_checkpoint: Path | None = None
    ema: EmaSettings = Field(default_factory=EmaSettings)

    @field_validator("branches")
    @classmethod
    def _two_branches_unless_oss(cls, branches: int, info: ValidationInfo) -> int:
        scenario = info.data.get("scenario")
        if scenario in ("oas", "mss") and branches != 2:
            raise ValueError(f"the {scenario} scenario has exactly 2 branches; cohorts of more need oss")
        return branches

    @field_validator("anchor_checkpoint")
    @classmethod
    def _checkpoint_of_oas(cls, checkpoint: Path | None, info: ValidationInfo) -> Path | None:
        if checkpoint is not None and info.data.get("scenario") != "oas":
            raise ValueError("only the oas scenario takes an anchor checkpoint")
        if checkpoint is not None and not checkpoint.is_file():
            raise ValueError("must be an existing checkpoint file (model.pt or best.pt of a plain run)")
        return checkpoint

    @field_validator("ema")
    @classmethod
    def _ema_of_mss(cls, ema: EmaSettings, info: ValidationInfo) -> EmaSettings:
        scenario = info.data.get("scenario")
        # the default, written out (a run's config.yaml, read back by --resume or a logged model), sets nothing
        if scenario != "mss" and ema != EmaSettings():
            raise ValueError(f"only the mss scenario has an EMA anchor; the {scenario} scenario does not use it")
        return ema

    @model_validator(mode="after")
    def _settings_in_effect(self) -> CooperativeSettings:
        """One of loss/strategy, a known loss, and settings its strategy or loss uses and accepts, typed; the
        settings it uses that were not given, filled in with their defaults (a run logs them all)."""
        try:
            self._loss, allowed = typed_loss(self)
        except ConfigError as err:
            raise refused(err) from None
        if self._loss is not None:
            given = self.params()
            self.__pydantic_extra__.update(
                {key: value for key, value in dict(self._loss[1]).items() if key in allowed and key not in given}
            )
        return self

    def params(self) -> dict[str, Any]:
        """The settings of the strategy or loss (``gamma``, ``alpha``, ``tau`` ...), as given and filled in."""
        return dict(self.model_extra or {})

    def loss_settings(self) -> tuple[str, LossSettings] | None:
        """The cooperative loss's name and typed settings (None for DBL's row A: no boosting)."""
        return self._loss

    def describe(self) -> str:
        """One line for tags and run descriptions: ``oss strategy=F``, ``oss loss=dml``."""
        return f"{self.scenario} " + (f"strategy={self.strategy}" if self.strategy else f"loss={self.loss}")

    def fresh(self) -> CooperativeSettings:
        """The scheme without a trained anchor: OAS's frozen anchor becomes MSS's, a copy of the target that
        no loss trains (the same branches and the same step's work), built fresh; the others as they are."""
        if self.scenario != "oas":
            return self
        return self.model_copy(update={"scenario": "mss", "anchor_checkpoint": None})

    def structure(self) -> str | None:
        """What decides a step's cost, in words: the scenario and the branches (``oss x2``); None for DBL's
        row A (no boosting: a plain branch trains). The loss and its constants do not (element-wise work
        on B x B matrices)."""
        if self.strategy == "A":
            return None
        return f"{self.scenario} x{self.branches}"


def typed_loss(section: CooperativeSettings) -> tuple[tuple[str, LossSettings] | None, tuple[str, ...]]:
    """The loss ``section`` asks for with its typed settings (None: DBL's row A), and the settings a config
    may give it; a ConfigError on ``cooperative.<key>`` for what it cannot run."""
    if section.strategy is not None:
        if section.loss is not None:
            raise ConfigError(
                "cooperative.loss", section.loss, "give either cooperative.loss or cooperative.strategy, not both"
            )
        owner, allowed = f"strategy {section.strategy}", DBL_STRATEGIES[section.strategy].settings
    elif section.loss is None:
        raise ConfigError(
            "cooperative.loss",
            None,
            f"name a cooperative loss ({', '.join(sorted(COOPERATIVE_LOSSES))}) "
            f"or a DBL strategy ({', '.join(DBL_STRATEGIES)})",
        )
    elif section.loss not in COOPERATIVE_LOSSES:
        raise ConfigError(
            "cooperative.loss",
            section.loss,
            f"known cooperative losses: {', '.join(sorted(COOPERATIVE_LOSSES))}",
            did_you_mean(section.loss, COOPERATIVE_LOSSES),
        )
    else:
        owner, allowed = f"cooperative loss '{section.loss}'", COOPERATIVE_LOSSES.param_names(section.loss)
    try:
        if section.strategy is not None:
            return strategy_settings(section.strategy, section.params()), allowed
        return (section.loss, COOPERATIVE_LOSSES.typed(section.loss, section.params())), allowed
    except (ValidationError, SettingError) as err:
        raise config_error_from_settings(err, SECTION, owner, (*CooperativeSettings.model_fields, *allowed)) from None
