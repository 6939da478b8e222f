"""The names a run's metrics have in MLflow: itrlab's flat names (``test_rsum``, ``anchor_rsum``), each under a chart
section prefix of MLflow's UI (``1_test/``, ``2_val/``, ``3_train/``, ``4_loss/``, ``5_<branch>/``, ``6_chance/``),
so that a run's page opens on its test recalls rather than on 40-odd alphabetical charts. The sections, their
order and why are in docs/mlflow.md ("Chart sections"), read from MLflow 3.17's UI code
(``extractChartSectionName``: a section is a name up to its last ``/``, sorted in code units).

A recall's K has two digits in MLflow (``i2t_R01``, ``i2t_R05``, ``i2t_R10``) so that the UI's code-unit sort keeps
the papers' order R@1, R@5, R@10; the test rsum has a section of its own (``1_test-sum``) so that the six recalls
fill two rows of charts. Only :mod:`itrlab.tracking` knows these names: everything else uses the flat ones, and
every name read back is flat again (:func:`flat_name`), from runs logged flat, with one-digit K or with
``1_test/rsum`` alike; a reopened run keeps the names it has
(:attr:`~itrlab.tracking.mlflow_tracker.MlflowTracker.logged_names`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from itrlab.eval.names import METRIC_NAMES

_TABLE = frozenset(METRIC_NAMES.values())
RANKS = frozenset({"i2t_medr", "i2t_meanr", "t2i_medr", "t2i_meanr", "md"})
RECALLS = _TABLE - RANKS  # R@K both ways and rsum
TOTAL = frozenset({"rsum"})
R_AT_K = RECALLS - TOTAL  # R@1/5/10 both ways
TRAINING = frozenset({"loss", "loss_i2t", "loss_t2i", "lr", "epoch_seconds"})
BRANCH_PREFIX = "5_"
# another branch's table: a name of letters and digits (anchor, anchor2, member1) before a table metric;
# `best_` is no branch (a sweep's `best_rsum`, its best trial's objective)
_BRANCH = re.compile(r"([a-z][a-z0-9]*)_(.+)")
NOT_BRANCHES = frozenset({"best", "test", "loss"})
BRANCH_METRICS = _TABLE | {"loss", "lr"}  # what a branch's section holds: its table, its loss and rate per epoch
_ONE_DIGIT_K = re.compile(r"_R(\d)$")  # i2t_R1 -> i2t_R01 (module doc: the charts' order)
_TWO_DIGIT_K = re.compile(r"_R0(\d)$")


def sortable(rest: str) -> str:
    """A recall table's metric name as MLflow holds it: R@K with two digits (``i2t_R05``), so that a section's
    charts sort R@1, R@5, R@10; any other name as it is."""
    return _ONE_DIGIT_K.sub(r"_R0\1", rest) if rest in _TABLE else rest


def unsorted(rest: str) -> str:
    """:func:`sortable`'s inverse: ``i2t_R05`` is ``i2t_R5`` (and ``i2t_R5``, logged so, too)."""
    name = _TWO_DIGIT_K.sub(r"_R\1", rest)
    return name if name in _TABLE else rest


@dataclass(frozen=True)
class ChartSection:
    """A chart section: ``<section>/<rest>`` in MLflow is ``<prefix><rest>`` in itrlab, for each rest in
    ``rests`` (None: any)."""

    section: str
    prefix: str
    rests: frozenset[str] | None

    def holds(self, name: str) -> bool:
        rest = name[len(self.prefix) :]
        return name.startswith(self.prefix) and bool(rest) and (self.rests is None or rest in self.rests)


SECTIONS = (
    ChartSection("1_test", "test_", R_AT_K),
    ChartSection("1_test-sum", "test_", TOTAL),
    ChartSection("1_test_rank", "test_", RANKS),
    ChartSection("2_val", "", _TABLE),
    ChartSection("3_train", "", TRAINING),
    ChartSection("4_loss", "loss_", None),
    ChartSection("6_chance", "chance_", None),
)
_BY_SECTION = {section.section: section for section in SECTIONS}


def chart_name(name: str) -> str:
    """The MLflow name of itrlab's metric ``name``: in its chart section, or ``name`` itself (the rest)."""
    for section in SECTIONS:
        if section.holds(name):
            return f"{section.section}/{sortable(name[len(section.prefix) :])}"
    branch = _BRANCH.fullmatch(name)
    if branch and branch.group(1) not in NOT_BRANCHES and branch.group(2) in BRANCH_METRICS:
        return f"{BRANCH_PREFIX}{branch.group(1)}/{sortable(branch.group(2))}"
    return name


def mlflow_names(name: str) -> list[str]:
    """Every name itrlab's metric ``name`` may have in a run: :func:`chart_name`'s, its one-digit R@K
    (``1_test/i2t_R1``, logged before the two digits), and the flat name (logged before the sections)."""
    current = chart_name(name)
    return list(dict.fromkeys([current, _TWO_DIGIT_K.sub(r"_R\1", current), name]))


def flat_name(key: str) -> str:
    """itrlab's name of the MLflow metric ``key`` (:func:`chart_name`'s inverse); a key in no section of
    itrlab's (a flat name, logged before the sections or left flat) as it is."""
    section_name, slash, rest = key.partition("/")
    if not slash:
        return key
    section = _BY_SECTION.get(section_name)
    if section is not None:
        return section.prefix + (unsorted(rest) if section.rests is not None else rest)
    if section_name.startswith(BRANCH_PREFIX) and _BRANCH.fullmatch(f"{section_name[len(BRANCH_PREFIX) :]}_{rest}"):
        return f"{section_name[len(BRANCH_PREFIX) :]}_{unsorted(rest)}"
    return key


def flat_metrics(metrics: dict[str, float]) -> dict[str, float]:
    """A run's metrics (MLflow name -> value) by itrlab's names."""
    return {flat_name(key): value for key, value in metrics.items()}


def logged_flat(names) -> bool:
    """Whether any of the metric ``names`` (as a run holds them) is an itrlab name that belongs in a section
    but was logged flat: a run logged before the sections, which keeps its flat names when it resumes."""
    return any("/" not in name and chart_name(name) != name for name in names)
