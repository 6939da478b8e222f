"""The Tune trial of a grouped sweep (:mod:`itrlab.sweep.groups`): one Ray trial trains one group; itrlab keeps one
run per member.

The trial's config is the group's members (their grid points). Each member trains in ``<trial>/group/m<k>/`` and is
its own MLflow child run, tagged with its own trial id ``<key>-m<k>``. After every epoch the trial saves the whole
``group`` folder (a retry or resume restores every member from one epoch), then reports the mean of the members'
objective (what Tune ranks the group by) and every member's state (``members``). A member whose loss diverges or
that fails on its own ends FAILED while the others train on, leaving ``member.json`` so that a resume skips it; a
failure of the group itself is the trial's, retried by Tune from the last saved epoch. :func:`member_rows` gives one
row per member, its ``cost_seconds`` its wall time over the group's size (members share the devices).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray import tune

from itrlab.errors import StorageError, UserInputError, failure_reason
from itrlab.report.summary import TrialRow
from itrlab.sweep.groups import GROUP
from itrlab.sweep.trial import (
    STORAGE_ERROR,
    TrialContext,
    node_tags,
    replayed,
    reuse_child_run,
    trial_config,
    trial_params,
    trial_run_name,
    trial_tags,
    working_folder,
)
from itrlab.sweep.trial_store import TrialStore, trial_key
from itrlab.tracking import MlflowTracker
from itrlab.train import EpochReport, NonFiniteLossError
from itrlab.train.grouped.run import run_group
from itrlab.train.lifecycle import record_failure

MEMBERS = "members"  # in a group trial's results: its members' state, as JSON
MEMBER_FILE = "member.json"  # in a member's folder once it ended: its final state
FINAL = ("finished", "diverged", "error")
GROUP_TAG = "itrlab.group"


@dataclass
class MemberState:
    """What a group trial knows of one member: its grid point, its status and its latest metrics."""

    trial_id: str
    params: dict[str, Any]
    status: str = "running"
    reason: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)

    def on_epoch_end(self, report: EpochReport) -> None:  # an EpochCallback
        self.metrics = {"epoch": report.epoch, **report.metrics()}

    def to_dict(self) -> dict[str, Any]:
        return {
            "trial_id": self.trial_id,
            "params": self.params,
            "status": self.status,
            "reason": self.reason,
            "metrics": {k: v for k, v in self.metrics.items() if not (isinstance(v, float) and math.isnan(v))},
        }


def _report(states: list[MemberState], metric: str, **extra: Any) -> dict[str, Any]:
    values = [s.metrics.get(metric) for s in states if s.status in ("running", "finished")]
    values = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    mean = sum(values) / len(values) if values else float("nan")
    return {metric: mean, MEMBERS: json.dumps([s.to_dict() for s in states], default=str), **extra}


def run_group_trial(params: dict[str, Any], context: TrialContext) -> None:
    """The Tune function trainable of one group (see the module doc)."""
    store = TrialStore(context.sweep_dir, trial_key(params))
    with store.held():
        _run_group(params, context, store)


def _run_group(params: dict[str, Any], context: TrialContext, store: TrialStore) -> None:
    trial_id, stored = store.key, str(store.folder)  # its saved epochs hold epoch_<N>/m<k> per member
    group_dir = working_folder("group")
    reports, ended = replayed(store, params, group_dir)
    if ended:
        return
    points = params[GROUP]["members"]
    states = [MemberState(f"{trial_id}-m{k}", point) for k, point in enumerate(points)]
    todo: list[int] = []
    configs, trackers, names = {}, {}, {}
    for k, (state, point) in enumerate(zip(states, points)):
        run_dir = group_dir / f"m{k}"
        run_dir.mkdir(exist_ok=True)
        if (run_dir / MEMBER_FILE).is_file():  # ended in an earlier attempt: kept as it ended
            saved = json.loads((run_dir / MEMBER_FILE).read_text())
            state.status, state.reason, state.metrics = saved["status"], saved.get("reason"), saved.get("metrics", {})
            continue
        tracker = MlflowTracker(context.experiment, context.tracking_uri)
        reuse_child_run(tracker, run_dir, state.trial_id, context.parent_run_id)
        tracker.default_tags = {
            **dict(context.source),
            GROUP_TAG: trial_id,
            "itrlab.group_size": len(points),
            "itrlab.group_member": f"m{k}",
            **trial_tags(state.trial_id, context.sweep_name, point, run_dir=stored),
            **node_tags(tracker, run_dir),
        }
        tracker.default_params = trial_params(point)
        trackers[k], names[k] = tracker, trial_run_name(point)
        try:
            configs[k] = trial_config(context.base_tree, point)
        except UserInputError as err:
            _end_member(state, run_dir, "error", failure_reason(err), tracker, names[k], context)
            continue
        todo.append(k)

    def on_epoch_end(epoch: int) -> None:
        result = {"epoch": epoch, **_report(states, context.metric)}
        reports.append(result)
        store.save(epoch, group_dir, reports)  # a StorageError when the storage does not take it
        tune.report(result)

    started = time.perf_counter()
    try:
        results = (
            run_group(
                [configs[k] for k in todo],
                [group_dir / f"m{k}" for k in todo],
                callbacks=[[states[k]] for k in todo],
                trackers=[trackers[k] for k in todo],
                parent_run_id=context.parent_run_id,
                run_names=[names[k] for k in todo],
                on_epoch_end=on_epoch_end,
            )
            if todo
            else []
        )
    except StorageError as err:  # the sweep's storage is broken: the driver stops the sweep
        tune.report({**_report(states, context.metric), STORAGE_ERROR: 1, "stop_reason": failure_reason(err)})
        raise
    seconds = time.perf_counter() - started
    for k, result in zip(todo, results):
        state, run_dir = states[k], group_dir / f"m{k}"
        if result.failure is None:
            run = result.result
            state.metrics.update(
                {
                    "done": 1,
                    "epoch": run.epochs,
                    "best_epoch": run.best_epoch,
                    "best_val_rsum": run.best_val_rsum,
                    "run_seconds": run.seconds,
                    "cost_seconds": run.seconds / len(todo),
                    "trial_end_time": time.time(),
                    **run.test_metrics(),
                }
            )
            _end_member(state, run_dir, "finished", None, None, names[k], context)
        else:
            status = "diverged" if isinstance(result.failure, NonFiniteLossError) else "error"
            _end_member(state, run_dir, status, failure_reason(result.failure), trackers[k], names[k], context)
    final = {**_report(states, context.metric), "done": 1, "group_seconds": seconds}
    store.finish(final)
    tune.report(final)


def _end_member(
    state: MemberState,
    run_dir: Path,
    status: str,
    reason: str | None,
    tracker: MlflowTracker | None,
    run_name: str,
    context: TrialContext,
) -> None:
    """Record how a member ended: its state, ``member.json`` and, when it failed, its MLflow run FAILED
    with the reason (created if it failed before its run started)."""
    state.status, state.reason = status, reason
    if reason is not None:
        record_failure(tracker, run_dir, reason, run_name, context.parent_run_id)
    (run_dir / MEMBER_FILE).write_text(json.dumps(state.to_dict(), default=str))


def member_rows(rows: list[TrialRow]) -> list[TrialRow]:
    """One row per member of every group trial (other rows as they are): a member that ended keeps its
    own status; one still training takes its group's (error, interrupted, not started)."""
    expanded = []
    for row in rows:
        group = row.params.get(GROUP) if isinstance(row.params, dict) else None
        if not isinstance(group, dict):
            expanded.append(row)
            continue
        saved = json.loads(row.metrics[MEMBERS]) if isinstance(row.metrics.get(MEMBERS), str) else []
        for k, point in enumerate(group["members"]):
            entry = saved[k] if k < len(saved) else {"trial_id": f"{row.trial_id}-m{k}", "status": row.status}
            status, reason = entry.get("status"), entry.get("reason")
            if status not in FINAL:
                status = row.status if row.status != "finished" else "error"
                reason = row.reason if row.status != "finished" else "the group ended before this member did"
            expanded.append(
                TrialRow(
                    entry.get("trial_id", f"{row.trial_id}-m{k}"),
                    point,
                    dict(entry.get("metrics") or {}),
                    status,
                    reason,
                )
            )
    return expanded
