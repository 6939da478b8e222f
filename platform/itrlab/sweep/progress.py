"""What a running sweep prints: one progress line every 30 s, and Ray's noise kept off the console.

**Progress** (:class:`SweepProgress`, a Tune callback the runner adds to the Tuner's callbacks): every
``$ITRLAB_SWEEP_PROGRESS_S`` seconds (default 30) while the sweep runs, and once when it ends, one
line on stdout::

    7/15 trials done · 2 running · 0 failed · ETA 6 min

*done* counts trials that finished or were stopped early (Tune's TERMINATED), *failed* those that
errored for good (ERROR, after their retries); the total is the sweep's trial count (the grid times the
seeds, or Optuna's ``num_trials``). The counts are read from Tune's trial list at every step, so a
resumed sweep counts the trials it restored. The ETA (:func:`eta_seconds`) is the mean wall time of
the trials that ended (measured from their start to their end in this invocation; a restored trial's
``time_total_s``), spread over the trials running at once: "ETA unknown" until one trial has ended.

**Quiet console** (unless ``itrlab sweep -v``, which keeps Ray's full output):

- Tune's own reporter at ``RunConfig(verbose=0)``: no status table every 30 s, no table per trial (the
  progress line and the sweep's pivot replace them); ``RAY_AIR_NEW_OUTPUT=0`` picks Tune's legacy
  reporter, which at verbose 0 prints nothing (the new one still prints its experiment header);
- ``TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S=0``: no "snapshotting ... may become a
  bottleneck" warning, which a per-epoch checkpoint with ``num_to_keep`` triggers every epoch (Ray's
  documented switch; the warning about a *slow* snapshot stays);
- ``MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR=false`` in the driver and every trial process (the runtime env
  of :func:`itrlab.sweep.cluster.init_ray`): no tqdm bars for artifact uploads and downloads;
- the ``ray.tune`` and ``ray.train`` loggers at WARNING in the driver and, through Ray's
  ``worker_process_setup_hook`` (:func:`quiet_worker_logs`), in every worker: no "Checkpoint
  successfully created at ..." line per epoch; warnings and errors stay.

A value the user set for one of these variables wins. Always, with or without ``-v``: Tune's "Resume
experiment with: Tuner.restore(...)" after Ctrl-C is dropped (:class:`DropTunerRestoreHint`), since a
sweep resumes with ``--resume``, which the CLI prints; Tune's other lines on that logger stay.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from typing import Any, Callable, TextIO

from ray import tune

from itrlab.config.sweep import SweepSpec
from itrlab.train.loop import STEP_PROGRESS_ENV  # the step counter's interval: forwarded to a cluster's workers

PROGRESS_ENV = "ITRLAB_SWEEP_PROGRESS_S"  # seconds between progress lines (default 30)
PROGRESS_DEFAULT_S = 30.0
VERBOSE_ENV = "ITRLAB_SWEEP_VERBOSE"  # "1": Ray's full console output (itrlab sweep -v)
QUIET_ENV = {
    "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "0",  # 0: never warn (Ray's docs)
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
    # Tune's legacy reporter, silent at verbose=0; the new one (Ray's default) still prints its
    # experiment header (search algorithm, scheduler, TensorBoard command) at verbose=0
    "RAY_AIR_NEW_OUTPUT": "0",
}
QUIET_LOGGERS = ("ray.tune", "ray.train")  # INFO lines: checkpoint paths, "Wrote the latest version ..."
WORKER_SETUP_HOOK = f"{__name__}.quiet_worker_logs"

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


def quiet_worker_logs() -> None:
    """Ray's ``worker_process_setup_hook`` for a quiet sweep: Tune's and Train's INFO lines off in every
    worker process (trials, Ray Train workers); their warnings and errors stay."""
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


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
        for name in QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.WARNING)


def with_console(run_config: tune.RunConfig, spec: SweepSpec, **progress: Any) -> tune.RunConfig:
    """``run_config`` with this invocation's console: Tune's verbosity and a fresh :class:`SweepProgress`
    in place of any it had. Also for the RunConfig that ``Tuner.restore`` brings back from the saved
    state (Tune reapplies the first invocation's, callbacks and verbosity included). ``total``: Tune's
    trials, when they are not the sweep's (a grouped sweep counts its groups)."""
    total = progress.pop("total", None) or spec.trial_count
    configure_console()
    run_config.verbose = tune_verbosity()
    if run_config.verbose is None:  # RunConfig's own default, as a fresh RunConfig() sets it
        run_config.verbose = tune.RunConfig().verbose
    kept = [c for c in (run_config.callbacks or []) if not isinstance(c, SweepProgress)]
    run_config.callbacks = [*kept, SweepProgress(total, **progress)]
    return run_config


def restored_with_console(tuner: tune.Tuner, spec: SweepSpec, **progress: Any) -> tune.Tuner:
    """:func:`with_console` on the RunConfig of a restored Tuner (as ``Tuner.restore`` returns it)."""
    local = getattr(tuner, "_local_tuner", None)  # None under Ray client, where Tune runs remotely
    if local is not None:
        with_console(local.get_run_config(), spec, **progress)
    return tuner


# --- the progress line ---------------------------------------------------------------------------


def progress_interval() -> float:
    """Seconds between progress lines: ``$ITRLAB_SWEEP_PROGRESS_S``, default 30."""
    raw = os.environ.get(PROGRESS_ENV, "").strip()
    try:
        value = float(raw) if raw else PROGRESS_DEFAULT_S
    except ValueError:
        value = PROGRESS_DEFAULT_S
    return value if value > 0 and math.isfinite(value) else PROGRESS_DEFAULT_S


def eta_seconds(total: int, ended: int, durations: list[float], running_elapsed: list[float]) -> float | None:
    """Seconds until the sweep ends, or None before any trial ended.

    ``durations``: the wall times of the trials that ended; ``running_elapsed``: how long each running
    trial has run. Each trial is taken to last the mean of ``durations``: a running one has what it lacks
    of the mean left, a pending one (``total - ended - running``) the whole mean; the work is shared by
    as many slots as trials run now (at least one), and the sweep ends no sooner than its slowest
    running trial."""
    if not durations:
        return None
    mean = sum(durations) / len(durations)
    left = [max(mean - elapsed, 0.0) for elapsed in running_elapsed]
    pending = max(total - ended - len(running_elapsed), 0)
    shared = (sum(left) + pending * mean) / max(len(running_elapsed), 1)
    return max(shared, max(left, default=0.0))


def format_duration(seconds: float) -> str:
    """``45 s``, ``6 min``, ``2 h 05 min`` (minutes rounded up: an ETA errs late)."""
    if seconds < 60:
        return f"{max(math.ceil(seconds), 0)} s"
    minutes = math.ceil(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def progress_line(total: int, done: int, running: int, failed: int, eta: float | None,
                  elapsed: float | None = None, interrupted: int = 0) -> str:
    """``7/15 trials done · 2 running · 0 failed · ETA 6 min``; with ``elapsed``, the final line
    (``... · 1 interrupted · took 14 min`` when Ctrl-C cut trials short)."""
    head = f"{done}/{total} trials done · {running} running · {failed} failed"
    if elapsed is not None:
        cut = f" · {interrupted} interrupted" if interrupted else ""
        return f"{head}{cut} · took {format_duration(elapsed)}"
    return f"{head} · ETA {'unknown' if eta is None else format_duration(eta)}"


class SweepProgress(tune.Callback):
    """Prints :func:`progress_line` every ``interval`` seconds while Tune runs, and once at its end.

    Counts come from Tune's trial list (TERMINATED: done, ERROR: failed, RUNNING: running), so trials
    restored by ``--resume`` count; a trial's wall time runs from its first start in this invocation to
    its end (a restored trial that had ended: its ``time_total_s``). Picklable: Tune saves its
    RunConfig, callbacks included, with the experiment's state."""

    def __init__(self, total: int, interval: float | None = None, clock: Callable[[], float] = time.monotonic,
                 stream: TextIO | None = None):
        self.total = total
        self.interval = progress_interval() if interval is None else interval
        self.clock = clock
        self.stream = stream  # None: sys.stdout at the time of printing
        self.started: dict[str, float] = {}  # trial id -> first start seen in this invocation
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
        """(done, running, failed, interrupted) among ``trials``. Done: TERMINATED, and either completed
        in this invocation or restored so (never started here): Tune also marks TERMINATED the trials
        that the end of an interrupted sweep cut short, without completing them; those are interrupted."""
        done = running = failed = interrupted = 0
        for trial in trials:
            status = getattr(trial, "status", None)
            if status == "ERROR":
                failed += 1
            elif status == "TERMINATED" and (trial.trial_id in self.completed or trial.trial_id not in self.started):
                done += 1
            elif status == "TERMINATED":
                interrupted += 1
            elif status == "RUNNING":
                running += 1
        return done, running, failed, interrupted

    def wall_times(self, trials: list) -> list[float]:
        """Wall times of the ended trials: measured here, else (a restored trial) its time_total_s."""
        times = []
        for trial in trials:
            if getattr(trial, "status", None) not in ("TERMINATED", "ERROR"):
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
            return progress_line(total, done, running, failed, None, elapsed=now - (self.begun or now),
                                 interrupted=interrupted)
        elapsed = [now - self.started[t.trial_id] for t in trials
                   if getattr(t, "status", None) == "RUNNING" and t.trial_id in self.started]
        elapsed += [0.0] * (running - len(elapsed))  # running, start not seen (cannot happen in Tune)
        return progress_line(total, done, running, failed, eta_seconds(total, done + failed, self.wall_times(trials), elapsed))

    def print_line(self, trials: list, final: bool = False) -> None:
        self.last_line = self.clock()
        print(self.line(trials, final), file=self.stream or sys.stdout, flush=True)
