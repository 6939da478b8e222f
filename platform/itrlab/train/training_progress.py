"""Where a training stands, told to the callbacks that listen: a sweep trial's progress board
(:mod:`itrlab.sweep.board`), from which the sweep's progress line says what each trial does and when it
should end.

A callback listens by having an ``on_progress(progress)`` method. :class:`ProgressNotifier` calls it at
once when a phase begins (an epoch's training, a validation, the test evaluation) and, within an epoch,
at most every :data:`PROGRESS_EVERY_S` seconds, with the epoch's measured seconds per step.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

PROGRESS_EVERY_S = 2.0  # within an epoch, at most one notice this often


@dataclass(frozen=True)
class TrainingProgress:
    """A training's phase and position: epoch ``epoch`` of ``epochs``, ``step`` of the epoch's ``steps``
    done; ``step_seconds`` the mean of this epoch's steps so far (the last epoch's at its start; None
    before any step); ``eval_seconds`` the last validation's duration (None before the first). A run that
    chooses its decay (``train.lr_decay_choices``) trains one schedule after another: ``schedule`` names the
    one in training (``decay after 9``) and ``epochs_after`` counts the epochs of those still to follow."""

    phase: str
    epoch: int
    epochs: int
    step: int
    steps: int
    step_seconds: float | None = None
    eval_seconds: float | None = None
    schedule: str = ""
    epochs_after: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class ProgressNotifier:
    """Sends :class:`TrainingProgress` to the callbacks of ``callbacks`` that have ``on_progress``."""

    def __init__(
        self,
        callbacks: list,
        epochs: int,
        steps: int,
        clock: Callable[[], float] = time.perf_counter,
        every: float = PROGRESS_EVERY_S,
    ):
        self.callbacks, self.epochs, self.steps, self.clock, self.every = callbacks, epochs, steps, clock, every
        self.schedule, self.epochs_after = "", 0  # the schedule in training, the epochs of those to follow
        self.step_seconds: float | None = None
        self.eval_seconds: float | None = None
        self.epoch_started = self.last = 0.0

    def _send(self, phase: str, epoch: int, step: int) -> None:
        self.last = self.clock()
        progress = TrainingProgress(
            phase,
            epoch,
            self.epochs,
            step,
            self.steps,
            self.step_seconds,
            self.eval_seconds,
            self.schedule,
            self.epochs_after,
        )
        for callback in self.callbacks:
            notify = getattr(callback, "on_progress", None)
            if notify is not None:
                notify(progress)

    def epoch_begins(self, epoch: int) -> None:
        self.epoch_started = self.clock()
        self._send("training", epoch, 0)

    def step(self, epoch: int, done: int) -> None:
        """After the epoch's ``done``-th step: a notice when one is due."""
        now = self.clock()
        self.step_seconds = (now - self.epoch_started) / done
        if now - self.last >= self.every:
            self._send("training", epoch, done)

    @contextlib.contextmanager
    def evaluating(self, epoch: int, phase: str) -> Iterator[None]:
        """A validation (its duration kept for the next notices) or the test evaluation."""
        self._send(phase, epoch, self.steps)
        started = self.clock()
        yield
        if phase == "validating":
            self.eval_seconds = self.clock() - started
