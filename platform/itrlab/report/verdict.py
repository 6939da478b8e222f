"""What one training's last lines say of its result beside its recall table (issue 46: a model at chance,
or one whose loss never left its plateau, was printed without a word).

* **At chance**: its test rsum lies within the 95% range of a random model's rsum on its test protocol
  (:attr:`itrlab.report.chance.ChanceLevel.rsum_band`, the one notion of chance that the sweeps' reports
  shade and mark; with one run, its rsum is where its interval starts: :meth:`ChanceLevel.reaches`).
* **On its plateau**: its training loss, read as the results page reads it (from its own first epoch,
  after the loss's warm-up: :func:`itrlab.report.diagnostics.read_trial`), fell by less than
  :data:`PLATEAU_SHARE` of that first value by its last epoch, over two epochs or more. A loss that does
  not move has not left the value it started at: for VSE++'s hardest negative from random projections,
  every hinge at its margin (issue 46's Flickr8K run without its warm-up, test rsum 36.6).

Pure data in, sentences out: the CLI prints them.
"""

from __future__ import annotations

from collections.abc import Mapping

from itrlab.report.chance import ChanceLevel
from itrlab.report.diagnostics import TOTAL, WARMUP_PARAM, read_trial

PLATEAU_SHARE = 0.01  # a loss that fell by less than 1% of its first value did not move


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


def verdicts(
    test_rsum: float, chance: ChanceLevel | None, history: Mapping[str, list[tuple[int, float]]], warmup_epochs: int
) -> list[str]:
    """What the run's last lines say of it: at chance, on its plateau, both or nothing."""
    return [found for found in (at_chance(test_rsum, chance), on_plateau(history, warmup_epochs)) if found]
