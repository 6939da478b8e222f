"""Data-parallel scaling on this machine: one Ray Train worker against N workers, same data and cores.

    python benchmarks/ddp.py                              # vsepp_synthetic_small, 2 epochs: 1x1, 1x2, 2x1
    python benchmarks/ddp.py -c dbl_synthetic_small --epochs 3
    python benchmarks/ddp.py --workers 4 --cores 4

Each configuration trains the same experiment on the same data for ``epochs`` epochs under a Ray Train
``TorchTrainer`` on a local Ray, one after the other, with the same seed: ``1 x C/N`` (one worker on one worker's
share of the cores), ``1 x C`` (one worker with all C threads) and ``N x C/N`` (N workers of C/N threads, each
reading its own shard of every epoch's batches, gradients averaged by DDP). Every worker builds its data, method
and :class:`~itrlab.train.loop.Trainer` as a sweep trial does and times its epochs (``common.time_epoch``; no
evaluation, MLflow off); rank 0's timings are the configuration's. The report gives each one's median epoch time
and steps per worker, and the ratios: N workers against one worker on one share (the baseline; target: about
1/N, each added worker bringing its cores) and against one worker on all cores (DDP against torch's own
threading of each step over the cores), beside the load average.
"""

from __future__ import annotations

import _bootstrap  # noqa: F401 - first: a python without itrlab says how to start the script

import argparse
import json
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import at_least_one, load_average

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
    import torch

    from common import time_epoch
    from itrlab.assembly import load_experiment
    from itrlab.train import Trainer, prepare_data
    from itrlab.train.checkpoint import seed_everything
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
        seconds.append(time_epoch(trainer, epoch).seconds)
        if rank == 0:
            print(f"{world} worker(s) x {loop_config['threads']} thread(s): epoch {epoch} in {seconds[-1]:.2f} s")
    if rank == 0:
        (Path(loop_config["out"]) / TIMINGS).write_text(
            json.dumps({"epoch_seconds": seconds, "steps_per_epoch": trainer.steps_per_epoch})
        )


def time_scaling(
    experiment: str, overrides: list[str], workers: int, threads: int, epochs: int, out: Path
) -> ScalingRun:
    """Train ``experiment`` with ``workers`` CPU workers of ``threads`` threads; rank 0's epoch times."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from itrlab.interrupts import ctrl_c_kept

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
    import ray

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


def main() -> int:
    from itrlab.config.choices import ChoicesHelpFormatter, experiment_names, list_choices

    class Formatter(ChoicesHelpFormatter, argparse.RawDescriptionHelpFormatter):
        pass

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=Formatter)
    list_choices(
        parser.add_argument(
            "-c", "--config", default="vsepp_synthetic_small", help="experiment (default: %(default)s)"
        ),
        experiment_names,
    )
    parser.add_argument(
        "--epochs", type=at_least_one, default=2, help="timed epochs per configuration (default: %(default)s)"
    )
    parser.add_argument("--workers", type=int, default=2, help="data-parallel workers N (default: %(default)s)")
    parser.add_argument(
        "--cores",
        type=int,
        default=os.cpu_count() or 1,
        help="CPU cores both configurations use (default: this machine's, %(default)s)",
    )
    parser.add_argument("overrides", nargs="*", help="config overrides, key=value")
    args = parser.parse_args()
    if args.workers < 2 or args.cores % args.workers:
        parser.error(f"--workers must be >= 2 and divide --cores ({args.cores})")
    workdir = Path(tempfile.mkdtemp(prefix="itrlab-bench-ddp-"))
    overrides = [*args.overrides, f"output.dir={workdir / 'runs'}"]
    before = load_average()
    share, single, parallel = run_scaling(args.config, overrides, args.workers, args.cores, args.epochs, workdir)

    print(
        f"\n{args.config}: {args.epochs} epochs each, {args.cores} cores; 1-min load average {before:.2f} before, "
        f"{load_average():.2f} after"
    )
    print(f"{'workers x threads':<20} {'steps/worker':>13} {'median epoch (s)':>17}   epochs (s)")
    for run in (share, single, parallel):
        values = ", ".join(f"{s:.2f}" for s in run.epoch_seconds)
        print(f"{f'{run.workers} x {run.threads}':<20} {run.steps_per_epoch:>13} {run.median:>17.2f}   {values}")
    ideal = 1 / parallel.workers
    print(
        f"{parallel.workers} workers / 1 worker on one share of the cores: {parallel.median / share.median:.2f}   "
        f"[ideal {ideal:.2f}: each added worker brings its cores]"
    )
    print(
        f"{parallel.workers} workers / 1 worker on all {args.cores} cores: {parallel.median / single.median:.2f}   "
        f"(DDP against torch's own threading of each step)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
