"""The learning rate's decay chosen on validation, run by run (``train.lr_decay_choices``): one *branch* per
choice d, the *trunk* (the latest d) training from epoch 1 and leaving the start of each earlier branch, the
branch with the best validation rsum kept and tested (docs/training.md#choosing-the-decay-on-validation, with
the files under ``decay/``).

The run folder's ``last.pt``, ``best.pt`` and ``model.pt`` are the branch in training (its
:class:`~itrlab.train.checkpoint.TrainState` names it: ``decay_after``), and once the choice is made the chosen
branch's. Every step is a file written whole and can be taken again, so a run stopped anywhere resumes: in a
branch, from the run's ``last.pt``; between branches, from the files that say where it stands (a start the trunk
checkpointed but did not copy is copied from the run's ``last.pt``, which is then exactly that epoch's). The
files change right after an epoch's checkpoint and before its callbacks (:meth:`DecayBranches.settle`), so that
a sweep trial's report of the epoch stores them and nothing changes in the trial's folder while the sweep's
storage copies it after the report. :func:`fit_branches` drives a :class:`~itrlab.train.loop.Trainer` through
the branches.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from itrlab.errors import StorageError, UserInputError, disk_full, no_space
from itrlab.files import atomic_copy, atomic_write_json, read_record
from itrlab.train.checkpoint import BEST, LAST, MODEL, TrainState, copy_checkpoint
from itrlab.train.training_progress import ProgressNotifier

DECAY_FOLDER = "decay"  # under the run folder
BRANCH_RECORD = "branch.json"  # a finished branch's validation, in its folder
CHOICE_RECORD = "choice.json"  # the choice, in the decay folder
FILES = (BEST, MODEL, LAST)  # a branch's files, copied in this order: last.pt, which says where it stands, last
BRANCH_PREFIX = "decay"  # a branch's metrics: decay<d>_rsum (itrlab.tracking.chart_names: section 5_decay<d>)


class BranchRecord(BaseModel):
    """``branch.json``: a branch that trained ``epochs`` epochs; its best validation rsum and epoch, and its
    validation rsum per epoch (``[[epoch, rsum], ...]``, its shared epochs included)."""

    model_config = ConfigDict(extra="forbid")

    decay: int
    epochs: int
    best_rsum: float
    best_epoch: int
    curve: list[tuple[int, float]]


@dataclass(frozen=True)
class DecayChoice:
    """The choice of a run: ``chosen``, the decay of the branch kept, each branch's record in increasing decay,
    and the chosen branch's per-epoch metrics (:attr:`TrainState.history`: what MLflow's plain names then show)."""

    chosen: int
    branches: tuple[BranchRecord, ...]
    history: list[dict[str, Any]] = field(default_factory=list)

    def metrics(self) -> dict[str, float]:
        """The choice as final metrics: ``lr_decay_chosen``, and per branch ``decay<d>_best_rsum`` and
        ``decay<d>_best_epoch``."""
        found: dict[str, float] = {"lr_decay_chosen": float(self.chosen)}
        for branch in self.branches:
            found[f"{branch_prefix(branch.decay)}best_rsum"] = branch.best_rsum
            found[f"{branch_prefix(branch.decay)}best_epoch"] = float(branch.best_epoch)
        return found

    def describe(self) -> str:
        """``decay chosen on validation: after epoch 9 (best validation rsum 290.1 at epoch 14); after 3: 287.0
        at 7, after 15: 285.2 at 17``."""
        chosen = next(branch for branch in self.branches if branch.decay == self.chosen)
        others = ", ".join(
            f"after {b.decay}: {b.best_rsum:.1f} at {b.best_epoch}" for b in self.branches if b.decay != self.chosen
        )
        return (
            f"decay chosen on validation: after epoch {self.chosen} (best validation rsum {chosen.best_rsum:.1f} at "
            f"epoch {chosen.best_epoch}); {others}"
        )


def branch_prefix(decay: int) -> str:
    """The prefix of branch ``decay``'s metrics: ``decay9_``."""
    return f"{BRANCH_PREFIX}{decay}_"


def choose(branches: Sequence[BranchRecord]) -> int:
    """The decay of the branch with the highest best validation rsum; of equal ones, the earliest decay. Only
    validation is read: a branch's record holds nothing of the test split."""
    if not branches:
        raise ValueError("no branch to choose from")
    return max(branches, key=lambda b: (b.best_rsum if math.isfinite(b.best_rsum) else -math.inf, -b.decay)).decay


def epoch_branches(choices: Sequence[int], decay_after: int, epoch: int) -> tuple[int, ...]:
    """The branches whose schedule holds epoch ``epoch`` when the branch ``decay_after`` trains it: the trunk's
    epochs up to a choice d belong to branch d too."""
    trunk = max(choices)
    return tuple(d for d in choices if d == decay_after or (decay_after == trunk and epoch <= d))


class DecayBranches:
    """The branches of a run folder ``run_dir`` with ``choices`` and ``epochs`` (see the module doc)."""

    def __init__(self, run_dir: Path, choices: Sequence[int], epochs: int):
        self.run_dir, self.choices, self.epochs = Path(run_dir), tuple(sorted(choices)), epochs
        self.trunk = self.choices[-1]
        self.order = (self.trunk, *self.choices[:-1])  # the trunk first: it leaves the others' starts

    def folder(self, decay: int) -> Path:
        return self.run_dir / DECAY_FOLDER / f"after{decay}"

    def record(self, decay: int) -> BranchRecord | None:
        """Branch ``decay``'s record, when it trained ``epochs`` epochs (None: not yet, or fewer: a run trained
        further since)."""
        path = self.folder(decay) / BRANCH_RECORD
        if not path.is_file():
            return None
        found = read_record(path, BranchRecord, "decay branch record")
        return found if found.epochs >= self.epochs else None

    def check_state(self, state: TrainState) -> TrainState:
        """``state`` of the run folder's ``last.pt`` with the branch it trains named: a new run starts the trunk. A
        run trained without choices, or in a branch the choices no longer hold, is refused with one line."""
        if state.decay_after is None:
            if state.epoch:
                raise UserInputError(
                    f"{self.run_dir} trained {state.epoch} epoch(s) without train.lr_decay_choices: its decay cannot "
                    f"be chosen now (its epochs share no branch's start); start a new run"
                )
            state.decay_after = self.trunk
        elif state.decay_after not in self.choices:
            raise UserInputError(
                f"{self.run_dir} trains the branch that decays after epoch {state.decay_after}, which "
                f"train.lr_decay_choices={list(self.choices)} does not hold; resume with the choices it was trained "
                f"with, or start a new run"
            )
        return state

    def start_due(self, state: TrainState) -> int | None:
        """The start the trunk owes at its ``state`` (its last epoch is an earlier choice whose start it has not
        copied: a run stopped between its checkpoint and the copy), else None."""
        epoch = state.epoch
        due = state.decay_after == self.trunk and epoch in self.choices and epoch != self.trunk
        return epoch if due and not (self.folder(epoch) / LAST).is_file() else None

    def keep_start(self, decay: int) -> None:
        """The run folder's checkpoints (the trunk at the end of epoch ``decay``) as branch ``decay``'s start, its
        ``last.pt`` naming that branch; written whole into a sibling folder, then renamed."""
        folder = self.folder(decay)
        if (folder / LAST).is_file():
            return
        partial = folder.with_name(folder.name + ".partial")
        with _stored(partial):
            shutil.rmtree(partial, ignore_errors=True)
            partial.mkdir(parents=True)
            for name in (BEST, MODEL):
                if (self.run_dir / name).is_file():
                    atomic_copy(self.run_dir / name, partial / name)
            copy_checkpoint(self.run_dir / LAST, partial / LAST, decay_after=decay)
            shutil.rmtree(folder, ignore_errors=True)
            os.replace(partial, folder)

    def keep_end(self, state: TrainState) -> BranchRecord:
        """The run folder's checkpoints (branch ``state.decay_after`` after its last epoch) into the branch's
        folder, then its record; the record kept when it is there already."""
        decay = state.decay_after
        found = self.record(decay)
        if found is not None:
            return found
        folder = self.folder(decay)
        record = BranchRecord(
            decay=decay,
            epochs=state.epoch,
            best_rsum=state.best_rsum,
            best_epoch=state.best_epoch,
            curve=[(int(entry["epoch"]), float(entry["rsum"])) for entry in state.history if "rsum" in entry],
        )
        with _stored(folder):
            folder.mkdir(parents=True, exist_ok=True)
            for name in FILES:
                if (self.run_dir / name).is_file():
                    atomic_copy(self.run_dir / name, folder / name)
            atomic_write_json(folder / BRANCH_RECORD, record.model_dump(mode="json"))
        return record

    def following(self) -> int | None:
        """The next branch to train: the first in order (the trunk, then increasing decays) without a record of
        ``epochs`` epochs; None when every branch has one."""
        return next((decay for decay in self.order if self.record(decay) is None), None)

    def epochs_after(self, decay: int) -> int:
        """The epochs the branches still to train after branch ``decay`` will train."""
        left = 0
        for other in self.order:
            if other == decay or self.record(other) is not None:
                continue
            start = other if other != self.trunk else 0
            left += self.epochs - start
        return left

    def open(self, decay: int) -> None:
        """Branch ``decay``'s files (its start, or its end when the run trains further) as the run folder's: the
        branch the run trains next. UserInputError when its start is missing (a folder deleted by hand)."""
        folder = self.folder(decay)
        if not (folder / LAST).is_file():
            raise UserInputError(
                f"{folder / LAST} is missing: the start of the branch that decays after epoch {decay}, which the "
                f"trunk copied when it trained that epoch; start a new run"
            )
        with _stored(self.run_dir):
            for name in FILES:
                if (folder / name).is_file():
                    atomic_copy(folder / name, self.run_dir / name)

    def choice(self, history: list[dict[str, Any]] | None = None) -> DecayChoice:
        """The choice among the branches' records (every branch finished); ``history``: the chosen branch's
        per-epoch metrics, kept with it."""
        records = tuple(self.record(decay) for decay in self.choices)
        missing = [decay for decay, record in zip(self.choices, records) if record is None]
        if missing:
            raise ValueError(f"branches not finished: {missing}")
        return DecayChoice(choose(records), records, list(history or []))

    def settle(self, state: TrainState) -> bool:
        """What the run folder owes once its checkpoint of ``state``'s epoch is written: the trunk's copy at an
        earlier choice (the branch's start); after a branch's last epoch, the branch's end and record, then the
        next branch's start as the run folder's files, or, every branch finished, ``decay/choice.json`` and the
        chosen branch's files. Returns whether every branch has finished. Each step can be taken again."""
        if state.epoch < self.epochs:
            due = self.start_due(state)
            if due is not None:
                self.keep_start(due)
            return False
        self.keep_end(state)
        following = self.following()
        if following is not None:
            self.open(following)
            return False
        choice = self.choice()
        with _stored(self.run_dir):
            atomic_write_json(
                self.run_dir / DECAY_FOLDER / CHOICE_RECORD,
                {"chosen": choice.chosen, "branches": [r.model_dump(mode="json") for r in choice.branches]},
            )
        if state.decay_after != choice.chosen:
            self.open(choice.chosen)
        return True


@contextlib.contextmanager
def _stored(folder: Path) -> Iterator[None]:
    """A file operation on ``folder`` whose OSError (a full or read-only disk) becomes a StorageError naming it."""
    try:
        yield
    except OSError as err:
        why = no_space(folder) if disk_full(err) else err.strerror or str(err)
        raise StorageError(f"cannot write the decay branches in {folder}: {why}") from None


class BranchTrainer(Protocol):
    """What :func:`fit_branches` drives (:class:`itrlab.train.loop.Trainer`): a run's state, branches, progress and
    callbacks, whether its last epoch's checkpoint settled the branches already (``settled``: None when no epoch
    ended a branch here); training to the last epoch, and reopening the run folder's ``last.pt``."""

    state: TrainState
    branches: DecayBranches
    progress: ProgressNotifier
    callbacks: list
    settled: bool | None

    def train_to_end(self) -> None: ...

    def reopen(self) -> None: ...


def fit_branches(trainer: BranchTrainer) -> DecayChoice:
    """Train every branch of ``trainer``'s run (:attr:`Trainer.branches`) to its last epoch, and end with the chosen
    branch's files in the run folder and its state in ``trainer``; the callbacks with an ``on_decay_chosen(choice)``
    hear the choice. A run stopped anywhere continues here (see the module doc)."""
    branches = trainer.branches
    if trainer.state.epoch < branches.epochs:  # a start the trunk checkpointed but did not copy (it stopped between)
        branches.settle(trainer.state)
    while True:
        trainer.progress.schedule = f"decay after {trainer.state.decay_after}"
        trainer.progress.epochs_after = branches.epochs_after(trainer.state.decay_after)
        trainer.settled = None
        trainer.train_to_end()
        # a run resumed at a branch's last epoch, or at an earlier choice the trunk did not copy, settles here
        done = trainer.settled if trainer.settled is not None else branches.settle(trainer.state)
        trainer.reopen()
        if done:
            break
    choice = branches.choice(trainer.state.history)
    for callback in trainer.callbacks:
        chosen = getattr(callback, "on_decay_chosen", None)
        if chosen is not None:
            chosen(choice)
    return choice
