"""The MLflow runs table the parent run's description links: a saved view of a sweep's trials
(:mod:`itrlab.tracking.runs_view`), one row per trial, best first, saved as ``itrlab-<parent run id>`` when the
parent run opens (the link works while the sweep runs) and again on a resume.
"""

from __future__ import annotations

from itrlab.config.profiles import PROFILE_TAG
from itrlab.config.sweep import SweepSpec
from itrlab.report.search_report import swept_keys, test_objective
from itrlab.tracking import MlflowTracker
from itrlab.tracking.runs_view import ITRLAB_VIEW, RECALLS_TAG, RunsView, children_filter

RECALLS = ["test_i2t_R1", "test_t2i_R1", "test_i2t_R5", "test_t2i_R5"]  # after the six recalls' column (RECALLS_TAG)


def trials_view(spec: SweepSpec, invocation: str, parent_run_id: str) -> RunsView:
    """The view of one invocation's trials: its parent's children, sorted by the test counterpart of the
    objective (test rsum for the loss), with the test objective, the six test recalls in one column, the swept
    values (the ``param.<key>`` tags), the seed and the profile, then R@1 and R@5 both ways, the objective at the
    best epoch and the table's other test columns."""
    metric = spec.objective.metric
    test = test_objective(spec)
    ascending = spec.objective.mode == "min" and test != "test_rsum"
    validation = f"best_val_{metric}" if metric == "rsum" else metric
    extra = [c for c in (spec.table.columns if spec.table else []) if c.startswith("test_")]
    metrics = list(dict.fromkeys([test, *RECALLS, validation, *extra]))
    tags = [f"param.{key}" for key in swept_keys(spec)] + ["param.seed"] + ([PROFILE_TAG] if spec.profile else [])
    name = f"{spec.name} {invocation}: trials"
    return RunsView(name, children_filter(parent_run_id), test, ascending, tags, metrics, summary=[RECALLS_TAG])


def trials_view_id(parent_run_id: str) -> str:
    """The id of the view of a parent run's trials."""
    return f"{ITRLAB_VIEW}{parent_run_id}"


def save_trials_view(spec: SweepSpec, parent: MlflowTracker, invocation: str) -> str:
    """Save the view of the trials of ``parent`` (the invocation's folder name, ``invocation``, names it);
    returns its id (for :meth:`MlflowTracker.ui_hint`)."""
    return parent.save_view(trials_view_id(parent.run_id), trials_view(spec, invocation, parent.run_id))
