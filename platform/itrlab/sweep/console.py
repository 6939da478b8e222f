"""What a running sweep prints: one progress line every 30 s, and Ray's noise kept off the console.

**Progress** (:class:`SweepProgress`, a Tune callback): every ``$ITRLAB_SWEEP_PROGRESS_S`` seconds (default 30)
and once at the end, one line on stdout::

    7/15 trials done · 2 running: starting, epoch 2/10 step 120/400 · 6 queued (2 at a time) · 0 failed · ETA 6 min
    15/15 trials done · 0 running · 0 failed · took 21 min (this invocation)

The counts come from Tune's trial list at every step (so a resumed sweep counts what it restored); what each
running trial does and its step rate from the progress board (:mod:`itrlab.sweep.board`); the ETA from those rates
and what each waiting trial will take (:func:`eta_seconds`): a trial of its row (a grid point less its seed), ended
or projected, since a table's rows can differ eightfold in cost; the mean trial where its row has none yet.

**Quiet console** (unless ``itrlab sweep -v``; a value the user set wins): Tune's legacy reporter at verbose 0
(``RAY_AIR_NEW_OUTPUT=0``: the new one still prints its header), no checkpoint-sync warning per epoch, no MLflow
artifact progress bars (:data:`QUIET_ENV`, also in every trial's runtime env), and the ``ray.tune`` and ``ray.train``
loggers at WARNING in the driver and every worker (:mod:`itrlab.sweep.quiet_workers`). Always: Tune's
"Tuner.restore(...)" hint after Ctrl-C is dropped (:class:`DropTunerRestoreHint`): a sweep resumes with ``--resume``.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from ray import tune

from itrlab.config.sweep import SweepSpec
from itrlab.console_log import emit
from itrlab.sweep.board import TrialState, read_trial_state
from itrlab.sweep.points import point_key, trial_point
from itrlab.sweep.quiet_workers import quiet_worker_logs
from itrlab.sweep.trial import INPUT_ERROR, STORAGE_ERROR
from itrlab.sweep.trial_store import ended_trials, trial_key

_log = logging.getLogger(__name__)

PROGRESS_ENV = "ITRLAB_SWEEP_PROGRESS_S"  # seconds between progress lines (default 30)
FAILED_RESULTS = (STORAGE_ERROR, INPUT_ERROR, "diverged")  # a trial's last result that says its run ended FAILED
PROGRESS_DEFAULT_S = 30.0
LISTED_STATES = 3  # up to this many running trials are listed one by one, more are counted per phase
VERBOSE_ENV = "ITRLAB_SWEEP_VERBOSE"  # "1": Ray's full console output (itrlab sweep -v)
QUIET_ENV = {
    "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "0",  # 0: never warn (Ray's docs)
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
    # Tune's legacy reporter, silent at verbose=0; the new one (Ray's default) still prints its
    # experiment header (search algorithm, scheduler, TensorBoard command) at verbose=0
    "RAY_AIR_NEW_OUTPUT": "0",
}

_set_here: dict[str, str] = {}  # what quiet_env put in this process's os.environ


# --- the console's verbosity ---------------------------------------------------------------------


def set_verbose(verbose: bool) -> None:
    """The sweep command's ``-v``: Ray's full output for this process and the Ray it starts."""
    os.environ[VERBOSE_ENV] = "1" if verbose else "0"


def is_verbose() -> bool:
    return os.environ.get(VERBOSE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def tune_verbosity() -> int | None:
    """``RunConfig(verbose=...)``: 0 (Tune's reporter silent) unless verbose; None keeps Tune's default."""
    return None if is_verbose() else 0


def quiet_env() -> dict[str, str]:
    """Put :data:`QUIET_ENV` into ``os.environ`` (a value the user set wins; nothing when verbose) and
    return what this process set, for the runtime env of a cluster's workers."""
    if is_verbose():  # and none of a quiet sweep run before in this process (tests)
        for key, value in list(_set_here.items()):
            if os.environ.get(key) == value:
                del os.environ[key]
            del _set_here[key]
        return {}
    for key, value in QUIET_ENV.items():
        if key not in os.environ:
            os.environ[key] = _set_here[key] = value
    return {key: value for key, value in _set_here.items() if os.environ.get(key) == value}


class DropTunerRestoreHint(logging.Filter):
    """Drops Tune's "Resume experiment with: Tuner.restore(...)" record after an interruption: a sweep
    resumes with ``--resume``, which itrlab prints. Every other record passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a record that cannot be formatted is not this one
            return True
        return "Tuner.restore(" not in message


def configure_console() -> None:
    """The driver's side (idempotent): the restore hint dropped always; when not verbose, the quiet
    environment and Tune's and Train's loggers at WARNING."""
    tune_logger = logging.getLogger("ray.tune.tune")  # where tune.run logs the hint
    if not any(isinstance(f, DropTunerRestoreHint) for f in tune_logger.filters):
        tune_logger.addFilter(DropTunerRestoreHint())
    quiet_env()
    if not is_verbose():
        quiet_worker_logs()  # the driver's loggers as every worker's


def with_console(run_config: tune.RunConfig, spec: SweepSpec, **progress: Any) -> tune.RunConfig:
    """``run_config`` with this invocation's console: Tune's verbosity and a fresh :class:`SweepProgress`
    in place of any it had. ``total``: Tune's trials, when they are not the sweep's (a grouped sweep counts its
    groups, a resumed search the configurations it has left)."""
    total = progress.pop("total", None) or spec.trial_count
    configure_console()
    run_config.verbose = tune_verbosity()
    if run_config.verbose is None:  # RunConfig's own default, as a fresh RunConfig() sets it
        run_config.verbose = tune.RunConfig().verbose
    kept = [c for c in (run_config.callbacks or []) if not isinstance(c, SweepProgress)]
    run_config.callbacks = [*kept, SweepProgress(total, **{"concurrency": spec.concurrency, **progress})]
    return run_config


# --- the progress line ---------------------------------------------------------------------------


def progress_interval() -> float:
    """Seconds between progress lines: ``$ITRLAB_SWEEP_PROGRESS_S``, default 30."""
    raw = os.environ.get(PROGRESS_ENV, "").strip()
    try:
        value = float(raw) if raw else PROGRESS_DEFAULT_S
    except ValueError:
        value = PROGRESS_DEFAULT_S
    return value if value > 0 and math.isfinite(value) else PROGRESS_DEFAULT_S


def eta_seconds(lefts: list[float | None], waiting: list[float | None], slots: int) -> float | None:
    """Seconds until the sweep ends, or None while it cannot be told: ``lefts`` (each running trial's, None: no rate
    yet) and ``waiting`` (each trial not started yet: what a whole one will take, None: unknown) shared by ``slots``,
    but no sooner than the slowest running trial; never 0 while a trial runs or waits."""
    if any(left is None for left in lefts) or any(whole is None for whole in waiting):
        return None
    known = [left for left in lefts if left is not None]
    shared = (sum(known) + sum(whole for whole in waiting if whole is not None)) / max(slots, 1)
    eta = max(shared, max(known, default=0.0))
    return max(eta, 1.0) if known or waiting else eta


def format_duration(seconds: float) -> str:
    """``45 s``, ``6 min``, ``2 h 05 min`` (minutes rounded up: an ETA errs late)."""
    if seconds < 60:
        return f"{max(math.ceil(seconds), 0)} s"
    minutes = math.ceil(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def progress_line(
    total: int,
    done: int,
    running: int,
    failed: int,
    eta: float | None,
    elapsed: float | None = None,
    interrupted: int = 0,
    states: list[str] | None = None,
    pending: str = "",
) -> str:
    """``7/15 trials done · 2 running: starting, epoch 2/10 step 120/400 · 6 queued · 0 failed · ETA 6 min``
    (``states``: what each running trial does; ``pending``: the waiting trials, said); with ``elapsed``,
    the final line (``... · 1 interrupted · took 14 min (this invocation)`` when Ctrl-C cut trials short)."""
    if elapsed is not None:
        cut = f" · {interrupted} interrupted" if interrupted else ""
        return (
            f"{done}/{total} trials done · {running} running · {failed} failed{cut} · took "
            f"{format_duration(elapsed)} (this invocation)"
        )
    what = f": {', '.join(states)}" if states else ""
    waiting = f" · {pending}" if pending else ""
    if not running and not pending:  # every trial ended; Tune has yet to end the sweep (not "ETA 0 s")
        return f"{done}/{total} trials done · 0 running · {failed} failed · ending"
    return (
        f"{done}/{total} trials done · {running} running{what}{waiting} · {failed} failed · "
        f"ETA {'unknown' if eta is None else format_duration(eta)}"
    )


def running_states(states: list[TrialState | None]) -> list[str]:
    """What each running trial does (``starting`` before its first note), or per phase when more than
    :data:`LISTED_STATES` run."""
    shown = ["starting" if state is None else state.describe() for state in states]
    if len(shown) <= LISTED_STATES:
        return shown
    phases = ["starting" if state is None else state.phase for state in states]
    return [f"{phases.count(phase)} {phase}" for phase in dict.fromkeys(phases)]


def pending_text(pending: int, running: int, concurrency: int | None) -> str:
    """The trials Tune holds back: queued behind the concurrency, or waiting for Ray (resources, or the
    worker process it starts for them)."""
    if not pending:
        return ""
    if concurrency is None:
        return f"{pending} pending"
    if running >= concurrency:
        return f"{pending} queued ({concurrency} at a time)"
    return f"{pending} pending (Ray is starting a worker, or waiting for resources)"


def trial_rows(spec: SweepSpec) -> dict[str, str]:
    """Every trial of a grid sweep by key (:func:`~itrlab.sweep.trial_store.trial_key`): its row, the grid point
    less its seed, as one string."""
    return {
        trial_key(point): point_key({k: v for k, v in point.items() if k != "seed"}) for point in spec.grid_points()
    }


def ended_before(sweep_dir: Path) -> dict[str, bool]:
    """The trials of a sweep's folder that had ended, by key: whether each failed (its loss diverged)."""
    return {key: bool(final.get("diverged")) for key, final in ended_trials(sweep_dir).items()}


class SweepProgress(tune.Callback):
    """Prints :func:`progress_line` every ``interval`` seconds while Tune runs, and once at its end.

    On ``--resume``, the trials that had ended before (``ended``: key -> whether it failed,
    :mod:`itrlab.sweep.trial_store`) count from the start, while Tune runs them again only to hear their results. A
    trial's wall time runs from its first start in this invocation. Picklable: Tune saves its RunConfig, callbacks
    included, with the experiment's state."""

    def __init__(
        self,
        total: int,
        interval: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        stream: TextIO | None = None,
        board: Path | None = None,
        concurrency: int | None = None,
        wall: Callable[[], float] = time.time,
        ended: dict[str, bool] | None = None,
        rows: dict[str, str] | None = None,
    ):
        self.total = total
        self.ended = dict(ended or {})  # key -> whether it failed, for the trials that ended before a resume
        self.rows = dict(rows or {})  # key -> row, for every trial of a grid (:func:`trial_rows`)
        self.interval = progress_interval() if interval is None else interval
        self.clock = clock
        self.stream = stream  # None: logged at INFO (the console's stdout at the time of printing)
        self.board, self.concurrency, self.wall = board, concurrency, wall
        self.started: dict[str, float] = {}  # trial id -> first start seen in this invocation
        self.started_wall: dict[str, float] = {}  # the same, in wall-clock time (the board's notes carry it)
        self.durations: dict[str, float] = {}  # trial id -> wall time of an ended trial
        self.completed: set[str] = set()  # ids of the trials Tune completed (finished, stopped) here
        self.begun: float | None = None
        self.last_line: float | None = None
        self.final_printed = False

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["stream"] = None  # a stream (a test's buffer) does not pickle; a restored sweep gets a new one
        return state

    # Tune's hooks

    def setup(self, stop=None, num_samples=None, total_num_samples=None, **info) -> None:
        self._begin()

    def on_step_begin(self, iteration: int, trials: list, **info) -> None:
        now = self._begin()
        if now - self.last_line >= self.interval:
            self.print_line(trials)

    def on_trial_start(self, iteration: int, trials: list, trial, **info) -> None:
        self.started.setdefault(trial.trial_id, self.clock())
        self.started_wall.setdefault(trial.trial_id, self.wall())

    def on_trial_complete(self, iteration: int, trials: list, trial, **info) -> None:
        self.completed.add(trial.trial_id)
        self._ended(trial)

    def on_trial_error(self, iteration: int, trials: list, trial, **info) -> None:
        self._ended(trial)

    def on_experiment_end(self, trials: list, **info) -> None:
        if not self.final_printed:
            self.final_printed = True
            self.print_line(trials, final=True)

    # the arithmetic

    def _begin(self) -> float:
        now = self.clock()
        if self.begun is None:
            self.begun = self.last_line = now
        return now

    def _ended(self, trial) -> None:
        now = self.clock()
        start = self.started.get(trial.trial_id)
        if start is not None:
            self.durations[trial.trial_id] = now - start

    def counts(self, trials: list) -> tuple[int, int, int, int]:
        """(done, running, failed, interrupted) among ``trials``. Failed: ERROR (after its retries), or TERMINATED on
        a result that says it failed (:data:`FAILED_RESULTS`). Done: TERMINATED and completed here or restored so;
        Tune also marks TERMINATED the trials an interrupted sweep cut short: those are interrupted."""
        done = sum(not failed for failed in self.ended.values())
        failed = sum(self.ended.values())
        running = interrupted = 0
        for trial in trials:
            if self.ended and self._key(trial) in self.ended:
                continue  # counted as it ended before, whatever Tune shows while it reports again
            status = getattr(trial, "status", None)
            last = getattr(trial, "last_result", None) or {}
            if status == "ERROR" or (status == "TERMINATED" and any(last.get(key) for key in FAILED_RESULTS)):
                failed += 1  # its run ended FAILED: an error, or a trial that reported how it failed and ended
            elif status == "TERMINATED" and (trial.trial_id in self.completed or trial.trial_id not in self.started):
                done += 1
            elif status == "TERMINATED":
                interrupted += 1
            elif status == "RUNNING":
                running += 1
        return done, running, failed, interrupted

    def _key(self, trial) -> str:
        return trial_key(trial_point(dict(getattr(trial, "config", None) or {})))

    def wall_times(self, trials: list) -> list[float]:
        """Wall times of the ended trials: measured here, else (a restored trial) its time_total_s; a trial that
        ended before a resume only reports again here, which is not its wall time."""
        times = []
        for trial in trials:
            if getattr(trial, "status", None) not in ("TERMINATED", "ERROR"):
                continue
            if self.ended and self._key(trial) in self.ended:
                continue
            if trial.trial_id in self.durations:
                times.append(self.durations[trial.trial_id])
            elif trial.trial_id not in self.started:  # restored: it ended in an earlier invocation
                total_s = (getattr(trial, "last_result", None) or {}).get("time_total_s")
                if isinstance(total_s, (int, float)) and total_s > 0:
                    times.append(float(total_s))
        return times

    def line(self, trials: list, final: bool = False) -> str:
        now = self.clock()
        done, running, failed, interrupted = self.counts(trials)
        total = max(self.total, len(trials))
        if final:
            return progress_line(
                total, done, running, failed, None, elapsed=now - (self.begun or now), interrupted=interrupted
            )
        active = [t for t in trials if getattr(t, "status", None) == "RUNNING"]
        states = [read_trial_state(self.board, t.trial_id, self.started_wall.get(t.trial_id)) for t in active]
        pending = max(total - done - failed - interrupted - running, 0)
        wall = self.wall()
        lefts = [state.seconds_left(wall) if state is not None else None for state in states]
        typical = self.typical_seconds(trials, active, lefts)
        by_row = self.row_seconds(trials, active, lefts)
        # starting, or no step timed yet: a whole trial of its row
        lefts = [by_row.get(self._row(t), typical) if left is None else left for t, left in zip(active, lefts)]
        waiting = [by_row.get(row, typical) for row in self.waiting_rows(trials, pending)]
        slots = min(self.concurrency or max(running, 1), running + pending) or 1
        return progress_line(
            total,
            done,
            running,
            failed,
            eta_seconds(lefts, waiting, slots),
            states=running_states(states),
            pending=pending_text(pending, running, self.concurrency),
        )

    def typical_seconds(self, trials: list, active: list, lefts: list[float | None]) -> float | None:
        """A whole trial's wall time: the mean of the trials that ended, else of the running trials'
        projections (their time so far and what they have left), else None."""
        ended = self.wall_times(trials)
        if ended:
            return sum(ended) / len(ended)
        projected = [seconds for _, seconds in self.projections(active, lefts)]
        return sum(projected) / len(projected) if projected else None

    def projections(self, active: list, lefts: list[float | None]) -> list[tuple[Any, float]]:
        """Each running trial with a rate, and its whole wall time: its time so far and what it has left."""
        now = self.clock()
        return [
            (t, now - self.started[t.trial_id] + left)
            for t, left in zip(active, lefts)
            if left is not None and t.trial_id in self.started
        ]

    def row_seconds(self, trials: list, active: list, lefts: list[float | None]) -> dict[str, float]:
        """A whole trial's wall time for each row that has a measure: the mean of its trials that ended here, else
        of its running trials' projections."""
        ended: dict[str, list[float]] = {}
        for trial in trials:
            if trial.trial_id in self.durations and (row := self._row(trial)) is not None:
                ended.setdefault(row, []).append(self.durations[trial.trial_id])
        projected: dict[str, list[float]] = {}
        for trial, seconds in self.projections(active, lefts):
            if (row := self._row(trial)) is not None:
                projected.setdefault(row, []).append(seconds)
        return {row: sum(times) / len(times) for row, times in {**projected, **ended}.items()}

    def waiting_rows(self, trials: list, pending: int) -> list[str | None]:
        """The rows of the ``pending`` trials not started yet, in the grid's order (None: a row not known, as for
        an Optuna search's trials)."""
        seen = set(self.ended) | {self._key(t) for t in trials if getattr(t, "status", None) != "PENDING"}
        rows: list[str | None] = [row for key, row in self.rows.items() if key not in seen][:pending]
        return rows + [None] * (pending - len(rows))

    def _row(self, trial) -> str | None:
        return self.rows.get(self._key(trial)) if self.rows else None

    def print_line(self, trials: list, final: bool = False) -> None:
        self.last_line = self.clock()
        emit(_log, self.line(trials, final), self.stream)
