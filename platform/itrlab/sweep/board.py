"""A sweep's progress board: where each running trial stands, written by the trial and read by the driver's
progress line (:mod:`itrlab.sweep.console`).

A trial's rank-0 worker writes ``<sweep dir>/progress/<trial id>.json`` when a phase begins and at most every 2 s
within an epoch (:mod:`itrlab.train.training_progress`): phase, epoch and step, seconds per step and per
validation, and the note's wall-clock time. The storage is shared by every node, so the driver reads it wherever
the trial runs. A note older than the trial's start in this invocation is ignored: the trial is still starting.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

from itrlab.files import atomic_write_text
from itrlab.train.training_progress import TrainingProgress

BOARD_FOLDER = "progress"  # under the sweep's folder


class BoardWriter:
    """A training callback of a trial: writes its :class:`~itrlab.train.training_progress.TrainingProgress` to the
    board. A note that cannot be written is skipped: progress never fails a trial."""

    def __init__(self, folder: Path, trial_id: str, clock=time.time):
        self.path = Path(folder) / f"{trial_id}.json"
        self.clock = clock

    def on_progress(self, progress: TrainingProgress) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.path, json.dumps({**progress.to_dict(), "updated": self.clock()}))
        except OSError:
            pass

    def on_epoch_end(self, report) -> None:  # a training callback gets every epoch's report; the board needs none
        pass


@dataclass(frozen=True)
class TrialState:
    """A running trial's last note on the board (see :class:`~itrlab.train.training_progress.TrainingProgress`)."""

    phase: str
    epoch: int
    epochs: int
    step: int
    steps: int
    step_seconds: float | None
    eval_seconds: float | None
    updated: float  # wall-clock time of the note
    schedule: str = ""  # the schedule in training, of a run that chooses its decay (``decay after 9``)
    epochs_after: int = 0  # the epochs of the schedules still to follow it

    def describe(self) -> str:
        """``epoch 3/10 step 46/195``, ``validating epoch 3/10``, ``testing``; ``(decay after 9)`` after the
        epoch of a run that chooses its decay."""
        branch = f" ({self.schedule})" if self.schedule else ""
        if self.phase == "training":
            return f"epoch {self.epoch}/{self.epochs}{branch} step {self.step}/{self.steps}"
        if self.phase == "validating":
            return f"validating epoch {self.epoch}/{self.epochs}{branch}"
        return "testing"

    def seconds_left(self, now: float) -> float | None:
        """What the trial has left from its measured step rate: the steps of this and the later epochs and schedules,
        and a validation per epoch left plus the test, each as long as the last validation, less the time since the
        note; never below a step's (or a validation's) time. None before the first step was timed."""
        step = self.step_seconds
        if step is None or not math.isfinite(step) or step <= 0:
            return None
        evals = self.eval_seconds or 0.0
        epochs_left = self.epochs - self.epoch + self.epochs_after  # a run choosing its decay: the schedules to follow
        steps_left = epochs_left * self.steps + (self.steps - self.step if self.phase == "training" else 0)
        validations_left = epochs_left + (self.phase != "testing")  # this epoch's, unless it is over
        tests_left = 1
        left = steps_left * step + (validations_left + tests_left) * evals
        floor = evals if self.phase != "training" and evals > 0 else step
        return max(left - max(now - self.updated, 0.0), floor)


def read_trial_state(folder: Path | None, trial_id: str, since: float | None) -> TrialState | None:
    """The trial's note on the board, when there is one written at or after ``since`` (its start here)."""
    if folder is None:
        return None
    try:
        data = json.loads((Path(folder) / f"{trial_id}.json").read_text(encoding="utf-8"))
        state = TrialState(
            str(data["phase"]),
            int(data["epoch"]),
            int(data["epochs"]),
            int(data["step"]),
            int(data["steps"]),
            data.get("step_seconds"),
            data.get("eval_seconds"),
            float(data["updated"]),
            str(data.get("schedule") or ""),
            int(data.get("epochs_after") or 0),
        )
    except (OSError, ValueError, KeyError, TypeError):  # no note yet, or one being replaced
        return None
    return state if since is None or state.updated >= since else None
