"""Timing a training epoch and the in-run compute floor: the measuring parts of the training benchmarks.

:func:`bench_trainer` builds the experiment's data, method and :class:`~itrlab.train.loop.Trainer` as a
run does (in a temporary run directory, MLflow off). :func:`time_epoch` times one training epoch (no
evaluation) with the trainer's own batches and step: the method's ``set_epoch`` before it (where CODER
reclusters), its wall time, for each step the time from the end
of the previous step until its batch is ready on the device (``next()`` on the loader or the resident
split, plus the copy), and how busy the device was (on a GPU the mean utilisation NVML reports, which
needs ``pynvml``; on a CPU the process's CPU time over wall time x torch threads). :func:`time_floor`
times the same model's ``train_step`` on batches already on the device, cycled, no data loading. On a
GPU, steps are timed on the host without a device sync per step (as the trainer runs them); each epoch
and floor run ends with one. Used by :mod:`itrlab.bench.floor`, :mod:`itrlab.bench.busy` and
:mod:`itrlab.bench.ddp`.
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from itrlab import threads as thread_policy
from itrlab.config import ExperimentConfig
from itrlab.train.checkpoint import seed_everything
from itrlab.train.device import resolve_device
from itrlab.train.loop import CUDA_READ_EVERY, Trainer, _StepLog


@dataclass
class EpochTiming:
    seconds: float
    steps: int
    pairs: int
    data_wait_seconds: float
    step_wait_shares: list[float]
    busy: float | None
    start_seconds: float = 0.0  # the method's set_epoch before the epoch (CODER's reclustering), not counted in seconds

    @property
    def pairs_per_second(self) -> float:
        return self.pairs / self.seconds

    @property
    def data_share(self) -> float:
        return self.data_wait_seconds / self.seconds


class GpuSampler:
    """Mean GPU utilisation over a span, sampled by NVML in a thread (None when NVML is unavailable)."""

    def __init__(self, device: torch.device, interval: float = 0.05):
        self.device, self.interval = device, interval
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @staticmethod
    def available(device: torch.device) -> bool:
        if device.type != "cuda":
            return False
        try:
            torch.cuda.utilization(device)
            return True
        except Exception:  # no pynvml / NVML
            return False

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.samples.append(torch.cuda.utilization(self.device) / 100.0)

    def __enter__(self) -> GpuSampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def mean(self) -> float | None:
        return statistics.fmean(self.samples) if self.samples else None


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_epoch(
    trainer: Trainer, epoch: int, gpu_nvml: bool, max_steps: int | None = None, time_limit: float | None = None
) -> EpochTiming:
    """One training epoch of ``trainer`` (its first ``max_steps`` steps), timed step by step (the trainer's
    batches and steps); it stops after the first step that ends past ``time_limit`` seconds."""
    device = trainer.device
    trainer.method.train()
    sync(device)
    start_began = time.perf_counter()
    trainer.method.set_epoch(epoch)
    sync(device)
    start_seconds = time.perf_counter() - start_began
    log = _StepLog(epoch, every=1 if device.type != "cuda" else CUDA_READ_EVERY)
    waits, shares = 0.0, []
    sampler = GpuSampler(device) if gpu_nvml else None
    sync(device)
    cpu_started, started = time.process_time(), time.perf_counter()
    if sampler is not None:
        sampler.__enter__()
    try:
        batches = iter(trainer.epoch_batches(epoch))
        previous_end = time.perf_counter()
        while True:
            over = time_limit is not None and previous_end - started > time_limit
            batch = next(batches, None) if (max_steps is None or len(shares) < max_steps) and not over else None
            if batch is None:
                break
            batch = batch.to(device, non_blocking=True)
            ready = time.perf_counter()
            log.add(trainer.state.step, trainer.train_step(batch, epoch))
            end = time.perf_counter()
            waits += ready - previous_end
            shares.append((ready - previous_end) / (end - previous_end))
            previous_end = end
        log.means()
        sync(device)
    finally:
        if sampler is not None:
            sampler.__exit__(None, None, None)
    seconds = time.perf_counter() - started
    if sampler is not None:
        busy = sampler.mean()
    elif device.type == "cpu":
        busy = (time.process_time() - cpu_started) / (seconds * torch.get_num_threads())
    else:
        busy = None
    steps = len(shares)
    return EpochTiming(seconds, steps, steps * trainer.config.train.batch_size, waits, shares, busy, start_seconds)


def floor_batches(trainer: Trainer, n_batches: int = 8) -> list:
    """The first ``n_batches`` batches of epoch 1, on the device: the floor's inputs."""
    batches = []
    for batch in trainer.epoch_batches(1):
        batches.append(batch.to(trainer.device))
        if len(batches) == n_batches:
            break
    return batches


def time_floor(trainer: Trainer, batches: list, steps: int) -> float:
    """Seconds per ``train_step`` on ``batches`` already on the device, cycled: ``steps`` steps timed
    together (one device sync at each end), no data loading."""
    device = trainer.device
    trainer.method.train()
    sync(device)
    started = time.perf_counter()
    for index in range(steps):
        trainer.train_step(batches[index % len(batches)], 0)
    sync(device)
    return (time.perf_counter() - started) / steps


def time_evaluation(trainer: Trainer) -> float:
    """Seconds of one evaluation of the test split under the config's test protocol (the trainer's own)."""
    trainer.method.eval()
    sync(trainer.device)
    started = time.perf_counter()
    trainer.evaluate(trainer.data.test, trainer.config.eval.test_protocol)
    sync(trainer.device)
    return time.perf_counter() - started


@contextlib.contextmanager
def bench_trainer(config: ExperimentConfig, run_dir: Path | None = None) -> Iterator[Trainer]:
    """A :class:`Trainer` for ``config`` built as a run builds it (MLflow off, in a temporary run directory
    unless ``run_dir``), torch's threads set by the thread policy (``train.threads``)."""
    from itrlab.train.experiment import build_run_method, prepare_data

    config = config.model_copy(deep=True)
    config.tracking.enabled = False
    device = resolve_device(config.train.device)
    thread_policy.apply(config.train.threads)
    with tempfile.TemporaryDirectory(prefix="bench_train_") as tmp:
        directory = run_dir or Path(tmp)
        data = prepare_data(config, directory)
        seed_everything(config.seed)
        method, _ = build_run_method(config, data, directory, device)
        yield Trainer(config, method, data, directory, device=device)
