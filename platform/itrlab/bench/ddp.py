"""Data-parallel scaling benchmark (``jobs/bench_ddp.py``): one worker against N Ray Train workers.

Each configuration trains the same experiment on the same data for ``epochs`` epochs under a Ray Train
``TorchTrainer``: ``1 x C/N`` (one worker on one worker's share of the cores), ``1 x C`` (one worker
with all C threads) and ``N x C/N`` (N workers of C/N threads, each reading its own shard of every
epoch's batches, gradients averaged by DDP). Every worker builds
its data, method and :class:`~itrlab.train.loop.Trainer` as a sweep trial does and times its epochs
with :func:`~itrlab.bench.timing.time_epoch` (no evaluation, MLflow off); rank 0's timings are the
configuration's. With N workers an epoch has 1/N of the steps per worker, so adding workers with
their cores should take about 1/N of the time of one worker on one share (``N x C/N`` against
``1 x C/N``); against ``1 x C`` DDP competes with torch's own threading of each step over the cores.
"""

from __future__ import annotations

import json
import logging
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
import torch
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

from itrlab.bench.timing import time_epoch
from itrlab.interrupts import ctrl_c_kept
from itrlab.train.checkpoint import seed_everything

_log = logging.getLogger(__name__)

TIMINGS = "timings.json"


@dataclass(frozen=True)
class ScalingRun:
    workers: int
    threads: int  # torch threads per worker
    epoch_seconds: list[float]
    steps_per_epoch: int  # per worker

    @property
    def median(self) -> float:
        return statistics.median(self.epoch_seconds)


def timing_worker(loop_config: dict[str, Any]) -> None:
    """A Ray Train worker: builds a trial's trainer for its rank and times ``epochs`` training epochs."""
    import ray.train

    from itrlab.assembly import load_experiment
    from itrlab.train import Trainer, prepare_data
    from itrlab.train.experiment import build_run_method

    context = ray.train.get_context()
    rank, world = context.get_world_rank(), context.get_world_size()
    torch.set_num_threads(loop_config["threads"])
    config = load_experiment(loop_config["experiment"], [*loop_config["overrides"], "tracking.enabled=false"])
    run_dir = Path(loop_config["out"]) / f"rank{rank}"
    run_dir.mkdir(parents=True, exist_ok=True)
    data = prepare_data(config, run_dir)
    seed_everything(config.seed)
    device = torch.device("cpu")
    method, _ = build_run_method(config, data, run_dir, device)
    trainer = Trainer(config, method, data, run_dir, rank=rank, world_size=world, device=device)
    seconds = []
    for epoch in range(1, loop_config["epochs"] + 1):
        seconds.append(time_epoch(trainer, epoch, gpu_nvml=False).seconds)
        if rank == 0:
            _log.info(f"{world} worker(s) x {loop_config['threads']} thread(s): epoch {epoch} in {seconds[-1]:.2f} s")
    if rank == 0:
        (Path(loop_config["out"]) / TIMINGS).write_text(
            json.dumps({"epoch_seconds": seconds, "steps_per_epoch": trainer.steps_per_epoch})
        )


def time_scaling(
    experiment: str, overrides: list[str], workers: int, threads: int, epochs: int, out: Path
) -> ScalingRun:
    """Train ``experiment`` with ``workers`` CPU workers of ``threads`` threads; rank 0's epoch times."""
    out.mkdir(parents=True, exist_ok=True)
    trainer = TorchTrainer(
        timing_worker,
        train_loop_config={
            "experiment": experiment,
            "overrides": overrides,
            "threads": threads,
            "epochs": epochs,
            "out": str(out),
        },
        scaling_config=ScalingConfig(num_workers=workers, resources_per_worker={"CPU": threads}),
        run_config=RunConfig(storage_path=str(out / "ray"), name=f"bench_ddp_{workers}x{threads}"),
    )
    with ctrl_c_kept():
        trainer.fit()
    timings = json.loads((out / TIMINGS).read_text())
    return ScalingRun(workers, threads, timings["epoch_seconds"], timings["steps_per_epoch"])


def run_scaling(
    experiment: str, overrides: list[str], workers: int, cores: int, epochs: int, workdir: Path
) -> tuple[ScalingRun, ScalingRun, ScalingRun]:
    """``1 x cores/workers`` (one worker's share of the cores), ``1 x cores`` and ``workers x
    cores/workers``, on one local Ray (with a CPU to spare for each TorchTrainer's controller)."""
    from itrlab.assembly import load_experiment
    from itrlab.config.loader import config_dir
    from itrlab.train.experiment import generate_if_synthetic

    if cores % workers:
        raise ValueError(f"{cores} cores do not split evenly into {workers} workers")
    config = load_experiment(experiment, overrides)  # bad input fails here, before Ray starts
    generate_if_synthetic(config)  # once, before the workers share it
    # the workers may run in another folder
    overrides = [*overrides, f"dataset.root={Path(config.dataset.root).resolve()}"]
    ray.init(
        address="local",
        num_cpus=cores + 1,
        log_to_driver=True,
        runtime_env={"env_vars": {"ITRLAB_CONFIG_DIR": str(config_dir().resolve())}},
    )
    try:
        share = time_scaling(experiment, overrides, 1, cores // workers, epochs, workdir / "share")
        single = time_scaling(experiment, overrides, 1, cores, epochs, workdir / "single")
        parallel = time_scaling(experiment, overrides, workers, cores // workers, epochs, workdir / "parallel")
    finally:
        ray.shutdown()
    return share, single, parallel
