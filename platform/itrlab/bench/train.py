"""Training throughput benchmark (``jobs/bench_train.py``): epochs against the in-run compute floor.

It builds the experiment's data, method and :class:`~itrlab.train.loop.Trainer` as a run does (in a
temporary run directory, MLflow off), then times ``epochs`` training epochs (no evaluation) on the
current device with the trainer's own batches and step:

* **pairs/s**: the epoch's (image, caption) pairs over its wall time;
* **data wait**: for each step, the time from the end of the previous step until its batch is ready on
  the device (``next()`` on the loader or the resident split, plus the copy), as a share of the step;
  and the epoch's total wait as a share of the epoch (the data path's share of an epoch);
* **busy**: on a GPU, the mean utilisation NVML reports while the epochs run (``torch.cuda``'s
  ``utilization``, which needs ``pynvml``; ``n/a`` without it); on a CPU, the process's CPU time over
  wall time x torch threads;
* **floor**: the same model's ``train_step`` (forward, backward, optimizer step) on batches already on
  the device, cycled, no data loading (``floor_steps`` steps after each epoch);
  **epoch / floor** = epoch time over floor step time x steps per epoch.

Every figure is the median over epochs (per-step shares: over all steps). On a GPU, steps are timed on
the host without a device sync per step (as the trainer runs them); each epoch and floor run ends
with one. ``warmup`` floor steps run untimed first.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from itrlab.config import ExperimentConfig
from itrlab.train.checkpoint import seed_everything
from itrlab.train.device import describe, resolve_device
from itrlab.train.loop import CUDA_READ_EVERY, Trainer, _StepLog


@dataclass
class EpochTiming:
    seconds: float
    steps: int
    pairs: int
    data_wait_seconds: float
    step_wait_shares: list[float]
    busy: float | None

    @property
    def pairs_per_second(self) -> float:
        return self.pairs / self.seconds

    @property
    def data_share(self) -> float:
        return self.data_wait_seconds / self.seconds


@dataclass
class BenchReport:
    experiment: str
    device: str
    precision: str
    data_path: str
    data_path_asked: str
    batch_size: int
    steps_per_epoch: int
    epochs: list[EpochTiming]
    floor_step_seconds: list[float]
    busy_kind: str  # "GPU (NVML)", "CPU (process time)" or "n/a"
    load_before: float
    load_after: float
    notes: list[str] = field(default_factory=list)

    def median(self, attribute: str) -> float:
        return statistics.median(getattr(e, attribute) for e in self.epochs)

    @property
    def floor_step(self) -> float:
        return statistics.median(self.floor_step_seconds)

    @property
    def floor_pairs_per_second(self) -> float:
        return self.batch_size / self.floor_step

    @property
    def floor_ratio(self) -> float:
        return statistics.median(e.seconds / (floor * e.steps) for e, floor in zip(self.epochs, self.floor_step_seconds))

    @property
    def median_step_wait_share(self) -> float:
        return statistics.median(s for e in self.epochs for s in e.step_wait_shares)

    @property
    def busy(self) -> float | None:
        values = [e.busy for e in self.epochs if e.busy is not None]
        return statistics.median(values) if values else None

    def summary(self) -> dict:
        return {"pairs_per_second": self.median("pairs_per_second"), "epoch_seconds": self.median("seconds"),
                "data_share": self.median("data_share"), "median_step_wait_share": self.median_step_wait_share,
                "busy": self.busy, "busy_kind": self.busy_kind, "floor_step_seconds": self.floor_step,
                "floor_pairs_per_second": self.floor_pairs_per_second, "epoch_over_floor": self.floor_ratio}

    def to_dict(self) -> dict:
        return {**asdict(self), "summary": self.summary()}

    def format(self) -> str:
        busy = "n/a" if self.busy is None else f"{100 * self.busy:.0f}%"
        lines = [f"bench_train: {self.experiment} on {self.device}; precision {self.precision}; data path "
                 f"{self.data_path} (train.data_path={self.data_path_asked}); {len(self.epochs)} epoch(s) x "
                 f"{self.epochs[0].steps} steps (of {self.steps_per_epoch}) x batch {self.batch_size}",
                 f"{'epoch':>5}  {'seconds':>8}  {'pairs/s':>9}  {'data wait':>10}  {'median step wait':>17}  {'busy':>6}"]
        for number, e in enumerate(self.epochs, 1):
            step_wait = statistics.median(e.step_wait_shares)
            lines.append(f"{number:>5}  {e.seconds:>8.2f}  {e.pairs_per_second:>9.0f}  {100 * e.data_share:>9.1f}%  "
                         f"{100 * step_wait:>16.1f}%  {'n/a' if e.busy is None else f'{100 * e.busy:.0f}%':>6}")
        lines += [
            f"floor (train_step on batches already on the device): {1000 * self.floor_step:.1f} ms/step, "
            f"{self.floor_pairs_per_second:.0f} pairs/s",
            f"median: {self.median('pairs_per_second'):.0f} pairs/s; data wait {100 * self.median('data_share'):.1f}% "
            f"of the epoch (median step {100 * self.median_step_wait_share:.1f}%); busy {busy} [{self.busy_kind}]; "
            f"epoch / floor {self.floor_ratio:.2f}x",
            f"machine: {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}; 1-min load average "
            f"{self.load_before:.2f} before, {self.load_after:.2f} after (other load skews the timings)",
        ]
        return "\n".join(lines + self.notes)


class _GpuSampler:
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

    def __enter__(self) -> "_GpuSampler":
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def mean(self) -> float | None:
        return statistics.fmean(self.samples) if self.samples else None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_epoch(trainer: Trainer, epoch: int, gpu_nvml: bool, max_steps: int | None = None) -> EpochTiming:
    """One training epoch of ``trainer`` (its first ``max_steps`` steps), timed step by step (the trainer's
    batches and steps)."""
    device = trainer.device
    trainer.method.train()
    trainer.method.set_epoch(epoch)
    log = _StepLog(epoch, every=1 if device.type != "cuda" else CUDA_READ_EVERY)
    waits, shares = 0.0, []
    sampler = _GpuSampler(device) if gpu_nvml else None
    _sync(device)
    cpu_started, started = time.process_time(), time.perf_counter()
    if sampler is not None:
        sampler.__enter__()
    try:
        batches = iter(trainer.epoch_batches(epoch))
        previous_end = time.perf_counter()
        while True:
            batch = next(batches, None) if max_steps is None or len(shares) < max_steps else None
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
        _sync(device)
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
    return EpochTiming(seconds, steps, steps * trainer.config.train.batch_size, waits, shares, busy)


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
    _sync(device)
    started = time.perf_counter()
    for index in range(steps):
        trainer.train_step(batches[index % len(batches)], 0)
    _sync(device)
    return (time.perf_counter() - started) / steps


def run_bench(config: ExperimentConfig, epochs: int = 2, floor_steps: int = 30, warmup: int = 5,
              max_steps: int | None = None, run_dir: Path | None = None) -> BenchReport:
    """Time ``epochs`` training epochs of ``config`` on its device, then the floor (see the module doc)."""
    from itrlab.train.experiment import build_run_method, prepare_data

    config = config.model_copy(deep=True)
    config.tracking.enabled = False
    device = resolve_device(config.train.device)
    with tempfile.TemporaryDirectory(prefix="bench_train_") as tmp:
        directory = run_dir or Path(tmp)
        data = prepare_data(config, directory)
        seed_everything(config.seed)
        method, _ = build_run_method(config, data, directory, device)
        trainer = Trainer(config, method, data, directory, device=device)
        notes = []
        gpu_nvml = _GpuSampler.available(device)
        busy_kind = "GPU (NVML)" if gpu_nvml else ("CPU (process time)" if device.type == "cpu" else "n/a")
        if device.type == "cuda" and not gpu_nvml:
            notes.append("GPU busy share: n/a (torch.cuda.utilization needs pynvml)")
        batches = floor_batches(trainer)
        time_floor(trainer, batches, warmup)  # warm-up: allocator, thread pools, autotuning
        load_before = os.getloadavg()[0]
        timings, floor = [], []
        for epoch in range(1, epochs + 1):  # floor runs between epochs: both see the same machine load
            timings.append(time_epoch(trainer, epoch, gpu_nvml, max_steps))
            floor.append(time_floor(trainer, batches, floor_steps))
        load_after = os.getloadavg()[0]
    return BenchReport(config.name, describe(device), config.train.precision, trainer.data_path,
                       config.train.data_path, config.train.batch_size, trainer.steps_per_epoch, timings, floor,
                       busy_kind, load_before, load_after, notes)


def bench_cli(argv: list[str] | None = None) -> int:
    """``jobs/bench_train.py [-c NAME] [--epochs N] [--precision P] [--data-path D] [key=value ...]``."""
    import argparse
    import json

    from itrlab.assembly import load_experiment
    from itrlab.errors import ItrlabError, report

    parser = argparse.ArgumentParser(description="Time training epochs against the in-run compute floor.")
    parser.add_argument("-c", "--config", default="vsepp_synthetic_small", help="experiment (default vsepp_synthetic_small)")
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs (default 2)")
    parser.add_argument("--precision", choices=["fp32", "bf16", "fp16"], help="train.precision (default: the config's)")
    parser.add_argument("--data-path", choices=["auto", "resident", "loader"], help="train.data_path (default: the config's)")
    parser.add_argument("--floor-steps", type=int, default=30, help="floor steps after each epoch (default 30)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed warm-up steps (default 5)")
    parser.add_argument("--max-steps", type=int, help="time only the first N steps of each epoch")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice; on a CPU shared with "
                        "other jobs, 1 avoids threads waiting on each other)")
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = parser.parse_args(argv)
    overrides = list(args.overrides)
    if args.precision:
        overrides.append(f"train.precision={args.precision}")
    if args.data_path:
        overrides.append(f"train.data_path={args.data_path}")
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        config = load_experiment(args.config, overrides)
        result = run_bench(config, epochs=args.epochs, floor_steps=args.floor_steps, warmup=args.warmup,
                           max_steps=args.max_steps)
    except ItrlabError as err:
        return report(err)
    print(result.format(), flush=True)
    if args.json:
        args.json.write_text(json.dumps(result.to_dict(), indent=2))
    return 0
