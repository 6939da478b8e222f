"""DBL's Table IV by letter: the cooperative loss of each model and the settings a config may give it,
without torch (the config check types a ``cooperative.strategy`` with it; :mod:`.boosting` builds it).

=====  ====  ====  ====  ====  =========================  ================================
model  RS    RM    AS    AM    loss                       :data:`DBL_STRATEGIES` entry
=====  ====  ====  ====  ====  =========================  ================================
A                              task loss only (baseline)  ``None``
B      x                       RS                         ``rs``
C                  x           AS                         ``as``
D            x*                RM, soft                   ``rm``, ``soft=True``
E                        x*    AM, soft                   ``am``, ``soft=True``
F            x                 RM (recommended)           ``rm``
G                        x     AM (recommended)           ``am``
H      x           x           (RS + AS) / 2              ``dbl``, ``relative=rs, absolute=as``
I            x           x     (RM + AM) / 2              ``dbl``, ``relative=rm, absolute=am``
=====  ====  ====  ====  ====  =========================  ================================
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from itrlab.errors import SettingError
from itrlab.losses.registry import LossSettings
from itrlab.methods.dbl.loss_settings import COOPERATIVE_LOSSES


@dataclass(frozen=True)
class Strategy:
    """A model of Table IV: its cooperative loss (None: no boosting), the settings that define the row,
    and the settings a config may give it (each changes the row's loss)."""

    loss: str | None
    row: dict[str, Any] = field(default_factory=dict)
    settings: tuple[str, ...] = ()
    summary: str = ""


DBL_STRATEGIES: dict[str, Strategy] = {
    "A": Strategy(None, summary="no boosting: the task loss alone"),
    "B": Strategy("rs", settings=("gamma",), summary="RS"),
    "C": Strategy("as", settings=("gamma", "alpha"), summary="AS"),
    "D": Strategy("rm", {"soft": True}, ("gamma", "hardest"), "RM with the soft γ^SA"),
    "E": Strategy("am", {"soft": True}, ("gamma", "alpha", "hardest"), "AM with the soft γ^SA"),
    "F": Strategy("rm", settings=("gamma",), summary="RM"),
    "G": Strategy("am", settings=("gamma", "alpha"), summary="AM"),
    "H": Strategy("dbl", {"relative": "rs", "absolute": "as"}, ("gamma", "alpha"), "(RS + AS) / 2"),
    "I": Strategy("dbl", {"relative": "rm", "absolute": "am"}, ("gamma", "alpha"), "(RM + AM) / 2"),
}
"""Table IV's models by letter (the module docstring's table). Rows use the paper's defaults
``gamma = 0.2``, ``alpha = 0.5`` unless a config sets them; ``alpha`` exists only for the rows with an
absolute loss, ``hardest`` only for the soft rows, and A takes no setting."""


def strategy_settings(strategy: str, params: Mapping[str, Any]) -> tuple[str, LossSettings] | None:
    """The cooperative loss of Table IV model ``strategy`` ("A".."I") and its settings typed with ``params``;
    ``None`` for "A".

    Raises:
        ValueError: an unknown letter; SettingError for a setting the row does not use (``alpha`` for
            the relative rows F and B, anything for A) or one that would make it another row
            (``soft``); pydantic's ValidationError for a value the loss does not accept.
    """
    if strategy not in DBL_STRATEGIES:
        raise ValueError(f"unknown DBL strategy {strategy!r}; known: {', '.join(DBL_STRATEGIES)}")
    row = DBL_STRATEGIES[strategy]
    for key, value in params.items():
        if key not in row.settings:
            takes = f"its settings: {', '.join(row.settings)}" if row.settings else "it takes no setting"
            raise SettingError(key, value, f"strategy {strategy} ({row.summary}) does not use {key}; {takes}")
    return None if row.loss is None else (row.loss, COOPERATIVE_LOSSES.typed(row.loss, {**row.row, **params}))
