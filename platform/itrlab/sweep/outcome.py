"""How a sweep's trials ended: one row per trial from Tune's results (finished, diverged, failed with
its real error, stopped early, cut short by Ctrl-C or never started), and MLflow runs that say so
(none left RUNNING)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
from typing import Any

from ray import tune

from itrlab.config.sweep import SweepSpec
from itrlab.errors import failure_reason
from itrlab.report.summary import TrialRow
from itrlab.sweep.group_trial import member_rows
from itrlab.sweep.points import trial_point
from itrlab.sweep.trial import INPUT_ERROR, STORAGE_ERROR, TRIAL_TAG
from itrlab.sweep.trial_store import TrialStore, ended_trials, trial_key
from itrlab.tracking import STOP_REASON_TAG, MlflowTracker

UNFINISHED = ("interrupted", "not started")
# how a finished trial got past failed attempts (a lost node, a killed process): in its row's metrics
# and as a tag of its run
RETRIED = "itrlab.retried"


class NoRetryOnInputError(tune.Callback):
    """A trial that failed on its input (its last result carries ``input_error``) gets no further
    attempt: retrying cannot help, and each attempt would fail the same way. Tune retries every error
    up to ``max_failures`` times; this lowers the limit of that one trial."""

    def on_trial_result(self, iteration: int, trials: list, trial, result: dict, **info) -> None:
        if result.get(INPUT_ERROR) or result.get(STORAGE_ERROR):
            trial.max_failures = 0


class StopOnStorageError(tune.Stopper):
    """Stops the whole sweep once a trial could not write its checkpoint (``storage_error``): every trial shares
    the storage, so the next would fail the same way. The class-wide ``reason`` keeps its message for the driver."""

    reason: str | None = None

    def __call__(self, trial_id: str, result: dict) -> bool:
        if result.get(STORAGE_ERROR) and StopOnStorageError.reason is None:
            StopOnStorageError.reason = str(result.get("stop_reason") or "a trial could not write its checkpoint")
        return bool(result.get(STORAGE_ERROR))

    def stop_all(self) -> bool:
        return StopOnStorageError.reason is not None


def retried(trial) -> str | None:
    """How a trial that finished got there after failed attempts (its node lost, its process killed: Tune
    retried it under ``max_failures`` from its last checkpoint), on one line; None for a first attempt."""
    failures = getattr(trial, "num_failures", 0) or 0
    if not failures:
        return None
    last = None
    with contextlib.suppress(Exception):  # the last failure's own line, from Tune's error.txt (text: nothing unpickled)
        lines = [line.strip() for line in open(trial.error_file, encoding="utf-8", errors="replace") if line.strip()]
        last = next(
            (line for line in reversed(lines) if not line.startswith(("File ", "^", "Traceback", "Failure #"))), None
        )
    return (
        f"finished after {failures} failed attempt(s), retried from its last checkpoint; the last: "
        f"{last or 'see error.txt in its folder'}"
    )


def error_line(error: BaseException | None) -> str | None:
    """The real error of a failed trial on one line (the trial's own exception, not Ray's wrapper)."""
    if error is None:
        return None
    cause = getattr(error, "cause", None)
    if isinstance(cause, BaseException):
        return failure_reason(cause)
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    # RayActorError and its kinds (ActorDiedError, ActorUnavailableError: the node was lost)
    actor_error = any(kind.__name__ == "RayActorError" for kind in type(error).__mro__)
    if actor_error or (lines and "actor died" in lines[0].lower()):
        return "its process died (killed, out of memory, or its node lost): " + (
            lines[0] if lines else type(error).__name__
        )
    return failure_reason(error)


class SigintWatch:
    """Whether Ctrl-C (SIGINT) interrupted ``Tuner.fit``, which then returns normally.

    Tune installs its own SIGINT handler for the run; on the first SIGINT it ends the run (after saving
    the experiment state, so that ``--resume`` continues it) and puts back the handler that was there
    before, here this watch's. A handler still in place after ``fit`` therefore means an interruption.
    Without Tune's handler (not the main thread, or ``TUNE_DISABLE_SIGINT_HANDLER``), SIGINT raises
    KeyboardInterrupt as usual.
    """

    def __enter__(self) -> SigintWatch:
        self.interrupted = False
        self.active = threading.current_thread() is threading.main_thread() and not int(
            os.environ.get("TUNE_DISABLE_SIGINT_HANDLER", "0") or 0
        )
        if self.active:
            self.previous = signal.signal(signal.SIGINT, self._handler)
        return self

    def _handler(self, signum, frame) -> None:
        raise KeyboardInterrupt

    def __exit__(self, *exc) -> None:
        if self.active:
            self.interrupted = signal.getsignal(signal.SIGINT) == self._handler
            signal.signal(signal.SIGINT, self.previous)


def trial_rows(results, interrupted: bool = False) -> tuple[list[TrialRow], bool]:
    """One row per trial of ``results`` (a ResultGrid), and whether the sweep was interrupted (Tune
    returns normally after Ctrl-C: ``interrupted`` says so; trials still pending or running say so too).
    After an interruption, a trial that neither finished nor failed was cut short ("interrupted", or
    "not started" when it never reported)."""
    trials = list(getattr(getattr(results, "_experiment_analysis", None), "trials", None) or [])
    if len(trials) != len(results):
        trials = [None] * len(results)
    interrupted = interrupted or any(getattr(t, "status", None) in ("PENDING", "RUNNING", "PAUSED") for t in trials)
    rows = []
    for result, trial in zip(results, trials):
        metrics = dict(result.metrics or {})
        state = getattr(trial, "status", None)
        reason = metrics.get("stop_reason")
        if result.error is not None or state == "ERROR":
            status, reason = "error", reason or error_line(result.error)
        elif metrics.get("diverged"):
            status = "diverged"
        elif metrics.get("done"):
            status, note = "finished", retried(trial)
            if note:  # not a reason: the trial finished
                metrics[RETRIED] = note
        elif interrupted:
            started = metrics or getattr(getattr(trial, "run_metadata", None), "start_time", None) is not None
            status = "interrupted" if started else "not started"
            reason = "the sweep was interrupted; --resume continues it"
        else:
            status, reason = "stopped", reason or "stopped early by the scheduler (ASHA)"
        point = trial_point(dict(result.config or {}))
        trial_id = (
            trial_key(point) if point else getattr(trial, "trial_id", None) or str(result.path).rsplit("/", 1)[-1]
        )
        rows.append(TrialRow(str(trial_id), point, metrics, status, reason))
    return member_rows(rows), interrupted  # a grouped sweep's trial: one row per member


def _key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, default=str)


def with_unstarted(rows: list[TrialRow], spec: SweepSpec) -> list[TrialRow]:
    """The rows, plus one ``not started`` row per grid point that Tune had not created a trial for yet."""
    if spec.optuna is not None:
        return rows
    present = {_key(row.params) for row in rows}
    missing = [point for point in spec.grid_points() if _key(point) not in present]
    return rows + [
        TrialRow("-", point, {}, "not started", "the sweep was interrupted; --resume continues it") for point in missing
    ]


def settle_trial_runs(parent: MlflowTracker, rows: list[TrialRow]) -> None:
    """Leave no trial's MLflow run RUNNING: a failed trial (killed more often than ``max_failures``, say:
    its process never ended its run) ends FAILED with its reason, one cut short by an interruption or
    stopped early ends KILLED; a failed trial's run carries the reason in ``itrlab.stop_reason``, one that
    finished after failed attempts says so in ``itrlab.retried``."""
    runs = {run.data.tags.get(TRIAL_TAG): run for run in parent.child_runs()}
    for row in rows:
        run = runs.get(row.trial_id)
        if run is None:
            continue
        if row.metrics.get(RETRIED):
            parent.client.set_tag(run.info.run_id, RETRIED, row.metrics[RETRIED])
        running = run.info.status == "RUNNING"
        if row.status == "error" and (running or STOP_REASON_TAG not in run.data.tags):
            parent.end_run(run.info.run_id, "FAILED", {STOP_REASON_TAG: row.reason or "the trial failed"})
        elif row.status in UNFINISHED and run.info.status != "FINISHED":
            # stopping the trial may have ended its run FAILED (Ray stops its training thread with an
            # exception): the interruption is the reason
            parent.end_run(run.info.run_id, "KILLED", {STOP_REASON_TAG: row.reason or row.status})
        elif running and row.status == "stopped":
            parent.end_run(run.info.run_id, "KILLED", {STOP_REASON_TAG: row.reason or row.status})


def kill_running_trial_runs(parent: MlflowTracker, reason: str) -> None:
    """Best effort, when the driver itself is interrupted or fails: its trials' RUNNING runs end KILLED."""
    with contextlib.suppress(Exception):
        for run in parent.child_runs():
            if run.info.status == "RUNNING":
                parent.end_run(run.info.run_id, "KILLED", {STOP_REASON_TAG: reason})


def mark_stopped(sweep_dir, rows: list[TrialRow]) -> None:
    """Record, in each trial's saved state, that the scheduler stopped it early: a ``--resume`` reports its
    result again and does not train it on."""
    for row in rows:
        if row.status == "stopped" and row.trial_id != "-":
            TrialStore(sweep_dir, row.trial_id).stop(row.reason or "stopped early by the scheduler (ASHA)")


def earlier_rows(sweep_dir, rows: list[TrialRow]) -> list[TrialRow]:
    """The rows of trials that ended in an earlier invocation and that this one did not run again (a resumed
    search does not ask again for the configurations it completed), from their saved state."""
    seen = {row.trial_id for row in rows}
    found = []
    for key, final in ended_trials(sweep_dir).items():
        point = TrialStore(sweep_dir, key).point() if key not in seen else None
        if point is None:
            continue
        status = "diverged" if final.get("diverged") else "stopped" if final.get("stopped") else "finished"
        found.append(TrialRow(key, trial_point(point), dict(final), status, final.get("stop_reason")))
    return member_rows(found)
