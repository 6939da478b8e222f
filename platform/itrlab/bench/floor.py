"""The training throughput benchmark (``jobs/bench_train.py``): epochs against the in-run compute floor.

It times ``epochs`` training epochs (no evaluation) of the experiment on the current device with the
trainer's own batches and step (:mod:`itrlab.bench.timing`), then reports:

* **pairs/s**: the epoch's (image, caption) pairs over its wall time;
* **data wait**: for each step, the time from the end of the previous step until its batch is ready on
  the device, as a share of the step; and the epoch's total wait as a share of the epoch (the data
  path's share of an epoch);
* **busy**: on a GPU, the mean utilisation NVML reports while the epochs run (``torch.cuda``'s
  ``utilization``, which needs ``pynvml``; ``n/a`` without it); on a CPU, the process's CPU time over
  wall time x torch threads;
* **epoch start**: the method's ``set_epoch`` before each epoch (CODER reclusters there from the second
  epoch on), not counted in the epoch;
* **evaluation** (``evaluate``): one evaluation of the test split under the config's test protocol, the
  model as trained by the timed epochs;
* **floor**: the same model's ``train_step`` (forward, backward, optimizer step) on batches already on
  the device, cycled, no data loading (``floor_steps`` steps after each epoch);
  **epoch / floor** = epoch time over floor step time x steps per epoch.

Every figure is the median over epochs (per-step shares: over all steps). ``warmup`` floor steps run
untimed first. :func:`record_throughput` keeps the measured pairs/s for the cost estimates of sweeps'
dry runs.
"""

from __future__ import annotations

import logging
import os
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from itrlab.bench.timing import (
    EpochTiming,
    GpuSampler,
    bench_trainer,
    floor_batches,
    time_epoch,
    time_evaluation,
    time_floor,
)
from itrlab.config import ExperimentConfig
from itrlab.train.device import describe

_log = logging.getLogger(__name__)


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
    evaluation_seconds: float | None = None  # one evaluation of the test split under its protocol (--evaluate)
    evaluation_protocol: str = ""

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
        return statistics.median(
            e.seconds / (floor * e.steps) for e, floor in zip(self.epochs, self.floor_step_seconds)
        )

    @property
    def median_step_wait_share(self) -> float:
        return statistics.median(s for e in self.epochs for s in e.step_wait_shares)

    @property
    def busy(self) -> float | None:
        values = [e.busy for e in self.epochs if e.busy is not None]
        return statistics.median(values) if values else None

    @property
    def epoch_start_seconds(self) -> float:
        """The longest of the epochs' starts (``set_epoch``): CODER reclusters before every epoch from the second."""
        return max(e.start_seconds for e in self.epochs)

    def summary(self) -> dict:
        return {
            "epoch_start_seconds": self.epoch_start_seconds,
            "evaluation_seconds": self.evaluation_seconds,
            "pairs_per_second": self.median("pairs_per_second"),
            "epoch_seconds": self.median("seconds"),
            "data_share": self.median("data_share"),
            "median_step_wait_share": self.median_step_wait_share,
            "busy": self.busy,
            "busy_kind": self.busy_kind,
            "floor_step_seconds": self.floor_step,
            "floor_pairs_per_second": self.floor_pairs_per_second,
            "epoch_over_floor": self.floor_ratio,
        }

    def to_dict(self) -> dict:
        return {**asdict(self), "summary": self.summary()}

    def format(self) -> str:
        busy = "n/a" if self.busy is None else f"{100 * self.busy:.0f}%"
        lines = [
            f"bench_train: {self.experiment} on {self.device}; precision {self.precision}; data path "
            f"{self.data_path} (train.data_path={self.data_path_asked}); {len(self.epochs)} epoch(s) x "
            f"{self.epochs[0].steps} steps (of {self.steps_per_epoch}) x batch {self.batch_size}",
            f"{'epoch':>5}  {'seconds':>8}  {'pairs/s':>9}  {'data wait':>10}  {'median step wait':>17}  {'busy':>6}",
        ]
        for number, e in enumerate(self.epochs, 1):
            step_wait = statistics.median(e.step_wait_shares)
            lines.append(
                f"{number:>5}  {e.seconds:>8.2f}  {e.pairs_per_second:>9.0f}  {100 * e.data_share:>9.1f}%  "
                f"{100 * step_wait:>16.1f}%  {'n/a' if e.busy is None else f'{100 * e.busy:.0f}%':>6}"
            )
        lines += [
            f"floor (train_step on batches already on the device): {1000 * self.floor_step:.1f} ms/step, "
            f"{self.floor_pairs_per_second:.0f} pairs/s",
            f"median: {self.median('pairs_per_second'):.0f} pairs/s; data wait {100 * self.median('data_share'):.1f}% "
            f"of the epoch (median step {100 * self.median_step_wait_share:.1f}%); busy {busy} [{self.busy_kind}]; "
            f"epoch / floor {self.floor_ratio:.2f}x",
            "epoch starts (the method's set_epoch: a reclustering, for one): "
            + ", ".join(f"{e.start_seconds:.2f}" for e in self.epochs)
            + " s",
            *(
                [f"evaluation of the test split ({self.evaluation_protocol}): {self.evaluation_seconds:.2f} s"]
                if self.evaluation_seconds is not None
                else []
            ),
            f"machine: {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}; 1-min load average "
            f"{self.load_before:.2f} before, {self.load_after:.2f} after (other load skews the timings)",
        ]
        return "\n".join(lines + self.notes)


def run_bench(
    config: ExperimentConfig,
    epochs: int = 2,
    floor_steps: int = 30,
    warmup: int = 5,
    max_steps: int | None = None,
    run_dir: Path | None = None,
    evaluate: bool = False,
) -> BenchReport:
    """Time ``epochs`` training epochs of ``config`` on its device, then the floor (see the module doc); with
    ``evaluate``, then one evaluation of the test split under the config's test protocol."""
    with bench_trainer(config, run_dir) as trainer:
        config, device = trainer.config, trainer.device
        notes = []
        gpu_nvml = GpuSampler.available(device)
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
        evaluation_seconds = time_evaluation(trainer) if evaluate else None
        load_after = os.getloadavg()[0]
    return BenchReport(
        config.name,
        describe(device),
        config.train.precision,
        trainer.data_path,
        config.train.data_path,
        config.train.batch_size,
        trainer.steps_per_epoch,
        timings,
        floor,
        busy_kind,
        load_before,
        load_after,
        notes,
        evaluation_seconds,
        config.eval.test_protocol if evaluate else "",
    )


def record_throughput(config, result: BenchReport) -> None:
    """The measured pairs per second, for the cost estimates of sweeps' dry runs (itrlab.train.throughput)."""
    from itrlab.data.shape import data_shape
    from itrlab.train.throughput import record, training_shape

    splits = config.dataset.splits
    shape = data_shape(config.dataset.root, (splits.train, splits.val, splits.test), config.dataset.captions_per_image)
    path = record(
        result.device, training_shape(config, shape.regions, shape.feature_dim), result.median("pairs_per_second")
    )
    _log.info(f"bench_train: recorded in {path} (what `jobs/sweep.py --dry-run` estimates costs from)")
