"""The training loop of one run: epochs of optimizer steps, validation, checkpoints, resume.

After every epoch the trainer validates on the val split, writes ``last.pt`` (everything needed to
continue) and, when the validation rsum improved, ``best.pt``. ``fit`` continues from ``last.pt``
when the run directory has one: the epoch counter, the optimizer, the LR schedule (a function of
the global step) and the RNG states all carry on. ``test`` evaluates once, with the best weights.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import torch
from torch.utils.data import DataLoader

from itrlab.config import ExperimentConfig
from itrlab.data import CaptionDataset, PrecompSplit, Vocabulary, make_loader
from itrlab.errors import ItrlabError
from itrlab.eval import RecallTable, evaluate
from itrlab.methods import MethodModule
from itrlab.train.device import resolve_device
from itrlab.train.checkpoint import BEST, LAST, MODEL, TrainState, load_checkpoint, save_checkpoint, set_rng_state
from itrlab.train.schedule import StepDecaySchedule


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
    device: torch.device | None = None  # None: train.device (Ray Train workers pass their own)

    def __post_init__(self) -> None:
        train = self.config.train
        self.device = self.device or resolve_device(train.device)
        self.method.to(self.device)
        self.dataset = CaptionDataset(self.data.train, self.data.vocab, max_len=self.config.model.text.max_len,
                                      extra_fields=self.method.batch_extras())
        self.steps_per_epoch = len(self.dataset) // train.batch_size // self.world_size
        if self.steps_per_epoch == 0:
            raise ValueError(f"{len(self.dataset)} captions make no batch of {train.batch_size} per worker "
                             f"for {self.world_size} workers")
        self.step_module = self.method
        if self.world_size > 1:  # gradients averaged across workers in backward
            self.step_module = torch.nn.parallel.DistributedDataParallel(
                self.method, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        self.schedule = StepDecaySchedule(self.steps_per_epoch, tuple(train.lr_decay_epochs), train.lr_decay, train.warmup_steps)
        self.total_steps = self.steps_per_epoch * train.epochs
        self.optimizer = torch.optim.Adam(self.method.param_groups(train.lr), lr=train.lr, weight_decay=train.weight_decay)
        self.state = TrainState()
        if (self.run_dir / LAST).is_file():
            self._restore(load_checkpoint(self.run_dir / LAST))
        self.scheduler = self.schedule.scheduler(self.optimizer, last_step=self.state.step)

    def _restore(self, checkpoint: dict) -> None:
        self.method.load_state_dict(checkpoint["model"])
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        self.state = checkpoint["state"]
        set_rng_state(checkpoint["rng"])

    @property
    def resumed_from_epoch(self) -> int:
        return self.state.epoch

    def fit(self) -> TrainState:
        for epoch in range(self.state.epoch + 1, self.config.train.epochs + 1):
            started = time.perf_counter()
            loss, parts = self.train_epoch(epoch)
            val = self.evaluate(self.data.val, self.config.eval.val_protocol)
            auxiliary = self.evaluate_auxiliary(self.data.val, self.config.eval.val_protocol)
            is_best = val.rsum > self.state.best_rsum
            self.state.epoch, self.state.history = epoch, [*self.state.history, {"epoch": epoch, "loss": loss, **val.metrics()}]
            if is_best:
                self.state.best_rsum, self.state.best_epoch = val.rsum, epoch
            if self.rank == 0:  # the workers' weights are identical: one writes
                if is_best:
                    save_checkpoint(self.run_dir / BEST, model=self.method, optimizer=None, state=self.state)
                    save_checkpoint(self.run_dir / MODEL, model=self.method.exported_model(), optimizer=None, state=self.state)
                save_checkpoint(self.run_dir / LAST, model=self.method, optimizer=self.optimizer, state=self.state)
            report = EpochReport(epoch, self.config.train.epochs, self.state.step, self.scheduler.get_last_lr()[0],
                                 loss, parts, val, is_best, self.state.best_rsum, time.perf_counter() - started,
                                 auxiliary)
            for callback in self.callbacks:
                callback.on_epoch_end(report)
        return self.state

    def epoch_loader(self, epoch: int) -> DataLoader:
        """This worker's batches of epoch ``epoch``: its share of one global order that depends only
        on (seed, epoch), so a resumed run replays it exactly and workers never overlap."""
        train = self.config.train
        seed = self.config.seed * 1_000_003 + epoch
        return make_loader(self.dataset, train.batch_size, shuffle=True, seed=seed, drop_last=True,
                           num_workers=train.loader_workers, pin_memory=self.device.type == "cuda",
                           rank=self.rank, world_size=self.world_size)

    def train_epoch(self, epoch: int) -> tuple[float, dict[str, float]]:
        """One pass over this worker's share of the training captions; returns the mean loss and parts."""
        train = self.config.train
        loader = self.epoch_loader(epoch)
        self.method.train()
        self.method.set_epoch(epoch)
        total, sums, count = 0.0, defaultdict(float), 0
        for batch in loader:  # this worker's share of the epoch's global batches
            batch = batch.to(self.device, non_blocking=True)
            output = self.step_module(batch)
            if not torch.isfinite(output.loss):
                raise NonFiniteLossError(f"loss became {output.loss.item()} at epoch {epoch}, step {self.state.step}")
            self.optimizer.zero_grad(set_to_none=True)
            output.loss.backward()
            if train.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_([p for g in self.optimizer.param_groups for p in g["params"]], train.grad_clip)
            self.optimizer.step()
            self.scheduler.step()
            self.state.step += 1
            self.method.after_step(self.state.step, self.total_steps)
            total += output.loss.item()
            for name, value in output.parts.items():
                sums[name] += float(value)
            count += 1
        return total / count, {name: value / count for name, value in sums.items()}

    def evaluate(self, split: PrecompSplit, protocol: str, method: MethodModule | None = None) -> RecallTable:
        settings = self.config.eval
        score_fn = (method or self.method).score_fn(split, self.data.vocab, settings.batch_size)
        return evaluate(score_fn, split.n_images, protocol=protocol,
                        captions_per_image=split.captions_per_image, image_chunk=settings.image_chunk)

    def evaluate_auxiliary(self, split: PrecompSplit, protocol: str) -> dict[str, RecallTable]:
        """Tables of the method's other branches (a cooperative scheme's anchors)."""
        return {name: self.evaluate(split, protocol, branch)
                for name, branch in self.method.auxiliary_evaluators().items()}

    def test(self) -> RecallTable:
        """The test table, computed once with the best checkpoint's weights."""
        best = self.run_dir / BEST
        if best.is_file():
            self.method.load_state_dict(load_checkpoint(best)["model"])
        return self.evaluate(self.data.test, self.config.eval.test_protocol)

