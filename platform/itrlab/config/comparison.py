"""What a claims file's entries share: one comparison of two pivot rows of one preset, in one metric and
direction, judged in one Holm family (:class:`Comparison`), and the names such an entry may use.

A paper's claim (:class:`itrlab.config.claims.Claim`) and the experiment that separates our setting from the
paper's method where a claim fails (:class:`itrlab.config.separating.Separating`) are both comparisons: the
claims board judges each by the same fixed analysis (:mod:`itrlab.report.analysis`). The keys are checked here
one by one; :mod:`itrlab.config.claims` checks them against the presets and against each other.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from itrlab.config.loader import did_you_mean, refused
from itrlab.config.schema import Section
from itrlab.errors import ConfigError
from itrlab.eval.names import METRIC_NAMES, RECALLS

ID_PATTERN = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")  # kebab-case: claim and experiment ids, family names
MAX_ID_CHARS = 80
# what a verdict may read: the metrics that a split's per-query ranks give, each higher-is-better
VERDICT_METRICS = ("rsum", *RECALLS)
# what a claim may show beside it, and what a paper's effect may be read in: every metric of a recall table
SHOWN_METRICS = tuple(METRIC_NAMES.values())


def kebab(value: str, what: str) -> str:
    """``value`` when it is a kebab-case name of at most :data:`MAX_ID_CHARS` characters; a ValueError naming
    ``what`` else."""
    if not isinstance(value, str) or len(value) > MAX_ID_CHARS or not ID_PATTERN.fullmatch(value):
        raise ValueError(
            f"{what} is kebab-case: lower-case letters and digits in words joined by single '-', "
            f"at most {MAX_ID_CHARS} characters (e.g. f-over-a)"
        )
    return value


def metric_name(value: str, allowed: tuple[str, ...], what: str) -> str:
    """``value`` when it is one of ``allowed``; a ValueError naming ``what``, the allowed names and the closest."""
    if value not in allowed:
        hint = did_you_mean(value, allowed)
        raise ValueError(f"{what} is one of {', '.join(allowed)}" + (f" ({hint})" if hint else ""))
    return value


class Comparison(Section):
    """One row of a preset's pivot against another (``baseline``) under a profile, in ``metric`` (``also``:
    shown beside it), expected in ``direction``, judged within the Holm ``family``."""

    id: str
    sweep: str = Field(min_length=1)
    profile: str | None = None
    row: str = Field(min_length=1)
    baseline: str = Field(min_length=1)
    direction: Literal["greater", "less"]
    metric: str
    also: list[str] = Field(default_factory=list)
    family: str

    @property
    def metrics(self) -> tuple[str, ...]:
        """The verdict's metric first, then the ones shown beside it."""
        return (self.metric, *self.also)

    @field_validator("id")
    @classmethod
    def _id_is_kebab(cls, value: str) -> str:
        return kebab(value, f"a {cls.what()}'s id")

    @field_validator("family")
    @classmethod
    def _family_is_kebab(cls, value: str) -> str:
        return kebab(value, "a family's name")

    @field_validator("metric")
    @classmethod
    def _verdict_metric(cls, value: str) -> str:
        return metric_name(value, VERDICT_METRICS, "the verdict's metric (a test metric that per-query ranks give)")

    @field_validator("also")
    @classmethod
    def _shown_metrics(cls, values: list[str]) -> list[str]:
        for value in values:
            metric_name(value, SHOWN_METRICS, "a metric shown beside the verdict's")
        twice = sorted({value for value in values if values.count(value) > 1})
        if twice:
            raise ValueError(f"lists {', '.join(twice)} twice")
        return values

    @model_validator(mode="after")
    def _two_rows(self) -> Comparison:
        if self.row == self.baseline:
            raise refused(
                ConfigError("baseline", self.baseline, f"a row other than the {self.what()}'s row ({self.row!r})")
            )
        if self.metric in self.also:
            raise refused(ConfigError("also", self.metric, "metrics shown beside the verdict's, not the verdict's own"))
        return self

    @classmethod
    def what(cls) -> str:
        """What an entry of this kind is called in messages (``claim``)."""
        return "comparison"


__all__ = ["ID_PATTERN", "SHOWN_METRICS", "VERDICT_METRICS", "Comparison", "kebab", "metric_name"]
