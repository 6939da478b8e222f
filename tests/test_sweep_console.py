"""What a sweep prints while it runs: the progress line and its ETA, the step counter within an epoch,
and Ray's noise kept off the console unless ``-v`` (itrlab.sweep.console). The console of a real sweep,
interrupted and resumed, is checked in tests/test_faults_jobs.py."""

from __future__ import annotations

import io
import logging
import os
import pickle
import re
from dataclasses import dataclass, field

import pytest

from conftest import tiny_config
from itrlab.config.sweep import SweepSpec
from itrlab.sweep import console
from itrlab.sweep.board import BoardWriter, TrialState, read_trial_state
from itrlab.sweep.console import DropTunerRestoreHint, SweepProgress, eta_seconds, format_duration, progress_line
from itrlab.sweep.trial_store import trial_key
from itrlab.train.loop import StepLogger, format_step_time


class Clock:
    """A clock a test moves by hand."""

    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class FakeTrial:
    trial_id: str
    status: str = "PENDING"
    last_result: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)


def test_a_resumed_sweep_counts_the_trials_that_had_ended_from_its_start():
    """A --resume runs every trial again, those that had ended only to report their results: they count as they
    ended (done, or failed when their loss diverged) from the start, not as running or pending, and once."""
    points = [{"cooperative.strategy": s, "seed": 0} for s in "AFG"]
    ended = {trial_key(points[0]): False, trial_key(points[1]): True}
    progress = SweepProgress(3, interval=30, clock=Clock(), ended=ended)
    trials = [FakeTrial(f"t{i}", config=point) for i, point in enumerate(points)]
    assert progress.counts(trials) == (1, 0, 1, 0)
    trials[0].status, trials[1].status, trials[2].status = "RUNNING", "TERMINATED", "RUNNING"  # reporting again
    assert progress.counts(trials) == (1, 1, 1, 0)
    assert progress.line(trials).startswith("1/3 trials done · 1 running")


def grid_spec(**extra) -> SweepSpec:
    return SweepSpec.model_validate(
        {
            "name": "s",
            "experiment": "dbl_synthetic_tiny",
            "grid": {"cooperative.strategy": ["A", "B", "C", "D", "E"]},
            "seeds": [0, 1, 2],
            **extra,
        }
    )


# --- the line and its arithmetic ---------------------------------------------------------------------


def test_progress_line_format():
    assert progress_line(15, 7, 2, 0, 6 * 60) == "7/15 trials done · 2 running · 0 failed · ETA 6 min"
    assert progress_line(15, 0, 2, 1, None) == "0/15 trials done · 2 running · 1 failed · ETA unknown"
    assert (
        progress_line(
            15, 7, 2, 0, 6 * 60, states=["starting", "epoch 2/10 step 120/400"], pending="6 queued (2 at a time)"
        )
        == "7/15 trials done · 2 running: starting, epoch 2/10 step 120/400 · 6 queued (2 at a time) · 0 failed · "
        "ETA 6 min"
    )
    assert (
        progress_line(3, 1, 0, 0, None, elapsed=14, interrupted=1)
        == "1/3 trials done · 0 running · 0 failed · 1 interrupted · took 14 s (this invocation)"
    )
    assert (
        progress_line(3, 3, 0, 0, None, elapsed=125)
        == "3/3 trials done · 0 running · 0 failed · took 3 min (this invocation)"
    )
    # every trial ended, Tune not yet done with the sweep: no "ETA 0 s" (a line a loaded machine prints)
    assert progress_line(3, 3, 0, 0, 0.0) == "3/3 trials done · 0 running · 0 failed · ending"


@pytest.mark.parametrize(
    "seconds, shown",
    [
        (0, "0 s"),
        (44.2, "45 s"),
        (60, "1 min"),
        (61, "2 min"),
        (3540, "59 min"),
        (3599, "1 h 00 min"),
        (3600, "1 h 00 min"),
        (2 * 3600 + 4 * 60 + 1, "2 h 05 min"),
    ],
)
def test_durations_round_up(seconds, shown):
    assert format_duration(seconds) == shown


def test_eta_is_unknown_until_every_running_trial_has_a_rate():
    assert eta_seconds([None, 50.0], [], 2) is None
    assert eta_seconds([50.0], [None] * 3, 1) is None  # pending trials, and no whole trial measured


def test_eta_spreads_the_work_over_the_slots_and_waits_for_the_slowest():
    # 2 running with 30 and 60 s left, 6 pending trials of 60 s each, shared by 2 slots: (90 + 360) / 2 = 225 s
    assert eta_seconds([30.0, 60.0], [60.0] * 6, 2) == pytest.approx(225.0)
    # nothing pending: the sweep ends when its slowest running trial does, not at the shared average
    assert eta_seconds([80.0, 10.0], [], 2) == pytest.approx(80.0)
    # none running but some pending (between trials): one slot
    assert eta_seconds([], [20.0, 20.0], 1) == pytest.approx(40.0)
    # a trial with a fraction of a second left is not "0 s"
    assert eta_seconds([0.2], [], 1) == 1.0 and format_duration(eta_seconds([0.2], [], 1)) == "1 s"

    # waiting trials of different costs: each counts what a trial of its own row takes
    assert eta_seconds([30.0], [60.0, 600.0], 1) == pytest.approx(690.0)


def test_a_waiting_trial_is_timed_by_its_own_row_and_by_the_mean_trial_where_its_row_has_none(tmp_path):
    """Row A's two seeds ended in 100 s each; row B's first seed trains at 10 s a step with 1,000 steps left (a
    whole B trial: 1,050 s); B's second seed waits: the ETA counts it as a B trial (1,050 s), not as the mean
    trial that ended (100 s). Row C has no trial measured yet: its waiting seed counts as the mean (100 s)."""
    from itrlab.train.training_progress import TrainingProgress

    spec = SweepSpec.model_validate(
        {
            "name": "s",
            "experiment": "dbl_synthetic_tiny",
            "grid": {"cooperative.strategy": ["A", "B", "C"]},
            "seeds": [0, 1],
        }
    )
    rows = console.trial_rows(spec)
    assert len(rows) == 6 and len(set(rows.values())) == 3  # six trials, three rows
    clock, wall, board = Clock(), Clock(5000.0), tmp_path / "progress"
    callback = SweepProgress(
        6, interval=1, clock=clock, stream=io.StringIO(), board=board, concurrency=1, wall=wall, rows=rows
    )
    trials = [FakeTrial(f"t{i}", config=point) for i, point in enumerate(spec.grid_points())]
    callback.setup()
    for trial in trials[:2]:  # A, seeds 0 and 1: 100 s each
        trial.status = "RUNNING"
        callback.on_trial_start(iteration=0, trials=trials, trial=trial)
        clock.now += 100
        trial.status = "TERMINATED"
        callback.on_trial_complete(iteration=0, trials=trials, trial=trial)
    trials[2].status = "RUNNING"  # B, seed 0: 50 s in, 1,000 steps of 1 s left
    callback.on_trial_start(iteration=0, trials=trials, trial=trials[2])
    clock.now += 50
    wall.now += 50
    BoardWriter(board, "t2", clock=wall).on_progress(TrainingProgress("training", 1, 1, 0, 1000, 1.0, None))
    # left 1,000 s; waiting: B seed 1 (1,050 s) and C's two seeds (the mean trial, 100 s each); one slot
    assert callback.line(trials).endswith("ETA 38 min")  # (1,000 + 1,050 + 2 x 100) s: 37.5 min, rounded up
    without_rows = SweepProgress(6, interval=1, clock=clock, board=board, concurrency=1, wall=wall)
    without_rows.started, without_rows.started_wall = callback.started, callback.started_wall
    without_rows.durations, without_rows.completed = callback.durations, callback.completed
    assert without_rows.line(trials).endswith("ETA 22 min")  # every waiting trial the mean: (1,000 + 3 x 100) s


def state(phase="training", epoch=3, epochs=3, step=46, steps=195, step_seconds=1.0, eval_seconds=None, updated=0.0):
    return TrialState(phase, epoch, epochs, step, steps, step_seconds, eval_seconds, updated)


def test_a_trial_with_steps_left_has_time_left_from_its_step_rate():
    """The issue's case: epoch 3/3, step 46/195 at 1 s a step has 149 steps and the test left."""
    assert state().seconds_left(now=0.0) == pytest.approx(149.0)
    assert state(eval_seconds=5.0).seconds_left(now=0.0) == pytest.approx(149.0 + 2 * 5.0)  # validation, test
    assert state(epoch=1).seconds_left(now=0.0) == pytest.approx(149.0 + 2 * 195.0)
    # 10 s after the note: 139 s; however late the note, never less than a step (the trial has work left)
    assert state().seconds_left(now=10.0) == pytest.approx(139.0)
    assert state().seconds_left(now=10_000.0) == pytest.approx(1.0)
    # evaluating the last epoch: what the evaluations take (or a step, before one was measured)
    assert state(phase="validating", step=195, eval_seconds=5.0).seconds_left(now=0.0) == pytest.approx(10.0)
    assert state(phase="testing", step=195, eval_seconds=5.0).seconds_left(now=100.0) == pytest.approx(5.0)
    assert state(step_seconds=None).seconds_left(now=0.0) is None  # no rate yet: unknown
    assert state().describe() == "epoch 3/3 step 46/195"
    assert (
        state(phase="validating").describe() == "validating epoch 3/3"
        and state(phase="testing").describe() == "testing"
    )


def test_the_board_holds_what_the_training_notes(tmp_path):
    """A trial's training callback writes its phase and step; the driver reads it back, ignoring a note
    older than the trial's start in this invocation (an earlier invocation's)."""
    from itrlab.train.training_progress import TrainingProgress

    writer = BoardWriter(tmp_path / "progress", "t1", clock=lambda: 500.0)
    writer.on_progress(TrainingProgress("training", 2, 5, 10, 40, 0.5, 3.0))
    read = read_trial_state(tmp_path / "progress", "t1", since=400.0)
    assert read == TrialState("training", 2, 5, 10, 40, 0.5, 3.0, 500.0)
    assert read_trial_state(tmp_path / "progress", "t1", since=600.0) is None  # an earlier invocation's note
    assert (
        read_trial_state(tmp_path / "progress", "t2", since=None) is None and read_trial_state(None, "t1", None) is None
    )


def test_the_trainer_notes_each_phase_and_its_step_rate(tiny_root, one_torch_thread):
    """The Trainer tells a listening callback where it stands: each epoch's training (with its measured
    seconds per step), each validation and the test evaluation."""
    from itrlab.train import run_experiment

    class Listener:
        def __init__(self):
            self.notes = []

        def on_progress(self, progress):
            self.notes.append(progress)

        def on_epoch_end(self, report):
            pass

    listener = Listener()
    run_experiment(tiny_config(tiny_root, "train.epochs=2"), tiny_root.parent / "run_notes", callbacks=[listener])
    phases = [(n.phase, n.epoch) for n in listener.notes]
    phases = [phase for i, phase in enumerate(phases) if i == 0 or phase != phases[i - 1]]  # each phase once
    assert phases == [("training", 1), ("validating", 1), ("training", 2), ("validating", 2), ("testing", 2)]
    second = [n for n in listener.notes if n.phase == "training" and n.epoch == 2][0]
    assert second.step_seconds > 0 and second.eval_seconds > 0  # the first epoch's, measured


def test_total_is_the_grid_times_seeds_or_optuna_trials():
    assert grid_spec().trial_count == 15
    optuna = SweepSpec.model_validate(
        {
            "name": "s",
            "experiment": "dbl_synthetic_tiny",
            "optuna": {"space": {"train.lr": {"type": "loguniform", "low": 1e-4, "high": 1e-2}}, "num_trials": 9},
        }
    )
    assert optuna.trial_count == 9


def test_callback_counts_times_and_prints_on_its_interval():
    clock, out = Clock(), io.StringIO()
    callback = SweepProgress(5, interval=30, clock=clock, stream=out)
    trials = [FakeTrial(f"t{i}") for i in range(5)]
    callback.setup(total_num_samples=5)

    def step(seconds: float):
        clock.now += seconds
        callback.on_step_begin(iteration=0, trials=trials)

    def start(trial):
        trial.status = "RUNNING"
        callback.on_trial_start(iteration=0, trials=trials, trial=trial)

    start(trials[0]), start(trials[1])
    step(10)
    assert out.getvalue() == ""  # not yet 30 s
    step(20)
    assert out.getvalue().splitlines() == [
        "0/5 trials done · 2 running: starting, starting · 3 pending · 0 failed · ETA unknown"
    ]
    step(5)
    assert len(out.getvalue().splitlines()) == 1  # at most one line per interval
    clock.now += 15  # t0 ends after 50 s, t1 errors after 50 s
    trials[0].status = "TERMINATED"
    callback.on_trial_complete(iteration=0, trials=trials, trial=trials[0])
    trials[1].status = "ERROR"
    callback.on_trial_error(iteration=0, trials=trials, trial=trials[1])
    clock.now += 10
    start(trials[2])
    step(20)  # t2 still starting (no note): a whole trial of 50 s, and 2 pending of 50 s, one slot: 150 s
    assert out.getvalue().splitlines()[-1] == "1/5 trials done · 1 running: starting · 2 pending · 1 failed · ETA 3 min"
    callback.on_experiment_end(trials=trials)
    callback.on_experiment_end(trials=trials)
    lines = out.getvalue().splitlines()
    assert lines[-1] == "1/5 trials done · 1 running · 1 failed · took 2 min (this invocation)"
    assert lines[-2] != lines[-1]


def test_restored_trials_count_and_cut_short_ones_do_not():
    """A resumed sweep counts the trials that ended before it (their time_total_s times the ETA); a trial
    that Tune marks TERMINATED when Ctrl-C ends the sweep, without completing it, is interrupted."""
    clock, out = Clock(), io.StringIO()
    trials = [
        FakeTrial("a", "TERMINATED", {"time_total_s": 100.0}),
        FakeTrial("b", "ERROR"),
        FakeTrial("c"),
        FakeTrial("d"),
    ]
    callback = SweepProgress(4, interval=1, clock=clock, stream=out)
    callback.setup()
    trials[2].status = "RUNNING"
    callback.on_trial_start(iteration=0, trials=trials, trial=trials[2])
    clock.now += 40
    callback.on_step_begin(iteration=1, trials=trials)
    # mean 100 s (a); c is starting (a whole trial), d pending 100 s, one slot: 200 s
    assert out.getvalue().splitlines() == ["1/4 trials done · 1 running: starting · 1 pending · 1 failed · ETA 4 min"]
    trials[2].status = "TERMINATED"  # Ctrl-C: the end of the experiment stops it, no on_trial_complete
    callback.on_experiment_end(trials=trials)
    assert (
        out.getvalue().splitlines()[-1]
        == "1/4 trials done · 0 running · 1 failed · 1 interrupted · took 40 s (this invocation)"
    )


@pytest.mark.parametrize(
    "how",
    [{"storage_error": 1, "stop_reason": "no space left on /mnt/s"}, {"input_error": 1}, {"diverged": 1}],
    ids=["its checkpoint not stored", "its input", "its loss diverged"],
)
def test_a_trial_that_ended_on_a_failure_counts_as_failed_not_done(how):
    """Tune ends such a trial TERMINATED (a stopper, or the trial returned after reporting
    how it failed); its run is FAILED, and the line counts it failed, never done."""
    clock, out = Clock(), io.StringIO()
    trials = [FakeTrial("a", "TERMINATED", {"done": 1}), FakeTrial("b", "TERMINATED", how), FakeTrial("c")]
    callback = SweepProgress(3, interval=1, clock=clock, stream=out)
    callback.setup()
    for trial in trials[:2]:
        callback.on_trial_start(iteration=0, trials=trials, trial=trial)
        callback.on_trial_complete(iteration=0, trials=trials, trial=trial)
    callback.on_experiment_end(trials=trials)
    assert out.getvalue().splitlines()[-1].startswith("1/3 trials done · 0 running · 1 failed · took ")


def test_the_line_says_pending_starting_and_training_and_its_eta_is_never_0_with_steps_left(tmp_path):
    """Two trials one at a time: both pending while Ray starts a worker, the first starting, then
    training; once it ended (100 s), the second trains past that mean at epoch 3/3 step 46/195: the ETA
    is its 149 steps at 1 s, not "0 s"."""
    from itrlab.train.training_progress import TrainingProgress

    clock, wall, out = Clock(), Clock(5000.0), io.StringIO()
    board = tmp_path / "progress"
    callback = SweepProgress(2, interval=1, clock=clock, stream=out, board=board, concurrency=1, wall=wall)
    trials = [FakeTrial("t0"), FakeTrial("t1")]
    callback.setup()

    def line(after: float) -> str:
        clock.now += after
        wall.now += after
        return callback.line(trials)

    assert line(1) == (
        "0/2 trials done · 0 running · 2 pending (Ray is starting a worker, or waiting for resources) "
        "· 0 failed · ETA unknown"
    )
    trials[0].status = "RUNNING"
    callback.on_trial_start(iteration=0, trials=trials, trial=trials[0])
    assert line(1) == "0/2 trials done · 1 running: starting · 1 queued (1 at a time) · 0 failed · ETA unknown"
    writer = BoardWriter(board, "t0", clock=wall)
    writer.on_progress(TrainingProgress("training", 1, 3, 10, 20, 1.0, None))
    # 10 steps and 2 epochs of 20 left at 1 s: 50 s; t1 a whole trial like t0 (its time so far + 50 s)
    assert (
        line(0) == "0/2 trials done · 1 running: epoch 1/3 step 10/20 · 1 queued (1 at a time) · 0 failed · ETA 2 min"
    )
    clock.now += 100
    trials[0].status = "TERMINATED"
    callback.on_trial_complete(iteration=0, trials=trials, trial=trials[0])
    trials[1].status = "RUNNING"
    callback.on_trial_start(iteration=0, trials=trials, trial=trials[1])
    BoardWriter(board, "t1", clock=wall).on_progress(TrainingProgress("training", 3, 3, 46, 195, 1.0, None))
    for _ in range(10):  # 150 s past the mean of the ended trial, the ETA follows the step rate
        shown = line(15)
        assert re.search(r"ETA (\d+) (s|min)$", shown) and not shown.endswith("ETA 0 s"), shown
    assert shown.startswith("1/2 trials done · 1 running: epoch 3/3 step 46/195 · 0 failed · ETA ")


def test_callback_pickles_without_its_stream():
    """Tune saves the RunConfig, callbacks included, with the experiment's state."""
    callback = SweepProgress(3, interval=1, stream=io.StringIO())
    callback.setup()
    copy = pickle.loads(pickle.dumps(callback))
    assert copy.total == 3 and copy.stream is None and copy.interval == 1


def test_interval_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv(console.PROGRESS_ENV, "0.25")
    assert SweepProgress(1).interval == 0.25
    monkeypatch.setenv(console.PROGRESS_ENV, "soon")
    assert SweepProgress(1).interval == 30.0
    monkeypatch.delenv(console.PROGRESS_ENV)
    assert SweepProgress(1).interval == 30.0


def test_only_the_tuner_restore_hint_is_dropped():
    hint = DropTunerRestoreHint()

    def record(message: str, level=logging.WARNING):
        return logging.LogRecord("ray.tune.tune", level, __file__, 1, message, None, None)

    assert not hint.filter(
        record(
            "Experiment has been interrupted, but the most recent state was saved.\n"
            'Resume experiment with: Tuner.restore(path="/x", trainable=...)'
        )
    )
    assert hint.filter(record("Stop signal received (e.g. via SIGINT/Ctrl+C), ending Ray Tune run."))
    assert hint.filter(record("Trials did not complete: [t1]", level=logging.ERROR))


def test_with_console_sets_verbosity_and_replaces_the_progress_callback(monkeypatch):
    from ray import tune

    for key in console.QUIET_ENV:  # what the quiet console sets, restored after the test
        monkeypatch.setenv(key, "placeholder")
        monkeypatch.delenv(key)
    monkeypatch.setattr(console, "_set_here", {})
    monkeypatch.setenv(console.VERBOSE_ENV, "0")
    old = SweepProgress(99)
    config = console.with_console(tune.RunConfig(callbacks=[old]), grid_spec())
    assert config.verbose == 0
    assert [type(c) for c in config.callbacks] == [SweepProgress] and config.callbacks[0].total == 15
    assert console.quiet_env()["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] == "false"
    monkeypatch.setenv(console.VERBOSE_ENV, "1")  # -v: Tune's default verbosity, the quiet variables gone
    config = console.with_console(tune.RunConfig(), grid_spec())
    assert config.verbose == tune.RunConfig().verbose != 0
    assert console.quiet_env() == {} and "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR" not in os.environ


# --- the step counter within an epoch ------------------------------------------------------------


def test_step_counter_prints_at_most_once_per_interval():
    clock, out = Clock(0.0), io.StringIO()
    counter = StepLogger(3, 10, 400, interval=30, clock=clock, stream=out)
    for step in range(1, 121):
        clock.now += 1.5  # 1.5 s per step: a line at 30 s (step 20), 60 s, ...
        counter.step(step)
    lines = out.getvalue().splitlines()
    assert lines[0] == "epoch 3/10 · step 20/400 · 1.5 s/step"
    assert lines[1] == "epoch 3/10 · step 40/400 · 1.5 s/step"
    assert len(lines) == 6  # 180 s: at 30, 60, ... 180 s


def test_a_short_epoch_prints_nothing_and_zero_turns_it_off():
    clock, out = Clock(0.0), io.StringIO()
    counter = StepLogger(1, 2, 50, interval=30, clock=clock, stream=out)
    for step in range(1, 51):
        clock.now += 0.5  # 25 s in all
        counter.step(step)
    silent = StepLogger(1, 2, 50, interval=0, clock=clock, stream=out)
    clock.now += 1000
    assert silent.step(1) is None
    assert out.getvalue() == ""
    assert [format_step_time(s) for s in (0.0451, 1.23, 12.4)] == ["0.045 s/step", "1.2 s/step", "12 s/step"]


def test_trainer_prints_steps_within_a_long_epoch(tiny_root, capsys, one_torch_thread):
    """jobs/train.py's path: the Trainer prints step lines when its interval is shorter than an epoch."""
    from itrlab.train import run_experiment
    from itrlab.train.loop import STEP_PROGRESS_ENV

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(STEP_PROGRESS_ENV, "0.000001")
        run_experiment(tiny_config(tiny_root, "train.epochs=1"), tiny_root.parent / "run")
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("epoch 1/1 · step ")]
    assert lines and re.fullmatch(r"epoch 1/1 · step \d+/\d+ · [\d.e-]+ s/step", lines[0]), lines[:3]
