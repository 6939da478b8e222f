"""Separating experiments: where a paper's claim fails here, the comparison that tells whether the failure
belongs to our setting (the data, features, schedule or another part of this project's recipe) or to the
method as the paper prints it, written in the paper's claims file beside its claims::

    separating:
      - id: f-over-a-without-heads
        serves: f-over-a                   # the claim of this file whose verdict it separates
        question: "Does F's loss improve on A without the new projection heads?"
        sweep: a-heads                     # the preset that measures it (and profile, as a claim's)
        row: F (no heads)
        baseline: A
        direction: greater
        metric: rsum
        also: [i2t_R1, t2i_R1]
        embedding: output                  # output, or prehead: the reading before the projection head
        family: a-heads-checks             # its Holm family: one that holds separating experiments only
        reads:                             # what each verdict word says of the claim's failure
          reproduced: {belongs_to: setting, because: "the loss adds to its base; the new heads lose it"}
          no effect detected: {belongs_to: setting, because: "..."}
          contradicted: {belongs_to: method, because: "..."}

Each is a :class:`~itrlab.config.comparison.Comparison` judged by the claims' own analysis; ``reads`` fixes,
before the data, what each verdict says: the failure belongs to the ``setting``, to the ``method`` as printed,
or it stays ``open``. An **inconclusive** verdict separates nothing: it always reads open. The claims loader
(:mod:`itrlab.config.claims`) checks what ``serves`` names, the preset's rows, the family and the ids.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from itrlab.config.comparison import Comparison
from itrlab.config.schema import PREHEAD, Section

OUTPUT = "output"  # a model's own embedding: eval.embedding's default
# the verdict words a reading rule answers: every one but inconclusive (itrlab.report.analysis.WORDS)
READ_WORDS = ("reproduced", "no effect detected", "contradicted")
SETTING, METHOD, OPEN = "setting", "method", "open"


class Reading(Section):
    """What one verdict of a separating experiment says of the claim it serves: where the claim's failure
    belongs (``setting``, ``method``: the method as the paper prints it, ``open``), and ``because``."""

    belongs_to: Literal["setting", "method", "open"]
    because: str = Field(min_length=1)


class Separating(Comparison):
    """A separating experiment (see the module doc): a comparison that serves one claim of its file."""

    serves: str = Field(min_length=1)
    question: str = Field(min_length=1)
    embedding: Literal["output", "prehead"] = OUTPUT
    reads: dict[str, Reading]
    note: str = ""

    @field_validator("reads")
    @classmethod
    def _every_word_read(cls, reads: dict[str, Reading]) -> dict[str, Reading]:
        missing = [word for word in READ_WORDS if word not in reads]
        extra = [word for word in reads if word not in READ_WORDS]
        if missing or extra:
            wrong = f"lacks {', '.join(missing)}" if missing else f"has {', '.join(extra)}"
            raise ValueError(
                f"a reading for each verdict word {', '.join(READ_WORDS)} (inconclusive always reads open); it {wrong}"
            )
        return {word: reads[word] for word in READ_WORDS}

    @classmethod
    def what(cls) -> str:
        return "separating experiment"

    @property
    def prehead(self) -> bool:
        """Whether it reads the embedding before the projection head."""
        return self.embedding == PREHEAD


__all__ = ["METHOD", "OPEN", "OUTPUT", "READ_WORDS", "SETTING", "Reading", "Separating"]
