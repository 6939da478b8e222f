"""Separating experiments: where a paper's claim fails here, the comparison that tells whether the failure belongs
to our setting (data, features, schedule) or to the method as printed, written in the paper's claims file under
``separating`` (docs/claims-files.md gives the format). Each is a :class:`~itrlab.config.comparison.Comparison`
that ``serves`` one claim, in its own Holm family and embedding (``output`` or ``prehead``); its ``reads`` fix,
before the data, whether each verdict word puts the failure in the ``setting``, the ``method``, or leaves it
``open`` (an inconclusive verdict always reads open). :mod:`itrlab.config.claims` checks it.
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
