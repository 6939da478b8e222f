"""The training loop of one run: epochs of optimizer steps, validation, checkpoints, resume.

After every epoch the trainer validates on the val split, writes ``last.pt`` (everything needed to
continue) and, when the validation rsum improved, ``best.pt``. ``fit`` continues from ``last.pt``
when the run directory has one: the epoch counter, the optimizer, the LR schedule (a function of
the global step) and the RNG states all carry on. ``test`` evaluates once, with the best weights. With
``train.lr_decay_choices`` the run trains one branch per choice of its decay and ends on the one validation
chose (:mod:`itrlab.train.decay_choice`).

Speed: ``train.precision`` runs steps and evaluation under autocast
(:mod:`itrlab.train.precision`); ``train.data_path`` builds batches from a device-resident copy of
the training split (:mod:`itrlab.data.resident`) or with a DataLoader over the memory map, in the
same order either way.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

import torch
from torch import Tensor
from torch.utils.data import DataLoader

from itrlab.config import ExperimentConfig
from itrlab.config.schema import PREHEAD
from itrlab.console_log import emit
from itrlab.data import Batch, CaptionDataset, PrecompSplit, Vocabulary, make_loader
from itrlab.data.dataset import ShardedBatchSampler
from itrlab.data.prefetch import DevicePrefetcher
from itrlab.data.resident import ResidentSplit, choose_data_path
from itrlab.data.text_features import TextFeatures
from itrlab.errors import ItrlabError, UserInputError
from itrlab.eval import Ranks, RecallTable, get_protocol, rank_folds, table_from_folds
from itrlab.losses import LossOutput
from itrlab.methods import MethodModule
from itrlab.methods.base import Scorer, drop_reinitialised_state
from itrlab.train.checkpoint import BEST, LAST, MODEL, TrainState, load_checkpoint, save_checkpoint, set_rng_state
from itrlab.train.decay_choice import DecayBranches, epoch_branches, fit_branches
from itrlab.train.device import resolve_device
from itrlab.train.precision import MixedPrecision
from itrlab.train.schedule import StepDecaySchedule
from itrlab.train.training_progress import ProgressNotifier

_log = logging.getLogger(__name__)


class NonFiniteLossError(ItrlabError):
    """The loss became NaN or infinite; the run stops with this reason."""


@dataclass(frozen=True)
class EpochReport:
    epoch: int
    epochs: int
    step: int
    lr: float
    loss: float
    parts: dict[str, float]
    val: RecallTable
    is_best: bool
    best_rsum: float
    seconds: float
    auxiliary: dict[str, RecallTable] = field(default_factory=dict)  # e.g. {"anchor": table}
    # train.lr_decay_choices: the decays whose schedules hold this epoch (itrlab.train.decay_choice); () without
    branches: tuple[int, ...] = ()

    def metrics(self) -> dict[str, float]:
        """Per-epoch metrics: loss and its parts, lr, the validation table (unprefixed), and the
        validation tables of auxiliary branches prefixed with their name (``anchor_rsum``)."""
        values = {"loss": self.loss, "lr": self.lr, "epoch_seconds": self.seconds}
        values.update({f"loss_{name}": value for name, value in self.parts.items()})
        values.update(self.val.metrics())
        for name, table in self.auxiliary.items():
            values.update(table.metrics(prefix=f"{name}_"))
        return values


class EpochCallback(Protocol):
    def on_epoch_end(self, report: EpochReport) -> None: ...


CUDA_READ_EVERY = 25  # on a GPU, losses are read (one device sync) every this many steps
STEP_PROGRESS_ENV = "ITRLAB_STEP_PROGRESS_S"  # seconds between step lines within an epoch (default 30)
STEP_PROGRESS_DEFAULT_S = 30.0


def step_progress_interval() -> float:
    """Seconds between step lines: ``$ITRLAB_STEP_PROGRESS_S``, default 30; 0 turns them off."""
    raw = os.environ.get(STEP_PROGRESS_ENV, "").strip()
    try:
        value = float(raw) if raw else STEP_PROGRESS_DEFAULT_S
    except ValueError:
        return STEP_PROGRESS_DEFAULT_S
    return value if math.isfinite(value) and value >= 0 else STEP_PROGRESS_DEFAULT_S


def format_step_time(seconds: float) -> str:
    """``1.2 s/step``, ``12 s/step``, ``0.045 s/step``."""
    if seconds >= 10:
        return f"{seconds:.0f} s/step"
    if seconds >= 1:
        return f"{seconds:.1f} s/step"
    return f"{seconds:.2g} s/step"


class StepLogger:
    """Within an epoch, at most one line every ``interval`` seconds (0: none), logged (the console's stdout;
    ``stream``: written there instead)::

        epoch 3/10 · step 120/400 · 1.2 s/step

    The first comes ``interval`` seconds into the epoch, so an epoch shorter than that prints nothing.
    A sweep trial's stdout reaches the sweep's console through Ray (prefixed with the trial's process)."""

    def __init__(self, epoch: int, epochs: int, steps: int, interval: float, clock=time.perf_counter, stream=None):
        self.epoch, self.epochs, self.steps, self.interval = epoch, epochs, steps, interval
        self.clock, self.stream = clock, stream
        self.started = self.last = clock()

    def step(self, done: int) -> str | None:
        """After the epoch's ``done``-th step: the line, when one is due (and printed), else None."""
        if self.interval <= 0:
            return None
        now = self.clock()
        if now - self.last < self.interval:
            return None
        self.last = now
        line = (
            f"epoch {self.epoch}/{self.epochs} · step {done}/{self.steps} · "
            f"{format_step_time((now - self.started) / max(done, 1))}"
        )
        emit(_log, line, self.stream)
        return line


class _StepLog:
    """The losses and parts of an epoch's steps, summed as Python floats in step order (the sums a
    per-step ``.item()`` gives, bit for bit). Values are read every ``every`` steps: one device sync
    per group of steps, so that a GPU step never waits for the host to read the previous loss; a
    non-finite loss raises :class:`NonFiniteLossError` naming its step."""

    def __init__(self, epoch: int, every: int):
        self.epoch, self.every = epoch, every
        self.pending: list[tuple[int, Tensor, list[str]]] = []
        self.total, self.sums, self.count = 0.0, defaultdict(float), 0

    def add(self, step: int, output: LossOutput) -> None:
        loss = output.loss.detach()
        values = [torch.as_tensor(v, dtype=torch.float64, device=loss.device).detach() for v in output.parts.values()]
        self.pending.append((step, torch.stack([loss.double(), *values]), list(output.parts)))
        if len(self.pending) >= self.every:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        rows = torch.cat([values for _, values, _ in self.pending]).tolist()  # one sync
        offset = 0
        for step, values, names in self.pending:
            loss, parts = rows[offset], rows[offset + 1 : offset + len(values)]
            offset += len(values)
            if not math.isfinite(loss):
                raise NonFiniteLossError(f"loss became {loss} at epoch {self.epoch}, step {step}")
            self.total += loss
            for name, value in zip(names, parts):
                self.sums[name] += value
            self.count += 1
        self.pending = []

    def means(self) -> tuple[float, dict[str, float]]:
        self.flush()
        return self.total / self.count, {name: value / self.count for name, value in self.sums.items()}


@dataclass
class TrainingData:
    train: PrecompSplit
    val: PrecompSplit
    test: PrecompSplit
    vocab: Vocabulary


@dataclass
class Trainer:
    config: ExperimentConfig
    method: MethodModule
    data: TrainingData
    run_dir: Path
    callbacks: list[EpochCallback] = field(default_factory=list)
    rank: int = 0  # data-parallel workers (Ray Train): each reads and trains every world_size-th batch
    world_size: int = 1
    device: torch.device | None = None  # a run's placed device (itrlab.train.device.place); None: train.device
    step_progress_s: float | None = None  # step lines within an epoch (StepLogger); None: $ITRLAB_STEP_PROGRESS_S or 30
    shared_resident: ResidentSplit | None = None  # the device copy of the split another trainer made (grouped members)

    def __post_init__(self) -> None:
        train = self.config.train
        self.device = self.device or resolve_device(train.device)
        self.precision = MixedPrecision(train.precision, self.device)  # ConfigError: fp16 on a CPU
        self.method.to(self.device)
        self.precision.attach(self.method)
        max_len = self.config.model.text.max_len
        self.dataset = CaptionDataset(
            self.data.train, self.data.vocab, max_len=max_len, extra_fields=self.method.batch_extras()
        )
        text_width = len(self.data.vocab) if isinstance(self.data.vocab, TextFeatures) else 0
        self.data_path = choose_data_path(train.data_path, self.device, self.data.train, max_len, text_width=text_width)
        self.resident = (
            (self.shared_resident or ResidentSplit(self.dataset, self.device)) if self.data_path == "resident" else None
        )
        self.steps_per_epoch = len(self.dataset) // train.batch_size // self.world_size
        if self.steps_per_epoch == 0:
            raise ValueError(
                f"{len(self.dataset)} captions make no batch of {train.batch_size} per worker "
                f"for {self.world_size} workers"
            )
        self.step_module = self.method
        if self.world_size > 1:  # gradients averaged across workers in backward
            self.step_module = torch.nn.parallel.DistributedDataParallel(
                self.method, device_ids=[self.device.index] if self.device.type == "cuda" else None
            )
        self.total_steps = self.steps_per_epoch * train.epochs
        # foreach: each update as a few multi-tensor kernels over every parameter, as on CUDA by default, rather
        # than a loop of small ones per parameter (a large share of a small CPU step:
        # docs/speed.md#figures-behind-the-codes-choices)
        self.optimizer = torch.optim.Adam(
            self.method.param_groups(train.lr), lr=train.lr, weight_decay=train.weight_decay, foreach=True
        )
        self.state = TrainState()
        self.branches = None  # train.lr_decay_choices: the run's schedules (itrlab.train.decay_choice)
        self.settled: bool | None = None  # a branch's last epoch settled its files: whether every branch finished
        if train.lr_decay_choices:
            if self.world_size > 1:
                raise UserInputError(
                    "train.lr_decay_choices trains its branches in one process: multi-worker training cannot "
                    "choose its decay; use one worker, or train.lr_decay_epochs"
                )
            self.branches = DecayBranches(self.run_dir, train.lr_decay_choices, train.epochs)
        self.reopen()
        # where the training stands, for callbacks that listen (a sweep's progress board); one worker speaks
        self.progress = ProgressNotifier(self.callbacks if self.rank == 0 else [], train.epochs, self.steps_per_epoch)

    def reopen(self) -> None:
        """Continue from the run folder's ``last.pt`` when it has one (a resume, or the next decay branch), with
        the learning-rate schedule of the state it holds."""
        train = self.config.train
        if (self.run_dir / LAST).is_file():
            self._restore(load_checkpoint(self.run_dir / LAST))
        if self.branches is not None:
            self.state = self.branches.check_state(self.state)
        decays = (self.state.decay_after,) if self.branches is not None else tuple(train.lr_decay_epochs)
        self.schedule = StepDecaySchedule(self.steps_per_epoch, decays, train.lr_decay, train.warmup_steps)
        self.scheduler = self.schedule.scheduler(self.optimizer, last_step=self.state.step)

    def _restore(self, checkpoint: dict) -> None:
        """Continue from ``last.pt``; UserInputError when it does not fit this config (another width,
        another method), before anything of the run is touched."""
        try:
            self.method.load_state_dict(checkpoint["model"])
            configured = [  # the configured rate: the schedule's base once a scheduler set it (a branch reopened)
                {"initial_lr": g.get("initial_lr", g["lr"]), "weight_decay": g["weight_decay"]}
                for g in self.optimizer.param_groups
            ]
            self.optimizer.load_state_dict(checkpoint["optimizer"])
            # this config's rates (a --resume --allow-changes may change them), not the saved ones
            for group, settings in zip(self.optimizer.param_groups, configured):
                group.update(settings)
            set_rng_state(checkpoint["rng"])
        except (RuntimeError, ValueError, KeyError, TypeError) as err:
            first = str(err).strip().splitlines()
            detail = next(
                (
                    line.strip()
                    for line in first
                    if "size mismatch" in line or "Missing" in line or "Unexpected" in line
                ),
                first[0] if first else type(err).__name__,
            )
            raise UserInputError(
                f"checkpoint {self.run_dir / LAST} does not fit this config ({detail}); resume "
                f"with the config it was trained with, or start a new run"
            ) from None
        self.state = checkpoint["state"]

    @property
    def resumed_from_epoch(self) -> int:
        return self.state.epoch

    def fit(self) -> TrainState:
        """Train to the last epoch; with ``train.lr_decay_choices``, every branch, and end on the chosen one
        (:func:`itrlab.train.decay_choice.fit_branches`)."""
        if self.branches is not None:
            fit_branches(self)
        else:
            self.train_to_end()
        return self.state

    def train_to_end(self) -> None:
        for epoch in range(self.state.epoch + 1, self.config.train.epochs + 1):
            started = time.perf_counter()
            loss, parts = self.train_epoch(epoch)
            self.finish_epoch(epoch, loss, parts, started)

    def finish_epoch(self, epoch: int, loss: float, parts: dict[str, float], started: float) -> None:
        """After epoch ``epoch`` trained (mean ``loss`` and ``parts``; it began at ``started``, perf_counter):
        validation, the best score, the checkpoints, the callbacks. Grouped training
        (:mod:`itrlab.train.grouped`) trains its members' epochs together and ends each one's here."""
        with self.progress.evaluating(epoch, "validating"):
            val = self.evaluate(self.data.val, self.config.eval.val_protocol)
            auxiliary = self.evaluate_auxiliary(self.data.val, self.config.eval.val_protocol)
        is_best = val.rsum > self.state.best_rsum
        branches = (
            epoch_branches(self.branches.choices, self.state.decay_after, epoch) if self.branches is not None else ()
        )
        if is_best:
            self.state.best_rsum, self.state.best_epoch = val.rsum, epoch
        report = EpochReport(
            epoch,
            self.config.train.epochs,
            self.state.step,
            self.epoch_lr(),
            loss,
            parts,
            val,
            is_best,
            self.state.best_rsum,
            0.0,
            auxiliary,
            branches,
        )
        # the epoch's metrics but its duration (which a rerun does not repeat): a chosen branch's curve, once chosen
        entry = {key: value for key, value in report.metrics().items() if key != "epoch_seconds"}
        self.state.epoch, self.state.history = epoch, [*self.state.history, {"epoch": epoch, **entry}]
        if self.rank == 0:  # the workers' weights are identical: one writes
            if is_best:
                save_checkpoint(self.run_dir / BEST, model=self.method, optimizer=None, state=self.state)
                save_checkpoint(
                    self.run_dir / MODEL, model=self.method.exported_model(), optimizer=None, state=self.state
                )
            save_checkpoint(self.run_dir / LAST, model=self.method, optimizer=self.optimizer, state=self.state)
            if self.branches is not None:  # a start the trunk leaves, a branch's end (before the callbacks)
                done = self.branches.settle(self.state)
                self.settled = done if epoch == self.config.train.epochs else None
        report = replace(report, seconds=time.perf_counter() - started)
        for callback in self.callbacks:
            callback.on_epoch_end(report)

    def epoch_lr(self) -> float:
        """The learning rate the epoch just trained ended at (the first parameter group's): its last step's,
        not the scheduler's next one, which a decay after this epoch has already lowered."""
        initial = self.optimizer.param_groups[0].get("initial_lr", self.config.train.lr)
        return initial * self.schedule.factor(max(self.state.step - 1, 0))

    def epoch_loader(self, epoch: int) -> DataLoader:
        """This worker's batches of epoch ``epoch``: its share of one global order that depends only
        on (seed, epoch), so a resumed run replays it exactly and workers never overlap."""
        train = self.config.train
        return make_loader(
            self.dataset,
            train.batch_size,
            shuffle=True,
            seed=self.epoch_seed(epoch),
            drop_last=True,
            num_workers=train.loader_workers,
            pin_memory=self.device.type == "cuda",
            rank=self.rank,
            world_size=self.world_size,
        )

    def epoch_batches(self, epoch: int) -> Iterable[Batch]:
        """This worker's batches of epoch ``epoch`` (see :meth:`epoch_loader`), from the resident split
        when there is one (already on the device, same order), else from the loader: on a GPU read
        ahead in a background thread and copied from pinned memory (:class:`DevicePrefetcher`)."""
        if self.resident is None:
            loader = self.epoch_loader(epoch)
            return DevicePrefetcher(loader, self.device) if self.device.type == "cuda" else loader
        sampler = ShardedBatchSampler(
            len(self.dataset), self.config.train.batch_size, self.epoch_seed(epoch), self.rank, self.world_size
        )
        return self.resident.batches(sampler)

    def epoch_seed(self, epoch: int) -> int:
        return self.config.seed * 1_000_003 + epoch

    def train_step(self, batch: Batch, epoch: int) -> LossOutput:
        """One optimizer step on ``batch`` (on the device), the LR schedule and the method's after-step;
        returns the method's LossOutput. On a CPU a non-finite loss stops the run before the update (on a
        GPU the epoch's :class:`_StepLog` checks it, without a device sync per step)."""
        with self.precision.autocast():
            output = self.step_module(batch)
        if self.device.type != "cuda" and not torch.isfinite(output.loss):
            raise NonFiniteLossError(f"loss became {output.loss.item()} at epoch {epoch}, step {self.state.step}")
        self.optimizer.zero_grad(set_to_none=True)
        self.precision.backward_step(
            output.loss,
            self.optimizer,
            self.config.train.grad_clip,
            (p for g in self.optimizer.param_groups for p in g["params"]),
        )
        self.scheduler.step()
        self.state.step += 1
        self.method.after_step(self.state.step, self.total_steps)
        return output

    def begin_epoch(self, epoch: int) -> None:
        """Before epoch ``epoch``'s first step: the method in training mode and told the epoch (epoch-scheduled
        losses, re-clustering), and fresh optimizer moments for the parameters it re-initialised."""
        self.method.train()
        self.method.set_epoch(epoch)
        drop_reinitialised_state(self.optimizer)

    def train_epoch(self, epoch: int) -> tuple[float, dict[str, float]]:
        """One pass over this worker's share of the training captions; returns the mean loss and parts."""
        batches = self.epoch_batches(epoch)
        self.begin_epoch(epoch)
        log = _StepLog(epoch, every=1 if self.device.type != "cuda" else CUDA_READ_EVERY)
        interval = step_progress_interval() if self.step_progress_s is None else self.step_progress_s
        counter = StepLogger(
            epoch, self.config.train.epochs, self.steps_per_epoch, interval if self.rank == 0 else 0.0
        )  # one worker speaks for all
        self.progress.epoch_begins(epoch)
        for done, batch in enumerate(batches, 1):  # this worker's share of the epoch's global batches
            batch = batch.to(self.device, non_blocking=True)
            log.add(self.state.step, self.train_step(batch, epoch))
            counter.step(done)
            self.progress.step(epoch, done)
        return log.means()

    def evaluate(self, split: PrecompSplit, protocol: str, method: Scorer | None = None) -> RecallTable:
        return table_from_folds(self.rank_queries(split, protocol, method), get_protocol(protocol).name, split.n_images)

    def rank_queries(self, split: PrecompSplit, protocol: str, method: Scorer | None = None) -> list[Ranks]:
        """The ranks of every fold of ``protocol`` on ``split`` (what a recall table is computed from)."""
        settings, method = self.config.eval, method or self.method
        score_fn = self.precision.score_fn(lambda: method.score_fn(split, self.data.vocab, settings.batch_size))
        return rank_folds(
            score_fn,
            split.n_images,
            protocol=protocol,
            captions_per_image=split.captions_per_image,
            image_chunk=settings.image_chunk,
        )

    def readings(self) -> dict[str, Scorer]:
        """What validation evaluates beside the model, by the prefix of its metrics: the method's other branches
        (a cooperative scheme's ``anchor``) and, with ``eval.log_prehead``, the model read before its projection
        head (``prehead``)."""
        readings: dict[str, Scorer] = dict(self.method.auxiliary_evaluators())
        if self.config.eval.log_prehead:
            readings[PREHEAD] = self.method.exported_model().prehead_reading()
        return readings

    def evaluate_auxiliary(self, split: PrecompSplit, protocol: str) -> dict[str, RecallTable]:
        """Tables of :meth:`readings`, by their prefix."""
        return {name: self.evaluate(split, protocol, reading) for name, reading in self.readings().items()}

    def test(self) -> list[Ranks]:
        """The ranks of the test split's folds, computed once with the best checkpoint's weights."""
        best = self.run_dir / BEST
        if best.is_file():
            self.method.load_state_dict(load_checkpoint(best)["model"])
        with self.progress.evaluating(self.state.epoch, "testing"):
            return self.rank_queries(self.data.test, self.config.eval.test_protocol)

    def test_prehead(self) -> list[Ranks]:
        """With ``eval.log_prehead``, after :meth:`test` (which loads the best checkpoint): the test split's
        ranks read before the projection head, from the checkpoint the run's own reading picked."""
        with self.progress.evaluating(self.state.epoch, "testing"):
            reading = self.method.exported_model().prehead_reading()
            return self.rank_queries(self.data.test, self.config.eval.test_protocol, reading)
