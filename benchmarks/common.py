"""What the benchmarks share: a trainer built as a run builds it, a training epoch timed step by step, the in-run
compute floor, the device's busy share, and the machine's load beside every time.

:func:`bench_trainer` builds the experiment's data, method and :class:`~itrlab.train.loop.Trainer` as a run does
(in a temporary run directory, MLflow off). :func:`time_epoch` times one training epoch (no evaluation) with the
trainer's own batches and step: the method's ``set_epoch`` before it (where CODER reclusters), its wall time, for
each step the time from the end of the previous step until its batch is ready on the device (``next()`` on the
loader or the resident split, plus the copy), and how busy the device was (:class:`BusySampler`). On a GPU, steps
are timed on the host without a device sync per step (as the trainer runs them); each epoch ends with one.

:func:`time_steps` times a step function with ``torch.utils.benchmark.Timer`` (which syncs the accelerator at
each end of the timed block): :func:`time_floor`, the same model's ``train_step`` on batches already on the
device, cycled, no data loading; and grouped training's steps (``group.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import os
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from itrlab.config import ExperimentConfig
    from itrlab.train.loop import Trainer

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"


def at_least_one(text: str) -> int:
    """An argparse type: an integer >= 1 (a count of steps, epochs, trials or repeats)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is less than 1")
    return value


def load_average() -> float:
    """The machine's 1-minute load average: quoted beside every time (other load skews timings)."""
    return os.getloadavg()[0]


def machine(before: float, after: float) -> str:
    """The line quoted beside a benchmark's times: CPUs, torch threads, the load average before and after."""
    import torch

    return (
        f"machine: {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}; 1-min load average "
        f"{before:.2f} before, {after:.2f} after (other load skews the timings)"
    )


def sync(device: torch.device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


class BusySampler:
    """How busy the device was over a ``with`` block: on a GPU its mean utilisation, sampled in a thread by NVML
    (``torch.cuda.utilization``, which needs pynvml), else by ``nvidia-smi``; on a CPU the process's CPU time
    over wall time x torch threads. :attr:`kind` says which (``n/a``: neither tool answers)."""

    def __init__(self, device: torch.device, interval: float = 0.1):
        self.device, self.interval = device, interval
        self.samples: list[float] = []
        self._stop = threading.Event()
        self.kind = "CPU (process time)" if device.type == "cpu" else "n/a"
        self.read = self._reader() if device.type == "cuda" else None

    def _reader(self) -> Callable[[], float] | None:
        import torch

        try:
            torch.cuda.utilization(self.device)
            self.kind = "GPU (NVML)"
            return lambda: torch.cuda.utilization(self.device) / 100.0
        except Exception:  # noqa: BLE001 - no pynvml: the driver's own tool
            index = self.device.index or 0
            command = ["nvidia-smi", f"--id={index}", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"]
            read = lambda: float(subprocess.run(command, capture_output=True, text=True, timeout=5).stdout) / 100.0  # noqa: E731
            try:
                read()
            except Exception:  # noqa: BLE001
                return None
            self.kind = "GPU (nvidia-smi)"
            return read

    def __enter__(self) -> BusySampler:
        self.cpu, self.wall = time.process_time(), time.perf_counter()
        if self.read is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with contextlib.suppress(Exception):
                self.samples.append(self.read())

    def __exit__(self, *exc) -> None:
        self.cpu, self.wall = time.process_time() - self.cpu, time.perf_counter() - self.wall
        if self.read is not None:
            self._stop.set()
            self._thread.join()

    @property
    def busy(self) -> float | None:
        import torch

        if self.device.type == "cpu":
            return self.cpu / (self.wall * torch.get_num_threads())
        return statistics.fmean(self.samples) if self.samples else None


def time_steps(step: Callable[[], object], steps: int) -> float:
    """Seconds per call of ``step``: ``steps`` calls timed as one block by ``torch.utils.benchmark.Timer`` (after
    its own two warm-up calls; the accelerator synced at each end), at this process's torch threads."""
    import torch
    from torch.utils import benchmark

    timer = benchmark.Timer("step()", globals={"step": step}, num_threads=torch.get_num_threads())
    return timer.timeit(steps).median


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


def time_epoch(
    trainer: Trainer, epoch: int, max_steps: int | None = None, time_limit: float | None = None
) -> EpochTiming:
    """One training epoch of ``trainer`` (its first ``max_steps`` steps), timed step by step (the trainer's
    batches and steps); it stops after the first step that ends past ``time_limit`` seconds."""
    from itrlab.train.loop import CUDA_READ_EVERY, _StepLog

    device = trainer.device
    trainer.method.train()
    sync(device)
    start_began = time.perf_counter()
    trainer.method.set_epoch(epoch)
    sync(device)
    start_seconds = time.perf_counter() - start_began
    log = _StepLog(epoch, every=1 if device.type != "cuda" else CUDA_READ_EVERY)
    waits, shares = 0.0, []
    with BusySampler(device) as sampler:
        started = time.perf_counter()
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
        seconds = time.perf_counter() - started
    steps = len(shares)
    return EpochTiming(
        seconds, steps, steps * trainer.config.train.batch_size, waits, shares, sampler.busy, start_seconds
    )


def floor_batches(trainer: Trainer, n_batches: int = 8) -> list:
    """The first ``n_batches`` batches of epoch 1, on the device: the floor's inputs."""
    return [batch.to(trainer.device) for batch in itertools.islice(trainer.epoch_batches(1), n_batches)]


def time_floor(trainer: Trainer, batches: list, steps: int) -> float:
    """Seconds per ``train_step`` on ``batches`` already on the device, cycled, no data loading (:func:`time_steps`)."""
    trainer.method.train()
    cycle = itertools.cycle(batches)
    return time_steps(lambda: trainer.train_step(next(cycle), 0), steps)


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
    from itrlab import threads as thread_policy
    from itrlab.train.checkpoint import seed_everything
    from itrlab.train.device import resolve_device
    from itrlab.train.experiment import build_run_method, prepare_data
    from itrlab.train.loop import Trainer

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
