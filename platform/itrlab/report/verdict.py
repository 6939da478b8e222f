"""What one training's last lines say of its result beside its recall table, so that a model at chance, or one
whose loss never left its plateau, is never printed without a word (pure data in, sentences out).

* **At chance**: its test rsum reaches a random model's 95% range (:meth:`itrlab.report.chance.ChanceLevel.reaches`).
* **On its plateau**: its training loss, read from its own first epoch (:func:`itrlab.report.diagnostics.read_trial`),
  fell by less than :data:`PLATEAU_SHARE` of that value over two epochs or more (VSE++'s hardest negative from
  random projections: every hinge at its margin).
* **On its collapse plateau** (said "on its plateau" too): its last loss lies within :data:`PLATEAU_SHARE` of the
  value it takes when every similarity is equal (:meth:`~itrlab.losses.registry.LossSettings.collapse_value`).
* **Collapsed**: its test MD (positive minus negative pairs' mean similarity) lies below :data:`MD_FLOOR`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping

from itrlab.losses import LOSSES
from itrlab.report.chance import ChanceLevel
from itrlab.report.diagnostics import TOTAL, WARMUP_PARAM, read_trial

PLATEAU_SHARE = 0.01  # a loss that fell by less than 1% of its first value did not move; within 1% of its plateau
MD_FLOOR = 0.01  # a test MD below this: the embeddings collapsed
LOSS_PARAM, BATCH_PARAM = "loss.name", "train.batch_size"  # a trial's flattened config (its MLflow params)


def at_chance(test_rsum: float, chance: ChanceLevel | None) -> str | None:
    """The sentence for a test rsum within chance's range (None: above it, or chance unknown)."""
    if chance is None or not chance.reaches(test_rsum):
        return None
    low, high = chance.rsum_band
    return (
        f"at chance: test rsum {test_rsum:.1f} lies within the 95% range of a random model's "
        f"({low:.1f} to {high:.1f}, {chance.description}); this model ranks no better than random scores"
    )


def on_plateau(history: Mapping[str, list[tuple[int, float]]], warmup_epochs: int) -> str | None:
    """The sentence for a training loss that never left its plateau (None: it moved, or too few epochs after
    the warm-up to tell). ``history``: series (``loss``, ``loss_<part>``) -> [(epoch, value)]."""
    reading = read_trial({"history": dict(history), "params": {WARMUP_PARAM: warmup_epochs}}, {}).get(TOTAL)
    if reading is None or reading.end <= reading.start:
        return None
    if reading.first - reading.last >= PLATEAU_SHARE * abs(reading.first):
        return None
    return (
        f"on its plateau: the training loss went from {reading.first:.4g} (epoch {reading.start}) to "
        f"{reading.last:.4g} (epoch {reading.end}), less than {PLATEAU_SHARE:.0%} lower: it never left "
        f"the value it started at"
    )


def collapse_plateau(params: Mapping[str, str]) -> float | None:
    """The collapse value of a trial's loss at its batch size, from its flattened config (``loss.name``,
    ``loss.<setting>``, ``train.batch_size``, as MLflow keeps them: strings); None when its loss declares none
    or the config does not say."""
    name = params.get(LOSS_PARAM)
    try:
        settings = {}
        for key in LOSSES.param_names(name):
            if f"loss.{key}" in params:
                settings[key] = _value(params[f"loss.{key}"])
        return LOSSES.typed(name, settings).collapse_value(int(params[BATCH_PARAM]))
    except (ValueError, KeyError, TypeError):
        return None


def _value(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return text


def at_collapse_plateau(last_loss: float | None, plateau: float | None) -> str | None:
    """The sentence for a last training loss within :data:`PLATEAU_SHARE` of its loss's collapse value (None:
    away from it, or either unknown)."""
    if last_loss is None or plateau is None or not math.isfinite(last_loss) or plateau <= 0:
        return None
    if abs(last_loss - plateau) > PLATEAU_SHARE * plateau:
        return None
    return (
        f"on its plateau: the last training loss {last_loss:.4g} lies within {PLATEAU_SHARE:.0%} of {plateau:.4g}, "
        f"its loss's value when every similarity is equal, whichever side it came from"
    )


def collapsed(test_md: float | None) -> str | None:
    """The sentence for a test MD below :data:`MD_FLOOR` (None: above it, or unknown)."""
    if test_md is None or not math.isfinite(test_md) or test_md >= MD_FLOOR:
        return None
    return f"collapsed: test MD {test_md:.3g} below {MD_FLOOR:g} (positive and negative pairs score alike)"


def verdicts(
    test_rsum: float,
    chance: ChanceLevel | None,
    history: Mapping[str, list[tuple[int, float]]],
    warmup_epochs: int,
    plateau: float | None = None,
    test_md: float | None = None,
) -> list[str]:
    """What the run's last lines say of it: at chance, on its plateau (never left it, or at its collapse
    plateau: ``plateau``, the loss's :meth:`~itrlab.losses.registry.LossSettings.collapse_value`), collapsed
    (``test_md``), any of them or nothing."""
    return [
        line for line in (at_chance(test_rsum, chance), *failures(history, warmup_epochs, plateau, test_md)) if line
    ]


def failures(
    history: Mapping[str, list[tuple[int, float]]],
    warmup_epochs: int,
    plateau: float | None = None,
    test_md: float | None = None,
) -> list[str]:
    """What says a training failed whatever its recall: on its plateau (it never left it, or it sits on its
    collapse plateau ``plateau``), collapsed (``test_md``); none, one or both."""
    total = sorted(history.get(TOTAL) or [])
    last = float(total[-1][1]) if total else None
    found = [on_plateau(history, warmup_epochs) or at_collapse_plateau(last, plateau), collapsed(test_md)]
    return [line for line in found if line]
